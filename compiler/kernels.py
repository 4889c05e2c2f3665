"""Fused group -> kernel: lower to a PrimFunc, schedule it (default, tuned record or override),
flatten it for code generation. Also the stable workload key the tuner and database use.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from compiler.errors import CompilerError, ScheduleError
from compiler.graph.ir import Call, Const, Graph, Var
from compiler.ops import registry
from compiler.target import Target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.ir import PrimFunc
from compiler.tir.legality import check_legal
from compiler.tir.lower import lower, stages_of
from compiler.tir.rules import KernelInfo, generic_schedule
from compiler.tir.trace import Decider, Schedule, Trace, replay

WORKLOAD_VERSION = 1


@dataclass(frozen=True)
class ScheduleChoice:
    """A schedule to apply instead of the default, with where it came from (for the manifest)."""

    trace: Trace
    provenance: Mapping[str, Any]  # {"source": "record"|"override", "record_id": ..., ...}
    # how long the kernel took alone with this schedule, when it was measured
    seconds: float | None = None


class ScheduleSource(Protocol):
    """What the compiler asks for tuned schedules (implemented over the tuning database)."""

    def lookup(self, workload_key: str, target_key: str) -> ScheduleChoice | None: ...


@dataclass(frozen=True)
class Workload:
    """A lowered, unscheduled kernel plus what schedules need to know about it."""

    key: str
    func: PrimFunc
    info: KernelInfo
    const_params: frozenset[str]
    anchor_op: str | None
    flops: int
    nodes: tuple[str, ...]  # source node names fused into this kernel


@dataclass(frozen=True)
class Kernel:
    name: str
    symbol: str
    workload: Workload
    scheduled: PrimFunc
    flat: PrimFunc
    trace: Trace
    provenance: Mapping[str, Any] = field(default_factory=dict)
    # the symbol of an earlier kernel with the same workload and schedule, whose code this one runs
    same_as: str | None = None


class GroupLike(Protocol):
    """What lowering reads of a fused group: compiler.graph.passes.fuse.Group, or the stand-in the
    tuner rebuilds from a workload's description."""

    @property
    def params(self) -> tuple[Var, ...]: ...

    @property
    def body(self) -> Graph: ...

    @property
    def anchor(self) -> Call | None: ...


