"""Graph passes in order, per optimisation level. Every pass is a pure Graph -> Graph function.

Every level ends by partitioning the graph into groups (one kernel per group), because lowering
works on groups: below level 3 each op is its own group, at level 3 ops are fused.
dead_code_elimination is not listed: a Graph only holds what its outputs reach, so no dead code
survives any pass (see eliminate.py).
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.graph.ir import Graph
from compiler.graph.passes.eliminate import common_subexpression_elimination, dead_code_elimination
from compiler.graph.passes.fold_batch_norm import fold_batch_norm
from compiler.graph.passes.fold_constants import fold_constants
from compiler.graph.passes.fuse import Group, partition, print_fused
from compiler.graph.passes.pointwise_matmul import pointwise_conv_to_matmul
from compiler.graph.passes.simplify import simplify

Pass = Callable[[Graph], Graph]


def one_kernel_per_op(graph: Graph) -> Graph:
    return partition(graph, fuse=False)


def fuse_ops(graph: Graph) -> Graph:
    return partition(graph, fuse=True)


_LEVEL_0: list[tuple[str, Pass]] = [
    ("one_kernel_per_op", one_kernel_per_op),  # what compiling needs: every op becomes one kernel
]
_LEVEL_1: list[tuple[str, Pass]] = [
    (
        "fold_constants",
        fold_constants,
    ),  # compute-once values (weight transposes, shape math) become constants
    ("one_kernel_per_op", one_kernel_per_op),
]
_LEVEL_2: list[tuple[str, Pass]] = [
    ("fold_constants", fold_constants),
    ("simplify", simplify),  # drop no-op reshapes/casts/x*1/x+0, merge reshape and transpose chains
    ("fold_batch_norm", fold_batch_norm),  # BN scales conv/matmul weights; the rest become mul + add
    # 1x1 convs over large planes -> matmul on the NCHW planes, epilogue included; then the
    # reshapes this leaves between two such layers cancel out
    ("pointwise_conv_to_matmul", pointwise_conv_to_matmul),
    ("simplify_reshapes", simplify),
    ("common_subexpression_elimination", common_subexpression_elimination),  # merge equal consts and calls
    ("one_kernel_per_op", one_kernel_per_op),
]
_LEVEL_3: list[tuple[str, Pass]] = [
    *_LEVEL_2[:-1],
    ("fuse_ops", fuse_ops),  # anchor + elementwise epilogue and injective chains become one kernel each
]
PASSES_BY_LEVEL: dict[int, list[tuple[str, Pass]]] = {0: _LEVEL_0, 1: _LEVEL_1, 2: _LEVEL_2, 3: _LEVEL_3}


def run_passes(
    graph: Graph, level: int, on_pass: Callable[[str, Graph], None] | None = None
) -> tuple[Graph, list[str]]:
    """Run the passes of `level` in order; returns the fused graph and the names of the passes that
    ran. `on_pass(name, graph)` sees the graph after each pass (for IR dumps)."""
    if level not in PASSES_BY_LEVEL:
        raise ValueError(f"opt level must be one of {sorted(PASSES_BY_LEVEL)}, got {level}")
    ran: list[str] = []
    for name, fn in PASSES_BY_LEVEL[level]:
        graph = fn(graph)
        ran.append(name)
        if on_pass is not None:
            on_pass(name, graph)
    return graph, ran


__all__ = [
    "PASSES_BY_LEVEL",
    "Group",
    "common_subexpression_elimination",
    "dead_code_elimination",
    "fold_batch_norm",
    "fold_constants",
    "fuse_ops",
    "one_kernel_per_op",
    "partition",
    "pointwise_conv_to_matmul",
    "print_fused",
    "run_passes",
    "simplify",
]
