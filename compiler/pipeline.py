"""The whole compilation path: PIPELINE lists its stages in order, one named stage per line.

ONNX -> graph -> optimized graph -> fused groups -> TIR per group -> scheduled TIR -> LLVM ->
machine code, then linked into a shared library and packed with its plan into an artifact.
`compile_model` runs every stage; `inspect_model` runs up to one and prints it.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import onnx

from compiler.codegen.library import CodeLibrary, link_shared
from compiler.codegen.stream import stream_param, stream_report
from compiler.collector import collector_paused
from compiler.errors import CompilerError, OverrideError, UnknownNodeError
from compiler.frontend.onnx import ImportedModel, import_model
from compiler.graph.ir import Call, Const, Graph
from compiler.graph.passes import Group, PassContext, check_disabled, graph_passes, partition_pass
from compiler.graph.passes.alter_layout import layout_report
from compiler.graph.passes.conv_algorithm import algorithm_report, flops_bar, winograd_candidates
from compiler.graph.passes.fuse import print_fused, view_offset
from compiler.graph.printer import print_graph
from compiler.kernels import Kernel, ScheduleChoice, ScheduleSource, Workload, build_kernels, lower_group
from compiler.limits import DEFAULT_LIMITS, Limits
from compiler.planner import make_plan
from compiler.runtime.archive import write_artifact
from compiler.target import Target, parse_target
from compiler.tir.printer import func_str
from compiler.version import __version__

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
    # fused calls that only view their input (reshapes, contiguous slices): no kernel, their output
    # is a view of their input's memory (fuse.view_offset)
    aliases: list[Call]
    direct_convs: frozenset[str] = frozenset()  # convs kept direct because tuning measured them faster
    winograd_convs: frozenset[str] = frozenset()  # convs run as Winograd because tuning measured so
    onnx_nodes: Mapping[str, str] = field(default_factory=dict)  # ONNX node name -> op type (all nodes)
    after_pass: tuple[tuple[str, Graph], ...] = ()  # (pass, graph after it), from the import on


@dataclass(frozen=True)
class Alternative:
    """A conv kernel of a model as the rule compiles it, and its twin: the kernel the same ONNX nodes
    make with the other algorithm (a Winograd kernel's direct twin, or the Winograd twin of a conv
    the cost rule keeps direct)."""

    kernel: KernelGroup  # the kernel the rule makes
    twin_kernel: KernelGroup  # the other algorithm's kernel (in a frontier built to make it)

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


@dataclass
class Build:
    """What the stages have built so far: each stage reads what the stages before it set and sets
    its own fields. `run_stages` runs them in PIPELINE's order."""

    model: ModelInput
    options: CompileOptions
    target: Target
    schedules: ScheduleSource | None = None  # the database's records (None: the default rules only)
    only: str | None = None  # inspect: the one kernel to build from "tir" on (its name or an ONNX node)
    # convs kept direct whatever the rule says; None: the rule, then what the records measured
    direct_convs: frozenset[str] | None = None
    # convs run as Winograd whatever the cost rule says (set with direct_convs, or by the records)
    winograd_convs: frozenset[str] = frozenset()
    # graph
    imported: ImportedModel | None = None
    # optimized
    optimized: Graph | None = None
    passes: list[str] = field(default_factory=list)
    after_pass: list[tuple[str, Graph]] = field(default_factory=list)
    # fused
    fused: Graph | None = None
    # tir
    frontier: Frontier | None = None
    groups: list[KernelGroup] = field(default_factory=list)  # the kernels built on (`only`, or all)
    pinned: dict[str, tuple[str, ScheduleChoice]] = field(default_factory=dict)  # kernel -> override
    # scheduled
    kernels: list[Kernel] = field(default_factory=list)
    # llvm
    library: CodeLibrary | None = None
    # asm
    objects: list[bytes] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> its wall time

    @classmethod
    def start(
        cls,
        model: ModelInput,
        options: CompileOptions,
        schedules: ScheduleSource | None = None,
        only: str | None = None,
        direct_convs: frozenset[str] | None = None,
        winograd_convs: frozenset[str] = frozenset(),
    ) -> Build:
        target = parse_target(options.target)
        return cls(model, options, target, schedules, only, direct_convs, winograd_convs)

    def need_frontier(self) -> Frontier:
        assert self.frontier is not None, "the tir stage has not run"
        return self.frontier


def _import(b: Build) -> None:
    """Parse and check the ONNX file, convert it to a native opset, bind shapes, fold shape math."""
    o = b.options
    b.imported = import_model(b.model, dict(o.shapes), limits=o.limits, external_data=o.external_data)