def _sym(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else f"k_{s}"


def workload_key(group: GroupLike, const_params: frozenset[int]) -> str:
    """Content hash of the group's computation: ops, attributes, types, which params are constant.

    Node names and constant values are left out so identical kernels share one key everywhere.
    """
    body = group.body
    index: dict[int, int] = {id(v): k for k, v in enumerate(group.params)}
    ops = []
    for k, node in enumerate(body.calls()):
        index[id(node)] = len(group.params) + k
        entry = [
            node.op,
            [index[id(a)] for a in node.args],
            _canon(node.attrs),
            list(node.type.shape),
            node.type.dtype,
        ]
        version = registry.get(node.op).version
        ops.append(entry if version == 1 else [*entry, version])  # version 1: keys as before
    payload = {
        "v": WORKLOAD_VERSION,
        "params": [[list(p.type.shape), p.type.dtype, k in const_params] for k, p in enumerate(group.params)],
        "ops": ops,
        "out": index[id(body.outputs[0])],
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _canon(attrs: Any) -> Any:
    if isinstance(attrs, tuple):
        return [_canon(a) for a in attrs]
    if isinstance(attrs, float) and attrs != attrs:
        return "nan"
    if isinstance(attrs, float) and attrs in (float("inf"), float("-inf")):
        return str(attrs)
    return attrs


def _flops(func_stages: list[te.Tensor]) -> int:
    total = 0
    for t in func_stages:
        assert t.op is not None
        n = 1
        for d in t.shape:
            n *= d
        if isinstance(t.op.body, te.Reduce):
            r = 1
            for ax in t.op.body.axes:
                r *= ax.extent
            total += 2 * n * r
        else:
            total += n
    return total


def lower_group(group: GroupLike, kernel_name: str, target: Target, const_params: frozenset[int]) -> Workload:
    """Evaluate every op's compute definition over the group's params and lower the result."""
    with te.tensor_scope():
        env: dict[int, te.Tensor] = {}
        params = []
        for k, v in enumerate(group.params):
            t = te.placeholder(v.type.shape, v.type.dtype, f"p{k}")
            env[id(v)] = t
            params.append(t)
        used: dict[str, int] = {}
        anchor_name: str | None = None
        nodes = []
        for node in group.body.calls():
            opdef = registry.get(node.op)
            if opdef.compute is None:
                raise CompilerError(f"op {node.op} has no compute definition", node=node.name, op=node.op)
            args = []
            for a in node.args:
                if isinstance(a, (Var, Call)):
                    args.append(env[id(a)])
                elif isinstance(a, Const):
                    raise CompilerError("constant inside a fused group body", node=node.name, op=node.op)
            k = used.get(node.op, 0)
            used[node.op] = k + 1
            stage = node.op if k == 0 else f"{node.op}_{k}"
            try:
                t = opdef.compute(args, node.attr_dict, node.type, stage)
            except (KeyError, ValueError, TypeError) as e:
                raise CompilerError(f"cannot lower: {e}", node=node.name, op=node.op) from e
            env[id(node)] = t
            nodes.append(node.name)
            if group.anchor is not None and node is group.anchor:
                anchor_name = stage
        output = env[id(group.body.outputs[0])]
        if output.op is None:
            raise CompilerError(f"kernel {kernel_name} computes nothing")
        stages = stages_of(output)
        func = lower(kernel_name, params, output)
    tags = {}
    names = {t.op.name for t in stages if t.op}
    for t in stages:
        assert t.op is not None
        tags[t.op.name] = t.op.tag
    if anchor_name is not None and anchor_name not in names:
        anchor_name = None
    info = KernelInfo(target=target, output_block=func.params[-1].name, anchor_block=anchor_name, tags=tags)
    cparams = frozenset(f"p{k}" for k in const_params)
    anchor_op = group.anchor.op if group.anchor is not None else None
    return Workload(
        workload_key(group, const_params), func, info, cparams, anchor_op, _flops(stages), tuple(nodes)
    )


def default_schedule(w: Workload, decider: Decider | None = None) -> tuple[Schedule, str]:
    """The op family's schedule rule for this target, or the generic one when the family has none
    or it does not apply to this kernel. Without a decider every decision takes its default (the
    default schedule); the tuner passes deciders that sample the rule's space. Returns the
    schedule and the rule's name."""
    sch, rule, _ = choose_rule(w, decider)
    return sch, rule


def choose_rule(w: Workload, decider: Decider | None = None) -> tuple[Schedule, str, str | None]:
    """default_schedule, with why the generic rule was used when the family has a rule of its own
    (the rule's ScheduleError: the condition it found unmet); None when the family rule applied or
    there is none to try."""
    opdef = registry.get(w.anchor_op) if w.anchor_op else None
    fallback = None
    if opdef is not None and opdef.schedule is not None:
        if w.info.anchor_block is None:
            fallback = f"the {opdef.name} rule needs its anchor stage, which lowering inlined away"
        else:
            sch = Schedule(w.func, w.const_params, decider)
            try:
                opdef.schedule(sch, w.info)
                return sch, opdef.name, None
            except ScheduleError as e:
                fallback = f"the {opdef.name} rule does not apply: {e.message}"
    sch = Schedule(w.func, w.const_params, decider)
    generic_schedule(sch, w.info)
    return sch, "generic", fallback


def family_rule(w: Workload) -> str | None:
    """The name of the schedule rule of the kernel's op family, None when it has none."""
    opdef = registry.get(w.anchor_op) if w.anchor_op else None
    return opdef.name if opdef is not None and opdef.schedule is not None else None


def build_kernel(w: Workload, name: str, choice: ScheduleChoice | None = None) -> Kernel:
    if choice is not None:
        try:
            sch = replay(w.func, choice.trace, w.const_params)
            provenance = dict(choice.provenance)
        except ScheduleError as e:
            if choice.provenance.get("source") == "override":
                raise ScheduleError(f"override schedule for kernel {name} does not apply: {e}") from e
            sch, rule, fallback = choose_rule(w)
            provenance = {"source": "default", "rule": rule, "note": f"tuned record did not apply: {e}"}
            if fallback:
                provenance["fallback"] = fallback
    else:
        sch, rule, fallback = choose_rule(w)
        check_legal(sch.func)  # a default rule is held to the same rules as any trace
        provenance = {"source": "default", "rule": rule, **({"fallback": fallback} if fallback else {})}
    flat = flatten(sch.func)
    return Kernel(name, _sym(name), w, sch.func, flat, sch.trace, provenance)


def build_kernels(requests: Sequence[tuple[Workload, str, ScheduleChoice | None]]) -> list[Kernel]:
    """build_kernel for each (workload, name, choice), scheduling each distinct (workload key,
    schedule) once: a repeated block (ResNet's, DenseNet's) shares the first kernel's code
    (`same_as`), so it is neither scheduled nor compiled again."""
    first: dict[tuple[str, str], Kernel] = {}
    kernels = []
    for w, name, choice in requests:
        ident = (w.key, choice.trace.dumps() if choice is not None else "")
        k0 = first.get(ident)
        if k0 is None:
            k = first[ident] = build_kernel(w, name, choice)
        else:
            # the same code, but its own provenance: one kernel's override is another one's record
            own = choice is not None and k0.provenance.get("source") != "default"
            k = replace(
                k0,
                provenance=dict(choice.provenance) if own and choice is not None else k0.provenance,
                name=name,
                symbol=_sym(name),
                workload=w,
                scheduled=replace(k0.scheduled, name=w.func.name),
                flat=replace(k0.flat, name=w.func.name),
                same_as=k0.same_as or k0.symbol,
            )
        kernels.append(k)
    return kernels


@dataclass(frozen=True)
class Candidate:
    """One kernel built on its own (for measuring a schedule): a shared library exporting `symbol`
    with the kernel C ABI, and the packed layouts its constant parameters must be given in."""

    library: bytes
    symbol: str
    layouts: Mapping[str, Any]  # param name -> compiler.tir.ir.Layout
    param_shapes: tuple[tuple[int, ...], ...]  # unpacked shapes, output last
    param_dtypes: tuple[str, ...]


def build_candidate(w: Workload, trace: Trace | None, target: Target) -> Candidate:
    """Replay `trace` (None: the default schedule) on the workload and compile it alone.

    Raises ScheduleError when the trace does not apply and CodegenError when LLVM or the linker fail.
    """
    from compiler.codegen.library import CodeLibrary
    from compiler.codegen.stream import stream_param

    sch = replay(w.func, trace, w.const_params) if trace is not None else default_schedule(w)[0]
    flat = flatten(sch.func)
    lib = CodeLibrary(target, name=w.func.name)
    symbol = _sym(w.func.name)
    lib.add_kernel(flat, symbol, stream_param(flat, w.const_params, w.flops))
    return Candidate(
        lib.shared_library(),
        symbol,
        dict(sch.func.layouts),
        tuple(p.shape for p in w.func.params),
        tuple(p.dtype for p in w.func.params),
    )
