"""Graph passes in order, per optimisation level. Every pass is a pure Graph -> Graph function.

Every level ends by partitioning the graph into groups (one kernel per group), because lowering
works on groups: below level 3 each op is its own group, at level 3 ops are fused.
dead_code_elimination is not listed: a Graph only holds what its outputs reach, so no dead code
survives any pass (see eliminate.py).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from compiler.graph.ir import Graph
from compiler.graph.passes import (
    alter_layout,
    conv_algorithm,
    conv_transpose_phases,
    pointwise_matmul,
    quantized_kernels,
)
from compiler.graph.passes.alter_layout import alter_conv_layout
from compiler.graph.passes.conv_algorithm import MIN_FLOPS_SAVED_PER_BYTE, choose_conv_algorithm
from compiler.graph.passes.conv_transpose_phases import conv_transpose_to_conv
from compiler.graph.passes.eliminate import common_subexpression_elimination, dead_code_elimination
from compiler.graph.passes.fold_batch_norm import fold_batch_norm
from compiler.graph.passes.fold_constants import fold_constants
from compiler.graph.passes.fuse import Group, partition, print_fused
from compiler.graph.passes.pointwise_matmul import pointwise_conv_to_matmul
from compiler.graph.passes.pointwise_rows import pointwise_conv_rows
from compiler.graph.passes.quantized_kernels import integer_kernels
from compiler.graph.passes.simplify import simplify


@dataclass(frozen=True)
class PassContext:
    """What target-dependent passes know of the target."""

    # channels per block of the NCHW{b}c layout: the target's float32 vector lanes (0 or 1: none)
    channel_block: int = 0
    # convs (node names) that stay direct whatever the rule says: tuning measured them faster so
    direct_convs: frozenset[str] = frozenset()
    # convs that run as Winograd though the cost rule keeps them direct: tuning measured them faster so
    winograd_convs: frozenset[str] = frozenset()
    # FLOPs Winograd must save per weight byte it adds on the target (conv_algorithm.flops_bar)
    winograd_bar: float = MIN_FLOPS_SAVED_PER_BYTE
    # the target's u8 x s8 instruction at the channel block's width (Target.dot_instructions), if any:
    # quantized convs and matmuls then run on 8-bit integer kernels
    dot_instruction: str | None = None


Pass = Callable[[Graph, PassContext], Graph]


def _plain(fn: Callable[[Graph], Graph]) -> Pass:
    """A pass that needs nothing of the target."""
    return lambda graph, _ctx: fn(graph)


def one_kernel_per_op(graph: Graph) -> Graph:
    return partition(graph, fuse=False)


def fuse_ops(graph: Graph) -> Graph:
    return partition(graph, fuse=True)


# (named apart from their modules, which a package attribute of the same name would hide)
def _alter_layout(graph: Graph, ctx: PassContext) -> Graph:
    return alter_conv_layout(graph, ctx.channel_block)


def _quantized_kernels_pass(graph: Graph, ctx: PassContext) -> Graph:
    return integer_kernels(graph, ctx.dot_instruction, ctx.winograd_bar)


def _conv_algorithm(graph: Graph, ctx: PassContext) -> Graph:
    return choose_conv_algorithm(graph, ctx.direct_convs, ctx.winograd_convs, ctx.winograd_bar)


_LEVEL_0: list[tuple[str, Pass]] = [
    ("one_kernel_per_op", _plain(one_kernel_per_op)),  # what compiling needs: every op becomes one kernel
]
_LEVEL_1: list[tuple[str, Pass]] = [
    ("fold_constants", _plain(fold_constants)),  # compute-once values (weight transposes, shape math)
    ("one_kernel_per_op", _plain(one_kernel_per_op)),
]
_LEVEL_2: list[tuple[str, Pass]] = [
    ("fold_constants", _plain(fold_constants)),
    ("simplify", _plain(simplify)),  # no-op reshapes, x*1, x+0; merged reshapes; pow by 2, 3...
    ("fold_batch_norm", _plain(fold_batch_norm)),  # BN scales conv/matmul weights; the rest become mul + add
    # transposed convs -> one conv over their output phases, interleaved (depth to space) and cropped
    ("conv_transpose_phases", _plain(conv_transpose_to_conv)),
    # conv chains (with their epilogues, pooling and concats) in NCHW{b}c, weights pre-packed
    ("alter_layout", _alter_layout),
    # blocked convs of quantized tensors with 8-bit weights -> integer convs (VNNI), float epilogue
    ("quantized_kernels", _quantized_kernels_pass),
    # 3x3 stride-1 blocked convs with enough channels -> Winograd F(4x4 or 2x2, 3x3), weights transformed
    ("conv_algorithm", _conv_algorithm),
    # 1x1 convs over large planes -> matmul on the NCHW planes, epilogue included; then the
    # reshapes this leaves between two such layers cancel out
    ("pointwise_conv_to_matmul", _plain(pointwise_conv_to_matmul)),
    # blocked 1x1 convs over small planes -> the same conv over the plane as one row of pixels
    ("pointwise_conv_rows", _plain(pointwise_conv_rows)),
    ("simplify_reshapes", _plain(simplify)),
    (
        "common_subexpression_elimination",
        _plain(common_subexpression_elimination),
    ),  # merge equal consts and calls
    ("one_kernel_per_op", _plain(one_kernel_per_op)),
]
_LEVEL_3: list[tuple[str, Pass]] = [
    *_LEVEL_2[:-1],
    # anchor + elementwise epilogue and injective chains become one kernel each
    ("fuse_ops", _plain(fuse_ops)),
]
PASSES_BY_LEVEL: dict[int, list[tuple[str, Pass]]] = {0: _LEVEL_0, 1: _LEVEL_1, 2: _LEVEL_2, 3: _LEVEL_3}


PARTITIONS = ("one_kernel_per_op", "fuse_ops")


def graph_passes(level: int) -> list[tuple[str, Pass]]:
    """The passes of `level` that rewrite the graph: all but its closing partition."""
    return [(name, fn) for name, fn in PASSES_BY_LEVEL[level] if name not in PARTITIONS]


def partition_pass(level: int) -> tuple[str, Pass]:
    """The pass that closes `level`: the partition of the graph into kernels."""
    name, fn = PASSES_BY_LEVEL[level][-1]
    assert name in PARTITIONS
    return name, fn


# which pass may turn which graph op into which (each pass module declares its REWRITES)
REWRITING_PASSES = {
    "alter_layout": alter_layout.REWRITES,
    "conv_algorithm": conv_algorithm.REWRITES,
    "conv_transpose_phases": conv_transpose_phases.REWRITES,
    "pointwise_conv_to_matmul": pointwise_matmul.REWRITES,
    "quantized_kernels": quantized_kernels.REWRITES,
}


def implementations(op: str) -> list[tuple[str, str]]:
    """The graph ops a node imported as `op` may run as, each with the pass that makes it ("" for
    `op` itself): the implementations the passes choose between."""
    found = [(op, "")]
    for current, _ in found:
        for name, rewrites in REWRITING_PASSES.items():
            target = rewrites.get(current)
            if target is not None and all(target != seen for seen, _ in found):
                found.append((target, name))
    return found


def optional_passes() -> list[str]:
    """Every pass a user may turn off: all but the partition that makes kernels."""
    return [name for name, _ in PASSES_BY_LEVEL[3] if name not in PARTITIONS]


def check_disabled(disabled: Collection[str]) -> None:
    """ValueError naming each pass that cannot be disabled (unknown, or the partition)."""
    bad = sorted(set(disabled) - set(optional_passes()))
    if bad:
        raise ValueError(
            f"cannot disable pass {', '.join(repr(b) for b in bad)}: passes that can be disabled are "
            f"{', '.join(optional_passes())} (the partition into kernels is what --opt-level chooses)"
        )


def run_passes(
    graph: Graph,
    level: int,
    on_pass: Callable[[str, Graph], None] | None = None,
    context: PassContext | None = None,
    disabled: Collection[str] = (),
) -> tuple[Graph, list[str]]:
    """Run the passes of `level` in order, but the `disabled` ones; returns the fused graph and the
    names of the passes that ran. `on_pass(name, graph)` sees the graph after each pass (IR dumps)."""
    if level not in PASSES_BY_LEVEL:
        raise ValueError(f"opt level must be one of {sorted(PASSES_BY_LEVEL)}, got {level}")
    check_disabled(disabled)
    ctx = context or PassContext()
    ran: list[str] = []
    for name, fn in PASSES_BY_LEVEL[level]:
        if name in disabled:
            continue
        graph = fn(graph, ctx)
        ran.append(name)
        if on_pass is not None:
            on_pass(name, graph)
    return graph, ran


__all__ = [
    "PASSES_BY_LEVEL",
    "Group",
    "PassContext",
    "alter_conv_layout",
    "check_disabled",
    "common_subexpression_elimination",
    "conv_transpose_to_conv",
    "dead_code_elimination",
    "fold_batch_norm",
    "fold_constants",
    "fuse_ops",
    "graph_passes",
    "implementations",
    "one_kernel_per_op",
    "optional_passes",
    "partition",
    "partition_pass",
    "pointwise_conv_rows",
    "pointwise_conv_to_matmul",
    "print_fused",
    "run_passes",
    "simplify",
]
