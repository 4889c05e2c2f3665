"""The whole compilation path, one named stage per line.

ONNX -> graph -> optimized graph -> fused groups -> TIR per group -> scheduled TIR -> LLVM ->
shared library -> artifact. `inspect_model` stops at any stage and prints it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import onnx

from compiler.codegen.library import CodeLibrary
from compiler.errors import CompilerError, OverrideError, UnknownNodeError
from compiler.frontend.onnx import import_model
from compiler.graph.ir import Call, Const, Graph
from compiler.graph.passes import PARTITIONS, Group, PassContext, check_disabled, run_passes
from compiler.graph.passes.alter_layout import layout_report
from compiler.graph.passes.conv_algorithm import algorithm_report
from compiler.graph.passes.fuse import print_fused
from compiler.graph.printer import print_graph
from compiler.kernels import Kernel, ScheduleChoice, ScheduleSource, Workload, build_kernels, lower_group
from compiler.limits import DEFAULT_LIMITS, Limits
from compiler.planner import make_plan
from compiler.runtime.archive import write_artifact
from compiler.target import Target, parse_target
from compiler.tir.printer import func_str
from compiler.version import __version__

STAGES = ("graph", "optimized", "fused", "tir", "scheduled", "llvm", "asm")
ModelInput = bytes | str | os.PathLike[str] | onnx.ModelProto


@dataclass(frozen=True)
class CompileOptions:
    target: str = "host"
    opt_level: int = 3
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    dump_ir: str | None = None
    # node name -> schedule to force for the kernel containing that node (per-node override)
    overrides: Mapping[str, ScheduleChoice] = field(default_factory=dict)
    # how much a model may ask for (tensor sizes, node count, nesting): see compiler.limits
    limits: Limits = DEFAULT_LIMITS
    # a model given as a path may keep weights in external data files next to it (never outside
    # its directory); False refuses them, as a model given as bytes always does
    external_data: bool = True
    # graph passes to skip (see compiler.graph.passes.optional_passes), e.g. {"alter_layout"}
    disabled_passes: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not 0 <= self.opt_level <= 3:
            raise CompilerError(f"opt level must be 0..3, got {self.opt_level}")
        object.__setattr__(self, "disabled_passes", frozenset(self.disabled_passes))
        try:
            check_disabled(self.disabled_passes)
        except ValueError as e:
            raise CompilerError(str(e)) from None


@dataclass(frozen=True)
class KernelGroup:
    """One fused call of the model that becomes a kernel, with its lowered workload."""

    call: Call
    workload: Workload

    @property
    def name(self) -> str:
        return self.workload.func.name

    @property
    def group(self) -> Group:
        group: Group = self.call.attr("group")
        return group


@dataclass
class Frontier:
    """Everything built up to code generation (shared by compile and inspect)."""

    target: Target
    onnx_opset: int  # what the model declared (it was converted to a native opset if need be)
    graph: Graph
    optimized: Graph
    passes: list[str]
    fused: Graph
    kernels: list[KernelGroup]  # the fused calls that become kernels, in execution order
    aliases: list[Call]  # fused calls that only reshape (no kernel: their output aliases their input)
    direct_convs: frozenset[str] = frozenset()  # convs kept direct because tuning measured them faster
    onnx_nodes: Mapping[str, str] = field(default_factory=dict)  # ONNX node name -> op type (all nodes)
    after_pass: tuple[tuple[str, Graph], ...] = ()  # (pass, graph after it), from the import on


@dataclass(frozen=True)
class Alternative:
    """A Winograd kernel of a model and the direct kernel the same ONNX nodes make without it."""

    kernel: KernelGroup  # the Winograd kernel
    twin_kernel: KernelGroup  # the direct kernel (in a frontier built without conv_algorithm)

    @property
    def twin(self) -> Workload:
        return self.twin_kernel.workload


@dataclass
class CompiledModel:
    manifest: dict[str, Any]
    library: bytes
    plan: dict[str, Any]
    params: bytes
    kernels: list[Kernel]
    timings: dict[str, float]

    def save(self, path: str | os.PathLike[str]) -> str:
        return write_artifact(
            path, manifest=self.manifest, library=self.library, plan=self.plan, params=self.params
        )


def _is_alias(call: Call) -> bool:
    group = call.attr("group")
    return all(n.op == "reshape" for n in group.body.calls())


def build_frontier(
    model: ModelInput, options: CompileOptions, direct_convs: frozenset[str] = frozenset()
) -> Frontier:
    target = parse_target(options.target)
    # parse, check, convert to a native opset, bind shapes, fold shape subgraphs
    imported = import_model(
        model, dict(options.shapes), limits=options.limits, external_data=options.external_data
    )
    graph = imported.graph
    after: list[tuple[str, Graph]] = [("import", graph)]  # the graph after each pass
    context = PassContext(channel_block=target.lanes("float32"), direct_convs=direct_convs)
    fused, passes = run_passes(
        graph, options.opt_level, lambda name, g: after.append((name, g)), context, options.disabled_passes
    )  # the graph passes, then the partition into kernels
    optimized = next(g for name, g in reversed(after) if name not in PARTITIONS)  # before partitioning
    outputs = set(fused.outputs)
    kernels: list[KernelGroup] = []
    aliases: list[Call] = []
    for node in fused.calls():
        if _is_alias(node) and node not in outputs:
            aliases.append(node)
            continue
        group = node.attr("group")  # its name is unique: the partition numbers the groups
        consts = frozenset(k for k, a in enumerate(node.args) if isinstance(a, Const))
        kernels.append(KernelGroup(node, lower_group(group, group.name, target, consts)))  # naive TIR
    return Frontier(
        target,
        imported.opset,
        graph,
        optimized,
        passes,
        fused,
        kernels,
        aliases,
        direct_convs,
        dict(imported.nodes),
        tuple(after),
    )


def winograd_alternatives(model: ModelInput, options: CompileOptions, fr: Frontier) -> list[Alternative]:
    """Each Winograd kernel of `fr` with its direct twin: the kernel its ONNX nodes make when the
    conv_algorithm pass does not run (the tuner tunes both; compile keeps the faster)."""
    wino = [k for k in fr.kernels if k.workload.anchor_op == "conv2d_winograd_nchwc"]
    if not wino:
        return []
    direct = build_frontier(
        model, replace(options, disabled_passes=options.disabled_passes | {"conv_algorithm"})
    )
    by_nodes = {frozenset(k.workload.nodes): k for k in direct.kernels}
    out = []
    for k in wino:
        twin = by_nodes.get(frozenset(k.workload.nodes))
        if twin is not None and twin.workload.anchor_op == "conv2d_nchwc":
            out.append(Alternative(k, twin))
    return out


def measured_direct(
    model: ModelInput, options: CompileOptions, fr: Frontier, schedules: ScheduleSource | None
) -> frozenset[str]:
    """The Winograd convs of `fr` whose direct twin's tuned schedule measured faster than their own
    (both timed alone): the rule picks the algorithm, measurements overrule it."""
    if schedules is None:
        return frozenset()
    timed: dict[str, float] = {}  # Winograd workloads with a measured record
    for k in fr.kernels:
        w = k.workload
        if w.anchor_op == "conv2d_winograd_nchwc" and w.key not in timed:
            mine = schedules.lookup(w.key, fr.target.key)
            if mine is not None and mine.seconds is not None:
                timed[w.key] = mine.seconds
    if not timed:  # nothing to compare with: no need to build the direct twins
        return frozenset()
    faster = set()
    for alt in winograd_alternatives(model, options, fr):
        own = timed.get(alt.kernel.workload.key)
        other = schedules.lookup(alt.twin.key, fr.target.key)
        if own is not None and other is not None and other.seconds is not None and other.seconds < own:
            anchor = alt.kernel.group.anchor
            assert anchor is not None  # a Winograd kernel is anchored on its conv
            faster.add(anchor.name)
    return frozenset(faster)


def frontier_for(model: ModelInput, options: CompileOptions, schedules: ScheduleSource | None) -> Frontier:
    """What compile builds: the passes' rules, then a conv measured faster direct kept direct."""
    fr = build_frontier(model, options)
    forced = measured_direct(model, options, fr, schedules)
    return build_frontier(model, options, forced) if forced else fr


