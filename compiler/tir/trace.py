"""Schedules as data: a Trace is the list of primitive applications with their decisions.

`Schedule` wraps a PrimFunc, applies primitives (compiler.tir.schedule) and records each one as an
Instruction; `Trace.to_json()` is what the database stores and `replay(func, trace)` rebuilds
the identical scheduled PrimFunc on the same workload.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from compiler.errors import ScheduleError
from compiler.tir import schedule as prim
from compiler.tir.ir import ForKind, Layout, PrimFunc
from compiler.tir.legality import check_legal

TRACE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Instruction:
    prim: str
    args: tuple[tuple[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"prim": self.prim, **{k: _jsonable(v) for k, v in self.args}}


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    return v


def _frozen(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_frozen(x) for x in v)
    return v


@dataclass(frozen=True, slots=True)
class Trace:
    """Primitive applications in order, plus the named decisions that produced them (the tuner
    mutates decisions; replay needs only the instructions)."""

    instructions: tuple[Instruction, ...]
    decisions: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": TRACE_VERSION,
            "instructions": [i.to_json() for i in self.instructions],
        }
        if self.decisions:
            out["decisions"] = {k: _jsonable(v) for k, v in self.decisions}
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(data: dict[str, Any] | str) -> Trace:
        """A trace from its JSON, checked against the trace schema (a record is data from anywhere:
        every primitive, argument and decision must be what temper writes, or ScheduleError)."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except (json.JSONDecodeError, RecursionError) as e:
                raise ScheduleError(f"trace is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ScheduleError("a trace must be a JSON object")
        version = data.get("version")
        if version != TRACE_VERSION or isinstance(version, bool):
            raise ScheduleError(f"unsupported trace format {version!r} (expected version {TRACE_VERSION})")
        extra = sorted(set(data) - {"version", "instructions", "decisions"})
        if extra:
            raise ScheduleError(f"trace has unknown field {extra[0]!r}")
        raw_insts = data.get("instructions", [])
        if not isinstance(raw_insts, list) or len(raw_insts) > MAX_INSTRUCTIONS:
            raise ScheduleError(f"trace instructions must be a list of at most {MAX_INSTRUCTIONS}")
        insts = [_instruction(raw, k) for k, raw in enumerate(raw_insts)]
        decisions = data.get("decisions", {})
        if not isinstance(decisions, dict) or len(decisions) > MAX_DECISIONS:
            raise ScheduleError(f"trace decisions must be an object of at most {MAX_DECISIONS} entries")
        for name, value in decisions.items():
            if not _is_name(name) or not _is_decision(value):
                raise ScheduleError(f"trace decision {name!r} is not a name with a plain value")
        return Trace(tuple(insts), tuple(sorted((k, _frozen(v)) for k, v in decisions.items())))


# ---- the trace schema: every primitive, its arguments and their kinds ---------------------------------

MAX_INSTRUCTIONS = 512
MAX_DECISIONS = 256
_MAX_NAME = 256


def _is_name(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= _MAX_NAME and v.isprintable()


def _is_int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v < 1 << 31


def _is_decision(v: Any) -> bool:
    scalar = (bool, int, float, str, type(None))
    if isinstance(v, list):
        return len(v) <= 16 and all(isinstance(x, scalar) and not isinstance(x, list) for x in v)
    return isinstance(v, scalar) and (not isinstance(v, str) or len(v) <= _MAX_NAME)


_KINDS: dict[str, Any] = {
    "name": _is_name,
    "names": lambda v: isinstance(v, list) and 1 <= len(v) <= 32 and all(_is_name(x) for x in v),
    "factors": lambda v: (
        isinstance(v, list) and 2 <= len(v) <= 8 and all(x is None or _is_int(x, 1) for x in v)
    ),
    "scope": lambda v: v in ("local", "global"),
    "splits": lambda v: (
        isinstance(v, list)
        and len(v) <= 8
        and all(isinstance(p, list) and len(p) == 2 and _is_int(p[0]) and _is_int(p[1], 1) for p in v)
    ),
    "perm": lambda v: isinstance(v, list) and len(v) <= 32 and all(_is_int(x) for x in v),
}
# primitive -> {argument: kind}; what replay applies and from_json accepts
PRIMITIVES: dict[str, dict[str, str]] = {
    "split": {"loop": "name", "factors": "factors"},
    "reorder": {"loops": "names"},
    "fuse": {"loops": "names"},
    "parallel": {"loop": "name"},
    "vectorize": {"loop": "name"},
    "unroll": {"loop": "name"},
    "compute_inline": {"block": "name"},
    "compute_at": {"block": "name", "loop": "name"},
    "reverse_compute_at": {"block": "name", "loop": "name"},
    "decompose_reduction": {"block": "name", "loop": "name"},
    "cache_write": {"block": "name", "scope": "scope"},
    "set_scope": {"buffer": "name", "scope": "scope"},
    "cache_read": {"block": "name", "buffer": "name", "splits": "splits", "perm": "perm"},
    "pack_layout": {"param": "name", "splits": "splits", "perm": "perm"},
}


def _instruction(raw: Any, index: int) -> Instruction:
    if not isinstance(raw, dict) or "prim" not in raw:
        raise ScheduleError(f"trace instruction {index} is not an object with a 'prim'")
    prim_name = raw["prim"]
    schema = PRIMITIVES.get(prim_name) if isinstance(prim_name, str) else None
    if schema is None:
        raise ScheduleError(f"trace instruction {index}: unknown schedule primitive {prim_name!r}")
    args = {k: v for k, v in raw.items() if k != "prim"}
    if set(args) != set(schema):
        wrong = sorted(set(args) ^ set(schema))
        raise ScheduleError(f"trace instruction {index} ({prim_name}): wrong arguments {wrong}")
    for name, kind in schema.items():
        if not _KINDS[kind](args[name]):
            raise ScheduleError(f"trace instruction {index} ({prim_name}): bad {name!r} {args[name]!r}")
    return Instruction(prim_name, tuple(sorted((k, _frozen(v)) for k, v in args.items())))


class Decider(Protocol):
    """Where a schedule's open decisions come from: defaults, random draws, or a mutated parent."""

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any: ...


class Schedule:
    """A PrimFunc being scheduled, with the trace of what was applied so far.

    Schedule rules ask `decide(name, options, default)` for every tunable choice (tile sizes, loop
    orders...); without a decider the default is taken, which is the default schedule.
    """

    def __init__(
        self, func: PrimFunc, const_params: frozenset[str] = frozenset(), decider: Decider | None = None
    ) -> None:
        self.func = func
        self.const_params = const_params
        self.decider = decider
        self.decisions: dict[str, Any] = {}
        self._insts: list[Instruction] = []

    @property
    def trace(self) -> Trace:
        return Trace(tuple(self._insts), tuple(sorted(self.decisions.items())))

    @contextlib.contextmanager
    def attempt(self) -> Iterator[None]:
        """Primitives that stand or fall together: on a ScheduleError inside the block, the schedule
        (function, trace, decisions) is as it was before it, and the error goes on."""
        func, count, decisions = self.func, len(self._insts), dict(self.decisions)
        try:
            yield
        except ScheduleError:
            self.func, self.decisions = func, decisions
            del self._insts[count:]
            raise

    def decide(self, name: str, options: Sequence[Any], default: Any) -> Any:
        opts = list(options) or [default]
        value = default if self.decider is None else self.decider.choose(name, opts, default)
        if value not in opts:
            value = default if default in opts else opts[0]
        self.decisions[name] = value
        return value

    def _rec(self, prim_name: str, **args: Any) -> None:
        self._insts.append(Instruction(prim_name, tuple(sorted((k, _frozen(v)) for k, v in args.items()))))

    # each method: apply, then record (a failing primitive records nothing)
    def split(self, loop: str, factors: Sequence[int | None]) -> list[str]:
        self.func, names = prim.split(self.func, loop, list(factors))
        self._rec("split", loop=loop, factors=list(factors))
        return names

    def reorder(self, *loops: str) -> None:
        self.func = prim.reorder(self.func, list(loops))
        self._rec("reorder", loops=list(loops))

    def fuse(self, *loops: str) -> str:
        self.func, name = prim.fuse(self.func, list(loops))
        self._rec("fuse", loops=list(loops))
        return name

    def parallel(self, loop: str) -> None:
        self.func = prim.annotate(self.func, loop, ForKind.PARALLEL)
        self._rec("parallel", loop=loop)

    def vectorize(self, loop: str) -> None:
        self.func = prim.annotate(self.func, loop, ForKind.VECTORIZED)
        self._rec("vectorize", loop=loop)

    def unroll(self, loop: str) -> None:
        self.func = prim.annotate(self.func, loop, ForKind.UNROLLED)
        self._rec("unroll", loop=loop)

    def compute_inline(self, block: str) -> None:
        self.func = prim.compute_inline(self.func, block)
        self._rec("compute_inline", block=block)

    def compute_at(self, block: str, loop: str) -> None:
        self.func = prim.compute_at(self.func, block, loop)
        self._rec("compute_at", block=block, loop=loop)

    def reverse_compute_at(self, block: str, loop: str) -> None:
        self.func = prim.reverse_compute_at(self.func, block, loop)
        self._rec("reverse_compute_at", block=block, loop=loop)

    def cache_write(self, block: str, scope: str = "local") -> str:
        self.func, name = prim.cache_write(self.func, block, scope)
        self._rec("cache_write", block=block, scope=scope)
        return name

    def set_scope(self, buffer: str, scope: str) -> None:
        self.func = prim.set_scope(self.func, buffer, scope)
        self._rec("set_scope", buffer=buffer, scope=scope)

    def decompose_reduction(self, block: str, loop: str) -> None:
        self.func = prim.decompose_reduction(self.func, block, loop)
        self._rec("decompose_reduction", block=block, loop=loop)

    def cache_read(self, block: str, buffer: str, layout: Layout) -> str:
        self.func, name = prim.cache_read(self.func, block, buffer, layout)
        self._rec(
            "cache_read",
            block=block,
            buffer=buffer,
            splits=[list(s) for s in layout.splits],
            perm=list(layout.perm),
        )
        return name

    def pack_layout(self, param: str, layout: Layout) -> None:
        if param not in self.const_params:
            raise ScheduleError(f"pack_layout: {param!r} is not a constant parameter")
        self.func = prim.pack_layout(self.func, param, layout)
        self._rec("pack_layout", param=param, splits=[list(s) for s in layout.splits], perm=list(layout.perm))

    # read-only queries used by schedule rules
    def loops(self) -> list[str]:
        return prim.loop_names(self.func)

    def blocks(self) -> list[str]:
        return prim.block_names(self.func)


def _layout(a: dict[str, Any]) -> Layout:
    return Layout(tuple(tuple(x) for x in a["splits"]), tuple(a["perm"]))


_APPLY: dict[str, Any] = {
    "split": lambda sch, a: sch.split(a["loop"], list(a["factors"])),
    "reorder": lambda sch, a: sch.reorder(*a["loops"]),
    "fuse": lambda sch, a: sch.fuse(*a["loops"]),
    "parallel": lambda sch, a: sch.parallel(a["loop"]),
    "vectorize": lambda sch, a: sch.vectorize(a["loop"]),
    "unroll": lambda sch, a: sch.unroll(a["loop"]),
    "compute_inline": lambda sch, a: sch.compute_inline(a["block"]),
    "compute_at": lambda sch, a: sch.compute_at(a["block"], a["loop"]),
    "reverse_compute_at": lambda sch, a: sch.reverse_compute_at(a["block"], a["loop"]),
    "decompose_reduction": lambda sch, a: sch.decompose_reduction(a["block"], a["loop"]),
    "cache_write": lambda sch, a: sch.cache_write(a["block"], a["scope"]),
    "set_scope": lambda sch, a: sch.set_scope(a["buffer"], a["scope"]),
    "cache_read": lambda sch, a: sch.cache_read(a["block"], a["buffer"], _layout(a)),
    "pack_layout": lambda sch, a: sch.pack_layout(a["param"], _layout(a)),
}
assert set(_APPLY) == set(PRIMITIVES)


def replay(func: PrimFunc, trace: Trace, const_params: frozenset[str] = frozenset()) -> Schedule:
    """Apply a recorded trace to a fresh PrimFunc of the same workload; the result must pass the
    legality checks (compiler.tir.legality), so no trace can produce a kernel that computes
    something else."""
    sch = Schedule(func, const_params)
    sch.decisions = dict(trace.decisions)
    for inst in trace.instructions:
        apply = _APPLY.get(inst.prim)
        if apply is None:
            raise ScheduleError(f"unknown schedule primitive {inst.prim!r}")
        try:
            apply(sch, dict(inst.args))
        except KeyError as e:
            raise ScheduleError(f"trace instruction {inst.prim!r} lacks argument {e}") from None
    check_legal(sch.func)
    return sch