def _optimize(b: Build) -> None:
    """The graph passes of the opt level, in order (compiler.graph.passes). A conv whose twin's record
    measured faster (its direct kernel, or its Winograd kernel) then runs as its twin: the rule
    picks, measurements overrule."""
    _run_graph_passes(b, b.direct_convs or frozenset(), b.winograd_convs)
    if b.direct_convs is not None:
        return
    b.direct_convs = frozenset()
    if b.schedules is None or b.optimized is None:
        return
    winograd = any(n.op == "conv2d_winograd_nchwc" for n in b.optimized.calls())
    if not winograd and not winograd_candidates(b.optimized, flops_bar(b.target)):
        return
    # the probe's own lists: its partition must not land in this build's passes
    bare = replace(b.options, overrides={})
    probe = replace(b, options=bare, passes=list(b.passes), after_pass=list(b.after_pass))
    for stage in (_partition, _lower):
        stage(probe)
    direct, to_winograd = measured_algorithms(b.model, b.options, probe.need_frontier(), b.schedules)
    if direct or to_winograd:
        b.direct_convs, b.winograd_convs = direct, to_winograd
        _run_graph_passes(b, direct, to_winograd)


def _run_graph_passes(b: Build, direct_convs: frozenset[str], winograd_convs: frozenset[str]) -> None:
    assert b.imported is not None
    graph = b.imported.graph
    b.after_pass = [("import", graph)]
    b.passes = []
    context = PassContext(
        channel_block=b.target.lanes("float32"),
        direct_convs=direct_convs,
        winograd_convs=winograd_convs,
        winograd_bar=flops_bar(b.target),
        dot_instruction=b.target.dot_instructions.get(b.target.lanes("float32")),
    )
    for name, fn in graph_passes(b.options.opt_level):
        if name not in b.options.disabled_passes:
            graph = fn(graph, context)
            b.passes.append(name)
            b.after_pass.append((name, graph))
    b.optimized = graph


def _partition(b: Build) -> None:
    """Cut the optimized graph into groups, one kernel each (fused at opt level 3)."""
    assert b.optimized is not None
    name, fn = partition_pass(b.options.opt_level)
    b.fused = fn(b.optimized, PassContext())
    b.passes.append(name)
    b.after_pass.append((name, b.fused))


def _lower(b: Build) -> None:
    """Each group's naive loop nest (TIR); the overrides bound to the kernels they name."""
    assert b.imported is not None and b.optimized is not None and b.fused is not None
    outputs = set(b.fused.outputs)
    kernels: list[KernelGroup] = []
    aliases: list[Call] = []
    for node in b.fused.calls():
        if _is_alias(node) and node not in outputs:
            aliases.append(node)
            continue
        group = node.attr("group")  # its name is unique: the partition numbers the groups
        consts = frozenset(k for k, a in enumerate(node.args) if isinstance(a, Const))
        kernels.append(KernelGroup(node, lower_group(group, group.name, b.target, consts)))
    fr = b.frontier = Frontier(
        b.target,
        b.imported.opset,
        b.imported.graph,
        b.optimized,
        list(b.passes),
        b.fused,
        kernels,
        aliases,
        b.direct_convs or frozenset(),
        b.winograd_convs,
        dict(b.imported.nodes),
        tuple(b.after_pass),
    )
    b.pinned = bind_overrides(fr, b.options.overrides)  # every name is checked, whatever is built
    b.groups = fr.kernels
    if b.only is not None:
        b.groups = [k for k in fr.kernels if k.name == b.only or b.only in k.workload.nodes]
        if not b.groups:
            names = ", ".join(k.name for k in fr.kernels)
            raise CompilerError(f"no kernel {b.only!r}; kernels: {names}")


def _schedule(b: Build) -> None:
    """Each kernel's schedule: its override, else the database's best record, else the default
    rule; then flattened to plain loops."""
    b.kernels = schedule_kernels(b.need_frontier(), b.options, b.schedules, b.groups, b.pinned)


def _emit_llvm(b: Build) -> None:
    """TIR -> LLVM IR (optimized for the target CPU when printed, else by `_emit_object`, in parts);
    a kernel equal to an earlier one is an alias."""
    lib = b.library = CodeLibrary(b.target)
    for k in b.kernels:
        if k.same_as is not None:
            lib.add_alias(k.symbol, k.same_as)
        else:
            lib.add_kernel(k.flat, k.symbol, stream_param(k.flat, k.workload.const_params, k.workload.flops))


def _emit_object(b: Build) -> None:
    """Machine code for the target CPU, optimized and emitted in parallel parts where the IR is
    large (compile links them with the runtime into a shared library)."""
    assert b.library is not None
    b.objects = b.library.objects()


def _kernels_text(b: Build) -> str:
    return "\n".join(func_str(k.workload.func) for k in b.groups)


def _scheduled_text(b: Build) -> str:
    return "\n".join(func_str(k.scheduled) for k in b.kernels)


def _llvm_text(b: Build) -> str:
    assert b.library is not None
    return b.library.llvm_ir()


