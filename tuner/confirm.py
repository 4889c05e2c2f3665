"""In-model confirmation: each task's finalists timed inside the compiled model.

A kernel timed alone is not the kernel inside its model. There, its input has just been written by
the kernel before it (by both cores, split that kernel's way), its weights were evicted by the
kernels since its last call, and its output is read at once by the next one. Two schedules that
time the same alone can differ by 2x in place: on MobileNetV2 (2 Zen 4 cores) the search's pick
for the 112->56 depthwise conv measured 301 us alone against its default's 305, and ran 481 us in
the model against the default's 250.

So after the search, every task's finalists (its best records and its default schedule) are
compiled into the whole model, in variants that each take one finalist per task (variant 0: every
task's best, the last: every task's default), and every kernel is timed in place, in a child
process, the variants alternating round by round so that a machine whose speed drifts favours
none. A record's in-model time (seconds per call) goes to the database; a workload's best record
is then the finalist that ran fastest in the model.

Kernels timed one call at a time are still not the model run back to back (on BERT, a matmul that
won its per-call timing with threads made the whole model slower), so the combination of the
in-model picks is last compiled and run whole against the defaults, again alternating. Only when
it runs faster are the picks stored; otherwise only the defaults' in-model times are, and
compilations keep the default schedules: a tuned model is never slower than the untuned one. When
picks that switch convs' algorithms (below) lose, the same schedule picks without the switches are
run whole against the defaults once more, and kept if they win: the switches are what most often
loses in place, and they would otherwise take every other task's gain down with them.

The picks include the algorithm switches measurements make: a conv whose twin of the other
algorithm (its alternative task) ran faster alone is compiled as that twin in the picks, as a
compilation from the database would (compiler.pipeline.measured_algorithms): a Winograd conv
direct, or a conv the cost rule keeps direct as Winograd. The twin's in-model time is stored only
when the picks win; a kernel timed in the model gives way only to a twin timed there, so no
algorithm switch reaches a compilation without having run whole and faster. This matters most for
Winograd twins: alone, a Winograd kernel keeps its larger transformed weights in cache and nearly
always wins; in place they stream from DRAM, which one CPU's arithmetic hides and another's not.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from compiler.kernels import ScheduleChoice
from compiler.pipeline import CompiledModel, CompileOptions, ModelInput, compile_model
from compiler.target import Target
from compiler.tir.trace import Trace
from tuner.records import Database, TuningRecord, trace_hash
from tuner.space import default_trace
from tuner.task import Task


@dataclass(frozen=True)
class ConfirmOptions:
    finalists: int = 3  # per task: its best records, the default schedule among them
    rounds: int = 7  # rounds over every variant; a kernel's time is the median over rounds
    repeat: int = 10  # model runs per variant and round (a kernel's per-round time is their median)
    timeout_s: float = 600.0  # for the timing process (compiling the variants is not counted)

    def __post_init__(self) -> None:
        if self.finalists < 1 or self.rounds < 1 or self.repeat < 1 or self.timeout_s <= 0:
            raise ValueError("confirm options need finalists, rounds and repeat >= 1 and a positive timeout")


@dataclass
class TaskConfirmation:
    """One task's finalists: record id -> seconds per call alone and in the model."""

    name: str
    key: str
    alone: dict[int, float] = field(default_factory=dict)
    in_model: dict[int, float] = field(default_factory=dict)
    default_id: int | None = None
    keep_default: bool = False  # the whole model ran no faster with the in-model picks

    @property
    def fastest_in_model(self) -> int | None:
        """The finalist that ran fastest in the model, ties broken as the database's `best` breaks
        them (the faster alone, then the older record)."""
        if not self.in_model:
            return None
        return min(self.in_model, key=lambda rid: (self.in_model[rid], self.alone.get(rid, 0.0), rid))

    @property
    def chosen(self) -> int | None:
        """The record the compiler will use: the fastest in the model, or the default when the whole
        model ran no faster with the picks."""
        if self.keep_default and self.default_id is not None:
            return self.default_id
        return self.fastest_in_model

    @property
    def stored(self) -> dict[int, float]:
        """The in-model times that go to the database (those of the records it may choose from)."""
        if self.keep_default and self.default_id is not None:
            return {self.default_id: self.in_model[self.default_id]}
        return dict(self.in_model)

    @property
    def isolated_best(self) -> int | None:
        return min(self.alone, key=lambda rid: (self.alone[rid], rid)) if self.alone else None