_V = TypeVar("_V")


def match_names(fr: Frontier, names: Sequence[str], what: str = "override") -> dict[str, list[str]]:
    """Name -> the kernels it names: a kernel by its name, or every kernel running an ONNX node of
    that name. A name matching nothing is an error naming the closest names (OverrideError for
    overrides, UnknownNodeError otherwise): a name is never silently ignored."""
    kernel_names = [k.name for k in fr.kernels]
    kernels_of: dict[str, list[str]] = {}
    for k in fr.kernels:
        for node in k.workload.nodes:
            kernels_of.setdefault(node, []).append(k.name)
    out = {}
    for name in names:
        targets = [name] if name in kernel_names else kernels_of.get(name, [])
        if not targets:
            raise _unmatched(name, what, fr, kernel_names, kernels_of)
        out[name] = targets
    return out


def bind_overrides(fr: Frontier, overrides: Mapping[str, _V]) -> dict[str, tuple[str, _V]]:
    """Kernel name -> (the override's name, its value) for overrides naming an ONNX node (every
    kernel that runs it) or a kernel; two names pinning one kernel are an OverrideError."""
    bound: dict[str, tuple[str, _V]] = {}
    for name, targets in match_names(fr, list(overrides)).items():
        for k in targets:
            if k in bound and bound[k][0] != name:
                raise OverrideError(
                    f"overrides {bound[k][0]!r} and {name!r} both pin kernel {k}: give one of them",
                    name=name,
                )
            bound[k] = (name, overrides[name])
    return bound