def _asm_text(b: Build) -> str:
    """The library's assembly, optimised and emitted from its LLVM module (inspect does not build
    the objects first: that would run LLVM over the whole library twice)."""
    assert b.library is not None
    return b.library.assembly()


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Build], None]  # builds this stage's part from the stages before it
    show: Callable[[Build], str]  # its text (what `temper inspect --stage NAME` prints)
    # the text is made from the stage before it, not from `run`'s result: inspect skips `run`
    shown_from_previous: bool = False


# the compiler, in order: compile_model runs every stage, inspect_model runs up to the one asked
PIPELINE: tuple[Stage, ...] = (
    Stage("graph", _import, lambda b: print_graph(_need(b.imported).graph)),
    Stage("optimized", _optimize, lambda b: print_graph(_need(b.optimized))),
    Stage("fused", _partition, lambda b: print_fused(_need(b.fused))),
    Stage("tir", _lower, _kernels_text),
    Stage("scheduled", _schedule, _scheduled_text),
    Stage("llvm", _emit_llvm, _llvm_text),
    Stage("asm", _emit_object, _asm_text, shown_from_previous=True),
)
STAGES = tuple(stage.name for stage in PIPELINE)


_T = TypeVar("_T")


def _need(value: _T | None) -> _T:
    assert value is not None, "an earlier stage did not run"
    return value


def run_stages(b: Build, until: str = STAGES[-1]) -> Build:
    """Run PIPELINE's stages in order up to and including `until`, timing each."""
    if until not in STAGES:
        raise CompilerError(f"unknown stage {until!r}; choose one of {', '.join(STAGES)}")
    for stage in PIPELINE:
        t0 = time.perf_counter()
        stage.run(b)
        b.seconds[stage.name] = time.perf_counter() - t0
        if stage.name == until:
            break
    return b


def _is_alias(call: Call) -> bool:
    return view_offset(call.attr("group")) is not None


def build_frontier(
    model: ModelInput,
    options: CompileOptions,
    direct_convs: frozenset[str] = frozenset(),
    winograd_convs: frozenset[str] = frozenset(),
) -> Frontier:
    """The stages up to TIR, with exactly these convs kept direct and these run as Winograd past
    the cost rule (no records consulted, no overrides bound)."""
    bare = replace(options, overrides={})
    build = Build.start(model, bare, direct_convs=direct_convs, winograd_convs=winograd_convs)
    return run_stages(build, "tir").need_frontier()


def algorithm_alternatives(model: ModelInput, options: CompileOptions, fr: Frontier) -> list[Alternative]:
    """The model's conv kernels that have a twin of the other algorithm, each with it (the tuner
    tunes both; compile keeps the faster): every Winograd kernel of `fr` with the direct kernel its
    ONNX nodes make when the conv_algorithm pass does not run, and every kernel of a conv the cost
    rule alone keeps direct (conv_algorithm.winograd_candidates) with its Winograd kernel. `fr` is
    built by the rule alone (no measurements)."""
    out = []
    wino = [k for k in fr.kernels if k.workload.anchor_op == "conv2d_winograd_nchwc"]
    if wino:
        without = replace(options, disabled_passes=options.disabled_passes | {"conv_algorithm"})
        out += _twins(wino, build_frontier(model, without), "conv2d_nchwc")
    bar = flops_bar(fr.target)
    candidates = winograd_candidates(fr.optimized, bar) if "conv_algorithm" in fr.passes else frozenset()
    direct = [k for k in fr.kernels if k.group.anchor is not None and k.group.anchor.name in candidates]
    if direct:
        forced = build_frontier(model, options, winograd_convs=candidates)
        out += _twins(direct, forced, "conv2d_winograd_nchwc")
    return out


def _twins(kernels: list[KernelGroup], other: Frontier, op: str) -> list[Alternative]:
    """Each of `kernels` with the kernel of `other` that runs the same ONNX nodes, when that one's
    main op is `op`."""
    by_nodes = {frozenset(k.workload.nodes): k for k in other.kernels}
    out = []
    for k in kernels:
        twin = by_nodes.get(frozenset(k.workload.nodes))
        if twin is not None and twin.workload.anchor_op == op:
            out.append(Alternative(k, twin))
    return out