@dataclass
class Confirmation:
    tasks: list[TaskConfirmation]
    variant_secs: list[float]  # median run() latency of each variant (0: best alone, last: defaults)
    seconds: float  # wall time of the whole confirmation (compiles included)
    # median run() latency of the in-model picks and of the defaults, timed whole against each other
    # (None when every pick was the default: nothing to compare)
    whole_model_secs: tuple[float, float] | None = None
    # convs the picks ran direct (their twin faster alone), by ONNX node; kept only with the picks
    direct_convs: tuple[str, ...] = ()
    # convs the picks ran as Winograd past the cost rule (their twin faster alone), likewise
    winograd_convs: tuple[str, ...] = ()
    picks_lost: bool = False  # the whole model ran no faster with the picks

    @property
    def kept_defaults(self) -> bool:
        return self.picks_lost or any(t.keep_default for t in self.tasks)

    @property
    def changed(self) -> list[TaskConfirmation]:
        """Tasks whose in-model choice is not the record that was fastest alone."""
        return [t for t in self.tasks if t.chosen is not None and t.chosen != t.isolated_best]


def finalists(db: Database, task: Task, target_key: str, count: int) -> list[TuningRecord]:
    """The task's `count` fastest successful records (distinct traces), its default schedule's record
    taking the last place if it is not among them; empty when nothing was measured successfully."""
    records = sorted((r for r in db.records(task.key, target_key) if r.ok), key=lambda r: (r.seconds, r.id))
    default_hash = trace_hash(default_trace(task.workload).to_json())
    default = next((r for r in records if r.trace_hash == default_hash), None)
    chosen: list[TuningRecord] = []
    seen: set[str] = set()
    for rec in records:
        if len(chosen) >= count - (default is not None):
            break
        if rec.trace_hash in seen or rec.trace_hash == default_hash:
            continue
        seen.add(rec.trace_hash)
        chosen.append(rec)
    if default is not None:
        chosen.append(default)
    return chosen


def _pick(finals: list[TuningRecord], variant: int, variants: int) -> TuningRecord:
    """A task's finalist in a variant: the v-th fastest alone, the default in the last variant (a task
    with fewer finalists repeats its slowest non-default one)."""
    if variant == variants - 1 or len(finals) == 1:
        return finals[-1]
    return finals[min(variant, len(finals) - 2)]


class _Fixed:
    """A schedule source answering from a fixed map (workload key -> record); `timed`: with each
    record's time alone, which lets a direct twin measured faster than its Winograd conv replace it
    (as a compilation from the database before any in-model time was stored)."""

    def __init__(self, choices: dict[str, TuningRecord], timed: bool = False) -> None:
        self.choices = choices
        self.timed = timed

    def lookup(self, workload_key: str, target_key: str) -> ScheduleChoice | None:
        rec = self.choices.get(workload_key)
        if rec is None:
            return None
        return ScheduleChoice(
            Trace.from_json(dict(rec.trace)),
            {"source": "record", "record_id": rec.id},
            rec.seconds if self.timed else None,
        )


def algorithm_twins(
    model: ModelInput, options: CompileOptions, db: Database, target: Target
) -> dict[str, TuningRecord]:
    """The twins of the other algorithm of the model's conv kernels that tuning measured: twin
    workload key -> its fastest record alone (what measured_algorithms weighs against the rule's
    kernel)."""
    from compiler.pipeline import algorithm_alternatives, build_frontier

    twins = {}
    for alt in algorithm_alternatives(model, options, build_frontier(model, options)):
        ok = [r for r in db.records(alt.twin.key, target.key) if r.ok and r.trusted]
        if ok:
            twins[alt.twin.key] = min(ok, key=lambda r: (r.seconds, r.id or 0))
    return twins