def _unmatched(
    name: str, what: str, fr: Frontier, kernel_names: list[str], kernels_of: Mapping[str, list[str]]
) -> UnknownNodeError:
    known = [*kernels_of, *kernel_names]  # names that can be given
    closest = tuple(difflib.get_close_matches(name, known, n=5, cutoff=0.5))
    if name in fr.onnx_nodes or any(c.name == name for c in fr.graph.calls()):
        why = f"node {name!r} runs in no kernel (the graph passes folded it away or it only renames memory)"
    else:
        why = f"{what} {name!r} names no ONNX node and no kernel of this model"
    hint = f"; closest: {', '.join(closest)}" if closest else f"; kernels: {', '.join(kernel_names[:8])}"
    if not closest and len(kernel_names) > 8:
        hint += ", ..."
    error = OverrideError if what == "override" else UnknownNodeError
    return error(why + hint, name=name, closest=closest)


def _choice_for(
    w: Workload,
    pinned: Mapping[str, tuple[str, ScheduleChoice]],
    target: Target,
    schedules: ScheduleSource | None,
) -> ScheduleChoice | None:
    """The override pinned to this kernel, else the database's best record, else None (default)."""
    if w.func.name in pinned:
        name, choice = pinned[w.func.name]
        return replace(choice, provenance={**choice.provenance, "pinned_by": name})
    if schedules is not None:
        return schedules.lookup(w.key, target.key)
    return None


def schedule_kernels(
    fr: Frontier,
    options: CompileOptions,
    schedules: ScheduleSource | None,
    groups: Sequence[KernelGroup] | None = None,
    pinned: Mapping[str, tuple[str, ScheduleChoice]] | None = None,
) -> list[Kernel]:
    """Each group's kernel (of `groups`, default all) with its schedule: the override pinned to it,
    else the database's best record, else the default rule; scheduled once per distinct kernel."""
    if pinned is None:
        pinned = bind_overrides(fr, options.overrides)
    workloads = [k.workload for k in (fr.kernels if groups is None else groups)]
    return build_kernels([(w, w.func.name, _choice_for(w, pinned, fr.target, schedules)) for w in workloads])


def compile_model(
    model: ModelInput, options: CompileOptions | None = None, schedules: ScheduleSource | None = None
) -> CompiledModel:
    options = options or CompileOptions()
    t0 = time.perf_counter()
    fr = frontier_for(model, options, schedules)
    t1 = time.perf_counter()
    kernels = schedule_kernels(fr, options, schedules)  # default / tuned / overridden, then flatten
    t2 = time.perf_counter()
    lib = CodeLibrary(fr.target)
    for k in kernels:
        if k.same_as is not None:
            lib.add_alias(k.symbol, k.same_as)
        else:
            lib.add_kernel(k.flat, k.symbol)  # TIR -> LLVM IR
    library = lib.shared_library()  # optimize for the target CPU, emit object, link
    t3 = time.perf_counter()
    of_call: dict[Call, Kernel | None] = {g.call: k for g, k in zip(fr.kernels, kernels, strict=True)}
    of_call.update({a: None for a in fr.aliases})
    plan, params = make_plan(fr.fused, of_call)  # buffers, workspace reuse, packed constants
    manifest = _manifest(fr, kernels, options)
    timings = {
        "frontend_s": t1 - t0,
        "schedule_s": t2 - t1,
        "codegen_s": t3 - t2,
        "total_s": time.perf_counter() - t0,
    }
    manifest["compile_seconds"] = round(timings["total_s"], 3)
    if options.dump_ir:
        dump_ir(Path(options.dump_ir), fr, kernels, lib)
    return CompiledModel(manifest, library, plan, params, kernels, timings)


