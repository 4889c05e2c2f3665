"""Why every kernel is what it is: the ONNX nodes it runs, the passes that rewrote them, the
implementations the passes chose between and why, the schedule rule and where its schedule came
from. What `temper explain` prints; every fact is read from the same frontier and kernels that
compile builds, never recomputed by a second set of rules.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from compiler.graph.ir import Graph
from compiler.graph.passes import PARTITIONS, Group, implementations
from compiler.graph.passes.alter_layout import DEPTHWISE_CHAIN, depthwise_chains, output_block, why_planar
from compiler.graph.passes.conv_algorithm import algorithm_report, flops_bar
from compiler.graph.passes.conv_transpose_phases import describe, why_kept
from compiler.graph.passes.pointwise_rows import why_rows
from compiler.graph.passes.quantized_kernels import REWRITES as QUANTIZED_REWRITES
from compiler.graph.passes.quantized_kernels import integer_plans, plan_for, quantized_input
from compiler.graph.passes.quantized_kernels import verdict as integer_verdict
from compiler.kernels import Kernel, ScheduleSource, family_rule
from compiler.pipeline import (
    CompileOptions,
    Frontier,
    ModelInput,
    frontier_for,
    match_names,
    schedule_kernels,
)


@dataclass(frozen=True)
class NodeOrigin:
    """One node a kernel runs: its ONNX op ("" for a node a pass made) and the graph ops it became."""

    node: str
    onnx_op: str
    ops: tuple[str, ...]


@dataclass(frozen=True)
class KernelExplanation:
    kernel: str
    nodes: tuple[NodeOrigin, ...]
    passes: tuple[str, ...]  # "pass: before -> after" for every change to one of its nodes
    implementation: str  # the graph op the kernel is built around (its anchor), or its pattern
    implementations: tuple[str, ...]  # what the passes chose between ("op (by pass)")
    why: tuple[str, ...]  # the rules' reasons for this choice
    rule: str  # the schedule rule its schedule comes from
    rules: tuple[str, ...]  # the rules available for it on this target
    fallback: str | None  # why the family rule did not apply, when the generic one was used
    schedule: Mapping[str, Any]  # source: default / record (id, measured, in-model) / override
    decisions: Mapping[str, Any]
    flops: int
    measured_s: float | None = None  # from Module.profile, when asked for

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "nodes": [{"node": n.node, "onnx_op": n.onnx_op, "ops": list(n.ops)} for n in self.nodes],
            "passes": list(self.passes),
            "implementation": self.implementation,
            "implementations": list(self.implementations),
            "why": list(self.why),
            "rule": self.rule,
            "rules": list(self.rules),
            "fallback": self.fallback,
            "schedule": dict(self.schedule),
            "decisions": {k: _jsonable(v) for k, v in self.decisions.items()},
            "flops": self.flops,
            "measured_s": self.measured_s,
        }


@dataclass(frozen=True)
class Explanation:
    target: Mapping[str, Any]
    passes: tuple[str, ...]
    kernels: tuple[KernelExplanation, ...]
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "target": dict(self.target),
            "passes": list(self.passes),
            "kernels": [k.to_json() for k in self.kernels],
            "notes": list(self.notes),
        }

    def text(self) -> str:
        t = self.target
        lines = [
            f"target {t['cpu']} ({t['vector_width']}-bit vectors, key {t['key']})",
            f"passes {', '.join(self.passes)}",
            *self.notes,
        ]
        for k in self.kernels:
            lines += ["", *_kernel_lines(k)]
        return "\n".join(lines) + "\n"


def explain_model(
    model: ModelInput,
    options: CompileOptions | None = None,
    schedules: ScheduleSource | None = None,
    node: str | None = None,
    profile: Mapping[str, float] | None = None,
) -> Explanation:
    """Explain every kernel of the model as compile would build it (or only the kernel running
    `node`, an ONNX node or kernel name). `profile`: kernel name -> measured seconds."""
    options = options or CompileOptions()
    fr = frontier_for(model, options, schedules)
    groups = fr.kernels
    if node is not None:
        wanted = set(match_names(fr, [node], what="node")[node])
        groups = [k for k in fr.kernels if k.name in wanted]
    kernels = schedule_kernels(fr, options, schedules, groups)
    history = _history(fr)
    reasons = _conv_reasons(fr)
    out = tuple(_explain(fr, k, history, reasons, profile or {}) for k in kernels)
    notes: tuple[str, ...] = ()
    if fr.direct_convs:
        notes += (f"tuning measured direct kernels faster for: {', '.join(sorted(fr.direct_convs))}",)
    if fr.winograd_convs:
        notes += (f"tuning measured Winograd kernels faster for: {', '.join(sorted(fr.winograd_convs))}",)
    return Explanation(fr.target.to_json(), tuple(fr.passes), out, notes)


def profile_kernels(
    model: ModelInput, options: CompileOptions, schedules: ScheduleSource | None = None, repeat: int = 10
) -> dict[str, float]:
    """Kernel name -> median seconds per call (summed over its calls): the model compiled as compile
    builds it, loaded and run on seeded random inputs (Module.profile)."""
    from compiler.pipeline import compile_model
    from compiler.runtime import load
    from compiler.runtime.archive import artifact_bytes

    compiled = compile_model(model, options, schedules)
    module = load(
        artifact_bytes(
            manifest=compiled.manifest, library=compiled.library, plan=compiled.plan, params=compiled.params
        )
    )
    times: dict[str, float] = {}
    for entry in module.profile(module.sample_inputs(), repeat=repeat):
        times[entry["kernel"]] = times.get(entry["kernel"], 0.0) + entry["median"]
    return times


def _explain(
    fr: Frontier,
    k: Kernel,
    history: Mapping[str, list[str]],
    reasons: Mapping[str, list[str]],
    profile: Mapping[str, float],
) -> KernelExplanation:
    w = k.workload
    body_ops: dict[str, list[str]] = {}
    for call in _group_of(fr, k).body.calls():
        body_ops.setdefault(call.name, []).append(call.op)
    names = list(dict.fromkeys(w.nodes))  # a node may lower to several ops (a conv and its bias)
    nodes = tuple(NodeOrigin(n, fr.onnx_nodes.get(n, ""), tuple(body_ops.get(n, ()))) for n in names)
    anchor = w.anchor_op
    alternatives: list[str] = []
    why: list[str] = []
    if anchor is not None:
        origin = next(
            (op for n in nodes if anchor in n.ops for op in _imported_as(fr, n.node, anchor)), anchor
        )
        alternatives = [f"{op} (by {by})" if by else op for op, by in implementations(origin)]
        for n in nodes:
            why += reasons.get(n.node, [])
    family = family_rule(w)
    provenance = dict(k.provenance)
    rule = str(provenance.get("rule") or family or "generic")
    return KernelExplanation(
        kernel=k.name,
        nodes=nodes,
        passes=tuple(line for n in names for line in history.get(n, [])),
        implementation=anchor or _pattern(nodes),
        implementations=tuple(alternatives),
        why=tuple(why),
        rule=rule,
        rules=tuple([family, "generic"] if family else ["generic"]),
        fallback=provenance.get("fallback")
        or (f"op {anchor} has no schedule rule of its own" if anchor and not family else None),
        schedule=provenance,
        decisions=dict(k.trace.decisions),
        flops=w.flops,
        measured_s=profile.get(k.name),
    )


def _group_of(fr: Frontier, k: Kernel) -> Group:
    return next(g for g in fr.kernels if g.name == k.workload.func.name).group


def _pattern(nodes: Sequence[NodeOrigin]) -> str:
    ops = sorted({op for n in nodes for op in n.ops})
    return f"no anchor op: {', '.join(ops)} (generic loop nest, fused)"


def op_list(ops: Sequence[str]) -> str:
    """Ops joined by '/', each repeat counted once ("add x3/matmul"): an ONNX node that imports as
    many graph ops (a recurrent layer unrolled over its time steps) stays one readable line."""
    return "/".join(op if n == 1 else f"{op} x{n}" for op, n in collections.Counter(ops).items())


def _ops_by_name(graph: Graph) -> dict[str, tuple[str, ...]]:
    ops: dict[str, list[str]] = {}
    for call in graph.calls():
        if call.name:
            ops.setdefault(call.name, []).append(call.op)
    return {name: tuple(sorted(v)) for name, v in ops.items()}


def _history(fr: Frontier) -> dict[str, list[str]]:
    """Node name -> what each graph pass did to it ("pass: before -> after")."""
    out: dict[str, list[str]] = {}
    steps = [(name, _ops_by_name(g)) for name, g in fr.after_pass if name not in PARTITIONS]
    for (_, before), (name, after) in itertools.pairwise(steps):
        for node in before.keys() | after.keys():
            old, new = before.get(node), after.get(node)
            if old != new:
                was = op_list(old) if old else "(new)"
                now = op_list(new) if new else "(removed)"
                out.setdefault(node, []).append(f"{name}: {was} -> {now}")
    return out


def _imported_as(fr: Frontier, node: str, anchor: str) -> list[str]:
    """The graph op(s) a node was imported as from which the passes can reach `anchor`."""
    if not fr.after_pass:
        return []
    ops = _ops_by_name(fr.after_pass[0][1]).get(node, ())
    return [op for op in ops if any(impl == anchor for impl, _ in implementations(op))]


def _conv_reasons(fr: Frontier) -> dict[str, list[str]]:
    """Node name -> the layout and algorithm rules' reasons for the convs of the model."""
    out: dict[str, list[str]] = {}
    by_pass = dict(fr.after_pass)
    names = [name for name, _ in fr.after_pass]
    block = fr.target.lanes("float32")
    if "conv_transpose_phases" in by_pass:
        before = fr.after_pass[names.index("conv_transpose_phases") - 1][1]
        for call in before.calls():
            if call.op == "conv_transpose2d":
                kept = why_kept(call)
                verdict = f"stays a transposed conv: {kept}" if kept else describe(call)
                out.setdefault(call.name, []).append(f"conv_transpose_phases: {verdict}")
    if "alter_layout" in by_pass:
        before = fr.after_pass[names.index("alter_layout") - 1][1]
        depthwise_only = depthwise_chains(before, block)
        for call in before.calls():
            if call.op == "conv2d":
                reason = why_planar(call, block) if block > 1 else "the target has no vector block"
                reason = reason or (DEPTHWISE_CHAIN if id(call) in depthwise_only else None)
                written = output_block(call, block) if reason is None else block
                verdict = f"stays NCHW: {reason}" if reason else f"runs blocked (NCHW{written}c)"
                out.setdefault(call.name, []).append(f"alter_layout: {verdict}")
    if "quantized_kernels" in by_pass:
        before = fr.after_pass[names.index("quantized_kernels") - 1][1]
        dot = fr.target.dot_instructions.get(block)
        bar = flops_bar(fr.target)
        plans = integer_plans(before, dot, bar)
        for call in before.calls():
            if call.op in QUANTIZED_REWRITES and not isinstance(quantized_input(call.args[0]), str):
                plan = plans.get(id(call)) or plan_for(call, call.args[0], dot, bar)
                out.setdefault(call.name, []).append(f"quantized_kernels: {integer_verdict(plan)}")
    if "pointwise_conv_rows" in by_pass:
        before = fr.after_pass[names.index("pointwise_conv_rows") - 1][1]
        for call in before.calls():
            if call.op == "conv2d_nchwc":
                h, w = call.type.shape[2:4]
                reason = why_rows(call)
                verdict = f"keeps its rows: {reason}" if reason else f"runs its {h}x{w} plane as one row"
                out.setdefault(call.name, []).append(f"pointwise_conv_rows: {verdict}")
    report = algorithm_report(
        fr.optimized, "conv_algorithm" in fr.passes, fr.direct_convs, fr.winograd_convs, flops_bar(fr.target)
    )
    for name, tile in report["winograd"].items():
        why = "" if name in fr.winograd_convs else " (the rule's conditions hold)"
        out.setdefault(name, []).append(f"conv_algorithm: Winograd {tile}{why}")
    for name, reason in report["direct"].items():
        out.setdefault(name, []).append(f"conv_algorithm: stays direct: {reason}")
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _kernel_lines(k: KernelExplanation) -> list[str]:
    flops = f"{k.flops / 1e6:.2f} MFLOP" if k.flops >= 1e5 else f"{k.flops} FLOP"
    timed = f", measured {k.measured_s * 1e3:.3f} ms" if k.measured_s is not None else ""
    lines = [f"{k.kernel}  ({flops}{timed})"]
    nodes = ", ".join(
        f"{n.node} ({n.onnx_op or 'made by a pass'} -> {op_list(n.ops) or 'absorbed'})" for n in k.nodes
    )
    lines.append(f"  nodes           {nodes}")
    for p in k.passes:
        lines.append(f"  pass            {p}")
    lines.append(f"  implementation  {k.implementation}")
    if len(k.implementations) > 1:
        lines.append(f"  available       {', '.join(k.implementations)}")
    for reason in k.why:
        lines.append(f"  why             {reason}")
    others = [r for r in k.rules if r != k.rule]
    lines.append(f"  rule            {k.rule}" + (f" (also: {', '.join(others)})" if others else ""))
    if k.fallback:
        lines.append(f"  fallback        {k.fallback}")
    lines.append(f"  schedule        {_source(k.schedule)}")
    if k.decisions:
        lines.append(f"  decisions       {', '.join(f'{n}={v}' for n, v in k.decisions.items())}")
    return lines


def _source(p: Mapping[str, Any]) -> str:
    source = str(p.get("source", "default"))
    if source == "default":
        return "default (no tuning record" + (f"; {p['note']})" if p.get("note") else ")")
    parts = [source]
    if p.get("record_id") is not None:
        parts.append(f"record #{p['record_id']}")
    if p.get("measured_s") is not None:
        parts.append(f"{p['measured_s'] * 1e3:.3f} ms alone")
    if p.get("model_s") is not None:
        parts.append(f"{p['model_s'] * 1e3:.3f} ms in the model")
    if p.get("pinned_by"):
        parts.append(f"pinned by --override {p['pinned_by']}")
    if p.get("file"):
        parts.append(f"from {p['file']}")
    return ", ".join(parts)