def _per_call(
    kernels: dict[str, tuple[str, TuningRecord | None]], rounds: list[dict[str, float]]
) -> dict[tuple[str, int], list[float]]:
    """(workload, record) -> its seconds per call in each round, from one variant's kernel timings."""
    totals: dict[tuple[str, int], list[float]] = {}
    calls: dict[tuple[str, int], int] = {}
    for name, (key, rec) in kernels.items():
        if rec is None or rec.id is None:
            continue
        pair = (key, rec.id)
        acc = totals.setdefault(pair, [0.0] * len(rounds))
        for i, round_ in enumerate(rounds):
            acc[i] += round_[name]
        calls[pair] = calls.get(pair, 0) + 1
    return {pair: [s / calls[pair] for s in acc] for pair, acc in totals.items()}


def confirm(
    model: ModelInput,
    options: CompileOptions,
    db: Database,
    tasks: Sequence[Task],
    target: Target,
    copts: ConfirmOptions | None = None,
    executor: Executor | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Confirmation | None:
    """Time every task's finalists inside the model and store their in-model times; None when no task
    has a successful record. A task with one finalist is timed too: its in-model time is what keeps
    its conv from giving way to a twin timed only alone (measured_algorithms). The timing
    runs in a child process of this one, or through `executor` (the runner's: the machine the
    candidates were timed on). `should_stop` is polled throughout: when it says so, ConfirmStopped
    is raised and nothing is stored."""
    copts = copts or ConfirmOptions()
    stop = should_stop or (lambda: False)
    start = time.monotonic()
    picks = {t.key: finalists(db, t, target.key, copts.finalists) for t in tasks}
    nvariants = max((len(p) for p in picks.values()), default=0)
    if nvariants < 1:
        return None
    artifacts, variant_records = [], []
    for v in range(nvariants):
        if stop():
            raise ConfirmStopped("stopped while compiling the model variants")
        choices = {k: _pick(p, v, nvariants) for k, p in picks.items() if p}
        compiled = compile_model(model, options, _Fixed(choices))
        artifacts.append(_artifact(compiled))
        kernels = compiled.manifest["kernels"]
        variant_records.append({k["name"]: (key := k["workload_key"], choices.get(key)) for k in kernels})
    timings, run_secs = _timed(artifacts, copts, executor, stop)
    by_task = {t.key: TaskConfirmation(t.name, t.key) for t in tasks}
    # per (workload, record): its per-call seconds in each round of each variant it ran in
    samples: dict[tuple[str, int], list[float]] = {}
    for v, kernels in enumerate(variant_records):
        for pair, per_round in _per_call(kernels, timings[v]).items():
            samples.setdefault(pair, []).extend(per_round)
    for task in tasks:
        conf = by_task[task.key]
        default_hash = trace_hash(default_trace(task.workload).to_json())
        for rec in picks[task.key]:
            assert rec.id is not None
            conf.alone[rec.id] = rec.seconds
            if rec.trace_hash == default_hash:
                conf.default_id = rec.id
            if (task.key, rec.id) in samples:
                conf.in_model[rec.id] = statistics.median(samples[(task.key, rec.id)])
    compared = [c for c in by_task.values() if len(c.in_model) >= 2]
    # what compilations will use once the in-model times are stored: the picks where finalists were
    # compared, the only finalist elsewhere, and a direct twin where one ran faster alone
    records = {r.id: r for p in picks.values() for r in p}
    combined = {k: p[0] for k, p in picks.items() if p}
    combined.update({c.key: records[c.chosen] for c in compared if c.chosen is not None})
    twins = algorithm_twins(model, options, db, target)
    differ = any(c.chosen != c.default_id for c in compared if c.default_id is not None)
    whole: tuple[float, float] | None = None
    twin_secs: dict[tuple[str, int], float] = {}
    lost = False
    if stop():
        raise ConfirmStopped("stopped before timing the in-model picks whole")
    picked = (
        compile_model(model, options, _Fixed({**combined, **twins}, timed=True)) if differ or twins else None
    )
    direct, winograd = _switched(picked.manifest) if picked is not None else ((), ())
    switched = direct + winograd
    if picked is not None and (switched or differ):
        both = [_artifact(picked), artifacts[-1]]
        # with twins switched in, each kernel is timed too: the twins' in-model times are stored
        kernel_rounds, (picked_s, defaults_s) = _timed(both, copts, executor, stop, profile=bool(switched))
        whole = (picked_s, defaults_s)
        lost = picked_s >= defaults_s
        if switched and not lost:
            ran = {
                k["name"]: (k["workload_key"], twins.get(k["workload_key"]))
                for k in picked.manifest["kernels"]
            }
            twin_secs = {pair: statistics.median(t) for pair, t in _per_call(ran, kernel_rounds[0]).items()}
        if lost and switched and differ:
            # the algorithm switches may be what lost: the schedule picks alone get their own chance
            plain = compile_model(model, options, _Fixed(combined, timed=True))
            both = [_artifact(plain), artifacts[-1]]
            _, (picked_s, defaults_s) = _timed(both, copts, executor, stop, profile=False)
            whole = (picked_s, defaults_s)
            lost = picked_s >= defaults_s
            direct, winograd = (), ()  # no conv switches algorithm: the twins' times are not stored
        if lost:
            for c in compared:
                c.keep_default = c.default_id is not None
    for c in by_task.values():
        if c.in_model:
            db.set_model_secs(c.key, target.key, c.stored)
    for key in twins:  # a twin's earlier in-model time would switch its conv: only this run's stands
        db.set_model_secs(key, target.key, {rid: secs for (k, rid), secs in twin_secs.items() if k == key})
    return Confirmation(
        [c for c in by_task.values() if c.in_model],
        run_secs,
        time.monotonic() - start,
        whole,
        direct_convs=tuple(direct),
        winograd_convs=tuple(winograd),
        picks_lost=lost,
    )


def _artifact(compiled: CompiledModel) -> bytes:
    """A compiled model's artifact bytes, as the timing process loads them."""
    with tempfile.TemporaryDirectory(prefix="temper-confirm-") as tmp:
        path = Path(tmp) / "model.temper"
        compiled.save(path)
        return path.read_bytes()


def _switched(manifest: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The convs a compilation ran as their twin because tuning measured it faster: (those run
    direct, those run as Winograd)."""
    from compiler.graph.passes.conv_algorithm import MEASURED_FASTER, MEASURED_WINOGRAD

    algorithms = manifest.get("conv_algorithms", {})
    direct = algorithms.get("direct", {})
    winograd = algorithms.get("winograd", {})
    return (
        tuple(sorted(name for name, why in direct.items() if why == MEASURED_FASTER)),
        tuple(sorted(name for name, how in winograd.items() if how.endswith(MEASURED_WINOGRAD))),
    )


def _timed(
    artifacts: list[bytes],
    copts: ConfirmOptions,
    executor: Executor | None,
    stop: Callable[[], bool],
    profile: bool = True,
) -> tuple[list[list[dict[str, float]]], list[float]]:
    """time_variants in a child process of this one, or through `executor` (polling `stop`)."""
    if executor is None:
        return time_variants(artifacts, copts, stop, profile)
    future = executor.submit(time_variants, artifacts, copts, None, profile)
    while True:
        try:
            result: tuple[list[list[dict[str, float]]], list[float]] = future.result(timeout=0.2)
            return result
        except FuturesTimeout:
            if stop():
                future.cancel()
                raise ConfirmStopped("stopped while timing the model variants") from None
        except ConfirmError:
            raise
        except Exception as exc:
            raise ConfirmError(f"timing the model variants failed in the executor: {exc}") from exc


def time_variants(
    artifacts: list[bytes],
    copts: ConfirmOptions,
    should_stop: Callable[[], bool] | None = None,
    profile: bool = True,
) -> tuple[list[list[dict[str, float]]], list[float]]:
    """Per variant: per round, the median seconds of every kernel (by name; no rounds without
    `profile`); and each variant's median run() latency. Runs in a child process: a crash there is
    not the tuner's."""
    from tuner.measure import mp_context

    ctx = mp_context()
    conn, child_conn = ctx.Pipe()
    proc = ctx.Process(
        target=_timing_child,
        args=(child_conn, artifacts, copts.rounds, copts.repeat, os.getpid(), profile),
        daemon=True,
    )
    proc.start()
    child_conn.close()
    deadline = time.monotonic() + copts.timeout_s
    try:
        while True:
            if should_stop is not None and should_stop():
                raise ConfirmStopped("stopped while timing the model variants")
            if conn.poll(max(0.0, min(0.2, deadline - time.monotonic()))):
                break
            if time.monotonic() >= deadline:
                raise ConfirmError(f"timing the model variants took longer than {copts.timeout_s:g} s")
        try:
            tag, data = conn.recv()
        except (EOFError, OSError):
            raise ConfirmError("the process timing the model variants died") from None
        if tag != "ok":
            raise ConfirmError(f"timing the model variants failed: {data}")
        timings: tuple[list[list[dict[str, float]]], list[float]] = data
        return timings
    finally:
        conn.close()
        proc.join(1.0)
        if proc.is_alive():
            proc.kill()
            proc.join()


class ConfirmError(RuntimeError):
    """The in-model timing could not be done (the search's records stay as they were)."""


class ConfirmStopped(Exception):
    """The tuning run was asked to stop during the in-model timing (nothing was stored)."""


def _timing_child(
    conn: Connection, artifacts: list[bytes], rounds: int, repeat: int, root: int, profile: bool = True
) -> None:
    import numpy as np

    from compiler.runtime import load
    from tuner._measure_child import die_with_parent

    die_with_parent(root)
    # ordinary pages, as the tuner times candidates on (tuner._measure_child._Arena says why): numpy
    # would ask for huge pages for the modules' large buffers
    with contextlib.suppress(ImportError, AttributeError):
        from numpy._core.multiarray import _set_madvise_hugepage  # type: ignore[attr-defined]  # private, no stub

        _set_madvise_hugepage(False)
    try:
        modules = [load(a) for a in artifacts]
        rng = np.random.default_rng(0)
        feeds = {
            s.name: (
                rng.standard_normal(s.shape) if s.dtype.startswith("float") else np.zeros(s.shape)
            ).astype(s.dtype)
            for s in modules[0].inputs
        }
        for m in modules:
            m.run(feeds)
        kernels: list[list[dict[str, float]]] = [[] for _ in modules]
        runs: list[list[float]] = [[] for _ in modules]
        for _ in range(rounds):
            for v, m in enumerate(modules):
                if profile:
                    calls = m.profile(feeds, repeat=repeat)
                    kernels[v].append({entry["kernel"]: entry["median"] for entry in calls})
                t0 = time.perf_counter()
                for _ in range(repeat):
                    m.run(feeds)
                runs[v].append((time.perf_counter() - t0) / repeat)
        conn.send(("ok", (kernels, [statistics.median(r) for r in runs])))
    except Exception as exc:  # reported to the parent, which keeps the search's records as they are
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def summary(result: Confirmation) -> dict[str, Any]:
    """JSON-able summary (progress reports, job results); record ids as strings in the maps."""
    whole = result.whole_model_secs
    return {
        "seconds": result.seconds,
        "variant_secs": result.variant_secs,
        "whole_model": None if whole is None else {"picks": whole[0], "defaults": whole[1]},
        "kept": "defaults" if result.kept_defaults else "picks",
        "changed": [t.name for t in result.changed],
        "direct": list(result.direct_convs),
        "winograd": list(result.winograd_convs),
        "tasks": [
            {
                "name": t.name,
                "key": t.key,
                "chosen": t.chosen,
                "isolated_best": t.isolated_best,
                "default": t.default_id,
                "alone": {str(rid): secs for rid, secs in t.alone.items()},
                "in_model": {str(rid): secs for rid, secs in t.in_model.items()},
            }
            for t in result.tasks
        ],
    }