def _manifest(fr: Frontier, kernels: list[Kernel], options: CompileOptions) -> dict[str, Any]:
    return {
        "format_version": 1,
        "temper_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "target": fr.target.to_json(),
        "opt_level": options.opt_level,
        "onnx_opset": fr.onnx_opset,
        "passes": fr.passes,
        # what alter_layout decided: the channel block, blocked convs, why the others stayed NCHW
        "layout": layout_report(fr.optimized, fr.target.lanes("float32"), "alter_layout" in fr.passes),
        # which blocked convs run as Winograd, and why the others stay direct
        "conv_algorithms": algorithm_report(fr.optimized, "conv_algorithm" in fr.passes, fr.direct_convs),
        "inputs": [
            {"name": v.name, "shape": list(v.type.shape), "dtype": v.type.dtype} for v in fr.graph.inputs
        ],
        "outputs": [
            {"name": n, "shape": list(o.type.shape), "dtype": o.type.dtype}
            for n, o in zip(fr.graph.output_names, fr.graph.outputs, strict=True)
        ],
        "kernels": [
            {
                "name": k.name,
                "symbol": k.symbol,
                "workload_key": k.workload.key,
                "flops": k.workload.flops,
                "nodes": list(k.workload.nodes),
                "schedule": {
                    **k.provenance,
                    "trace_sha256": hashlib.sha256(k.trace.dumps().encode()).hexdigest(),
                },
            }
            for k in kernels
        ],
    }


def dump_ir(root: Path, fr: Frontier, kernels: list[Kernel], lib: CodeLibrary) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "graph.txt").write_text(print_graph(fr.graph))
    (root / "optimized.txt").write_text(print_graph(fr.optimized))
    (root / "fused.txt").write_text(print_fused(fr.fused))
    kdir = root / "kernels"
    kdir.mkdir(exist_ok=True)
    for k in kernels:
        (kdir / f"{k.symbol}.tir.py").write_text(func_str(k.workload.func))
        (kdir / f"{k.symbol}.scheduled.py").write_text(func_str(k.scheduled))
        (kdir / f"{k.symbol}.trace.json").write_text(json.dumps(k.trace.to_json(), indent=1))
    (root / "module.ll").write_text(lib.llvm_ir())
    (root / "module.s").write_text(lib.assembly())


def inspect_model(
    model: ModelInput,
    stage: str,
    options: CompileOptions | None = None,
    kernel: str | None = None,
    schedules: ScheduleSource | None = None,
) -> str:
    """Text of one pipeline stage (optionally one kernel's part of it)."""
    options = options or CompileOptions()
    if stage not in STAGES:
        raise CompilerError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    fr = frontier_for(model, options, schedules)
    pinned = bind_overrides(fr, options.overrides)  # checked whatever the stage
    if stage == "graph":
        return print_graph(fr.graph)
    if stage == "optimized":
        return print_graph(fr.optimized)
    if stage == "fused":
        return print_fused(fr.fused)
    groups = fr.kernels
    if kernel is not None:
        groups = [k for k in groups if k.name == kernel or kernel in k.workload.nodes]
        if not groups:
            names = ", ".join(k.name for k in fr.kernels)
            raise CompilerError(f"no kernel {kernel!r}; kernels: {names}")
    if stage == "tir":
        return "\n".join(func_str(k.workload.func) for k in groups)
    kernels = schedule_kernels(fr, options, schedules, groups, pinned)
    if stage == "scheduled":
        return "\n".join(func_str(k.scheduled) for k in kernels)
    lib = CodeLibrary(fr.target)
    for k in kernels:
        lib.add_kernel(k.flat, k.symbol)
    return lib.llvm_ir() if stage == "llvm" else lib.assembly()
