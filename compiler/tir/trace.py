"""Schedules as data: a Trace is the list of primitive applications with their decisions.

`Schedule` wraps a PrimFunc, applies primitives (compiler.tir.schedule) and records each one as an
Instruction; `Trace.to_json()` is what the database stores and `replay(func, trace)` rebuilds
the identical scheduled PrimFunc on the same workload.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from compiler.errors import ScheduleError
from compiler.tir import schedule as prim
from compiler.tir.ir import ForKind, Layout, PrimFunc

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
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as e:
                raise ScheduleError(f"trace is not valid JSON: {e}") from e
        if not isinstance(data, dict) or data.get("version") != TRACE_VERSION:
            raise ScheduleError(f"unsupported trace format (expected version {TRACE_VERSION})")
        insts = []
        for raw in data.get("instructions", []):
            if not isinstance(raw, dict) or "prim" not in raw:
                raise ScheduleError(f"malformed trace instruction {raw!r}")
            args = tuple(sorted((k, _frozen(v)) for k, v in raw.items() if k != "prim"))
            insts.append(Instruction(raw["prim"], args))
        decisions = data.get("decisions", {})
        if not isinstance(decisions, dict):
            raise ScheduleError("trace decisions must be an object")
        return Trace(tuple(insts), tuple(sorted((k, _frozen(v)) for k, v in decisions.items())))


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


def replay(func: PrimFunc, trace: Trace, const_params: frozenset[str] = frozenset()) -> Schedule:
    """Apply a recorded trace to a fresh PrimFunc of the same workload."""
    sch = Schedule(func, const_params)
    sch.decisions = dict(trace.decisions)
    for inst in trace.instructions:
        a = dict(inst.args)
        p = inst.prim
        try:
            if p == "split":
                sch.split(a["loop"], list(a["factors"]))
            elif p in ("reorder", "fuse"):
                getattr(sch, p)(*a["loops"])
            elif p in ("parallel", "vectorize", "unroll"):
                getattr(sch, p)(a["loop"])
            elif p == "compute_inline":
                sch.compute_inline(a["block"])
            elif p in ("compute_at", "reverse_compute_at", "decompose_reduction"):
                getattr(sch, p)(a["block"], a["loop"])
            elif p == "cache_write":
                sch.cache_write(a["block"], a.get("scope", "local"))
            elif p == "set_scope":
                sch.set_scope(a["buffer"], a["scope"])
            elif p == "cache_read":
                sch.cache_read(
                    a["block"], a["buffer"], Layout(tuple(tuple(s) for s in a["splits"]), tuple(a["perm"]))
                )
            elif p == "pack_layout":
                sch.pack_layout(a["param"], Layout(tuple(tuple(s) for s in a["splits"]), tuple(a["perm"])))
            else:
                raise ScheduleError(f"unknown schedule primitive {p!r}")
        except KeyError as e:
            raise ScheduleError(f"trace instruction {p!r} lacks argument {e}") from None
    return sch