def measured_algorithms(
    model: ModelInput, options: CompileOptions, fr: Frontier, schedules: ScheduleSource | None
) -> tuple[frozenset[str], frozenset[str]]:
    """(the Winograd convs of `fr` to run direct, the direct convs to run as Winograd): those whose
    twin's tuned schedule measured faster than their own kernel's. The rule picks the algorithm,
    measurements overrule it. Without in-model times, both kernels' times alone decide. A kernel
    timed inside its model (`model_s`) gives way only to a twin with an in-model time too, which
    tuner.confirm stores only when the model, compiled with that twin, ran faster as a whole: a
    kernel alone is not the kernel in place (DenseNet's 7x7 convs ran faster direct alone, and
    slower so inside the model; a Winograd kernel alone keeps its transformed weights in cache,
    which inside a deep network stream from DRAM)."""
    if schedules is None:
        return frozenset(), frozenset()
    bar = flops_bar(fr.target)
    candidates = winograd_candidates(fr.optimized, bar) if "conv_algorithm" in fr.passes else frozenset()
    timed: dict[str, tuple[float | None, float]] = {}  # the rule's kernels: (in model, alone)
    for k in fr.kernels:
        w, anchor = k.workload, k.group.anchor
        candidate = anchor is not None and anchor.name in candidates
        if (w.anchor_op == "conv2d_winograd_nchwc" or candidate) and w.key not in timed:
            mine = schedules.lookup(w.key, fr.target.key)
            if mine is not None and mine.seconds is not None:
                timed[w.key] = (_in_model(mine), mine.seconds)
    if not timed:  # nothing to compare with: no need to build the twins
        return frozenset(), frozenset()
    direct: set[str] = set()
    winograd: set[str] = set()
    for alt in algorithm_alternatives(model, options, fr):
        own = timed.get(alt.kernel.workload.key)
        other = schedules.lookup(alt.twin.key, fr.target.key)
        if own is None or other is None or other.seconds is None:
            continue
        own_model, own_alone = own
        wins = _in_model(other) is not None if own_model is not None else other.seconds < own_alone
        if wins:
            anchor = alt.kernel.group.anchor
            assert anchor is not None  # a conv kernel is anchored on its conv
            (winograd if alt.twin.anchor_op == "conv2d_winograd_nchwc" else direct).add(anchor.name)
    return frozenset(direct), frozenset(winograd)


def _in_model(choice: ScheduleChoice) -> float | None:
    """A record's seconds per call inside its compiled model, when it was timed there."""
    value = choice.provenance.get("model_s")
    return float(value) if isinstance(value, int | float) else None


def frontier_for(model: ModelInput, options: CompileOptions, schedules: ScheduleSource | None) -> Frontier:
    """What compile builds up to TIR: the passes' rules, then a conv measured faster direct kept
    direct; overrides bound."""
    return run_stages(Build.start(model, options, schedules), "tir").need_frontier()


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
    """Every stage of PIPELINE, then the artifact's parts: the library linked with the runtime, the
    execution plan with the packed constants, the manifest. The cyclic garbage collector is paused
    meanwhile (compiler/collector.py)."""
    with collector_paused():
        return _compile_model(model, options or CompileOptions(), schedules)


def _compile_model(
    model: ModelInput, options: CompileOptions, schedules: ScheduleSource | None
) -> CompiledModel:
    t0 = time.perf_counter()
    b = run_stages(Build.start(model, options, schedules))
    fr, kernels = b.need_frontier(), b.kernels
    t1 = time.perf_counter()
    library = link_shared(b.objects)
    of_call: dict[Call, Kernel | None] = {g.call: k for g, k in zip(fr.kernels, kernels, strict=True)}
    of_call.update({a: None for a in fr.aliases})
    plan, params = make_plan(fr.fused, of_call)  # buffers, workspace reuse, packed constants
    manifest = _manifest(fr, kernels, options)
    front = ("graph", "optimized", "fused", "tir")
    timings = {
        "frontend_s": sum(b.seconds[s] for s in front),
        "schedule_s": b.seconds["scheduled"],
        "codegen_s": b.seconds["llvm"] + b.seconds["asm"] + time.perf_counter() - t1,
        "total_s": time.perf_counter() - t0,
    }
    manifest["compile_seconds"] = round(timings["total_s"], 3)
    if options.dump_ir:
        assert b.library is not None
        dump_ir(Path(options.dump_ir), fr, kernels, b.library)
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
        "conv_algorithms": algorithm_report(
            fr.optimized,
            "conv_algorithm" in fr.passes,
            fr.direct_convs,
            fr.winograd_convs,
            flops_bar(fr.target),
        ),
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
                "prefetch": stream_report(k.flat, k.workload.const_params, k.workload.flops),
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
    """Text of one stage of PIPELINE (from "tir" on, optionally of one kernel), running the stages
    up to it; overrides name kernels, so with overrides the stages run at least to "tir" to check
    them."""
    options = options or CompileOptions()
    if stage not in STAGES:
        raise CompilerError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}")
    asked = PIPELINE[STAGES.index(stage)]
    until = STAGES[STAGES.index(stage) - 1] if asked.shown_from_previous else stage
    if options.overrides and STAGES.index(until) < STAGES.index("tir"):
        until = "tir"
    b = run_stages(Build.start(model, options, schedules, only=kernel), until)
    return asked.show(b)
