"""The tuning loop: tasks -> rounds of (propose, build, run, record) until the budget is spent.

Resumable by construction: every measurement is committed to the database as it completes, the
search never re-measures a trace the database already holds for the task and target, and the
best-so-far state is rebuilt from the database when a run starts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler.errors import CompilerError, ScheduleError
from compiler.frontend.onnx import parse_model
from compiler.pipeline import CompileOptions, ModelInput, build_frontier
from compiler.runtime.module import missing_features
from compiler.target import Target, parse_target
from compiler.tir.trace import Trace, replay
from compiler.version import __version__
from tuner.cost_model import CostModel, XGBoostModel
from tuner.features import extract
from tuner.progress import Progress, TaskReport
from tuner.records import Database, TuningRecord, WorkloadEntry
from tuner.scheduler import TaskScheduler
from tuner.search import TaskState, propose
from tuner.space import default_trace
from tuner.task import Task, alternative_tasks, tasks_of
from tuner.workloads import describe, rebuild


@dataclass(frozen=True)
class TuneOptions:
    # candidates this run measures, over all tasks: what the database already holds for the model is
    # kept, never measured again, and not counted (so `trials` means the same on the CLI and over HTTP)
    trials: int = 64
    # count the budget from this many records of the model's tasks instead of from what the database
    # holds when the run starts: a job taken over by another worker counts its earlier attempts'
    # records (those committed after its last progress report too) as spent
    since: int | None = None
    timeout_s: float | None = None  # wall-clock budget
    batch: int = 8  # candidates per round
    epsilon: float = 0.2  # share of each batch picked at random (exploration)
    patience: int = 3  # rounds without improvement before a task counts as converged
    seed: int = 0
    # after the search, time every task's finalists inside the compiled model and keep the fastest
    # there (tuner.confirm); runs once the budget or timeout is spent, not when stopped
    confirm: bool = True


def _describe(task: Task) -> dict[str, Any]:
    return describe(task.name, task.group, task.workload.const_params, task.workload.anchor_op)


def _features_of(task: Task, trace: Trace) -> Any:
    sch = replay(task.workload.func, trace, task.workload.const_params)
    return extract(sch.func, task.flops, task.workload.info.anchor_block)


def warm_start(model: CostModel, db: Database, tasks: list[Task], target: Target, limit: int = 4000) -> int:
    """Train on the records the database already has for this target: those of the tasks at hand
    and those of other workloads (rebuilt from their descriptions), newest `limit` first."""
    workloads: dict[str, Any] = {t.key: t.workload for t in tasks}
    flops: dict[str, int] = {t.key: t.flops for t in tasks}
    feats, ys, groups = [], [], []
    records = list(db.iter_records(target.key, trusted=True))[-limit:]
    for rec in records:
        key = rec.workload_key
        if key not in workloads:
            entry = db.workload(key) if hasattr(db, "workload") else None
            workloads[key] = rebuild(entry.description, target) if entry is not None else None
            flops[key] = entry.flops if entry is not None else 0
        w = workloads[key]
        if w is None:
            continue
        try:
            sch = replay(w.func, Trace.from_json(dict(rec.trace)), w.const_params)
        except ScheduleError:
            continue
        feats.append(extract(sch.func, flops[key], w.info.anchor_block))
        ys.append(flops[key] / rec.seconds if rec.ok else 0.0)
        groups.append(key)
    if feats:
        model.update(feats, ys, groups)
    return len(feats)


def tune(
    model: ModelInput,
    options: CompileOptions,
    db: Database,
    topts: TuneOptions,
    builder: Any = None,
    runner: Any = None,
    on_progress: Callable[[Progress], None] | None = None,
    cost_model: CostModel | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Progress:
    """Tune every task of `model` for the target in `options`; returns the final progress."""
    from tuner.measure import LocalBuilder, LocalRunner, MeasureInput, measure

    target = parse_target(options.target)
    local = runner is None or isinstance(runner, LocalRunner)  # a Dask runner may time elsewhere
    missing = missing_features(target.to_json()) if local else []
    if missing:  # every candidate would die of SIGILL here
        raise CompilerError(
            f"cannot tune for target {target.cpu!r} on this machine: it lacks the CPU features "
            f"{', '.join(missing)} that code for it uses; tune on a machine that has them, or --target host"
        )
    # parsed once (the frontend's guard runs here) and imported and lowered once; the Winograd twins
    # and the in-model confirmation build from the same proto
    model = parse_model(model, options.limits, options.external_data)
    fr = build_frontier(model, options)
    tasks = tasks_of(fr)
    tasks += alternative_tasks(model, options, fr)  # Winograd convs' direct twins: measured, not assumed
    builder = builder or LocalBuilder(target=target)
    runner = runner or LocalRunner()
    cost_model = cost_model or XGBoostModel(seed=topts.seed)
    rng = random.Random(topts.seed)
    states = []
    for task in tasks:
        db.commit_workload(WorkloadEntry(task.key, _describe(task), task.flops))
        st = TaskState(task)
        for rec in db.records(task.key, target.key):  # resume: what is recorded is not measured again
            st.measured.add(rec.trace_hash)
            st.secs_by_hash[rec.trace_hash] = rec.seconds
            st.trials += 1
            if rec.ok and rec.seconds < st.best_secs:
                st.best_secs, st.best_record_id = rec.seconds, rec.id
            if rec.ok:
                st.elite.append((rec.seconds, dict(rec.trace.get("decisions", {}))))
        st.elite.sort(key=lambda e: e[0])
        states.append(st)
    warm_start(cost_model, db, tasks, target)
    sched = TaskScheduler(states, patience=topts.patience)
    start = time.monotonic()
    recorded = sum(st.trials for st in states)
    # recorded before this run (or before `since`): kept, never measured again, not counted
    base = recorded if topts.since is None else min(topts.since, recorded)
    done = recorded
    budget = base + topts.trials
    curve: list[tuple[int, float, float | None]] = []  # (trials, estimated latency, elapsed s)
    # each task's best time each time it improved; a best already recorded starts the curve at 0
    task_curves: dict[str, list[tuple[int, float]]] = {
        st.task.key: [(0, st.best_secs)] if st.best_secs < float("inf") else [] for st in states
    }
    exhausted: set[str] = set()  # tasks whose space has no untried candidate left
    stop_reason: str | None = None

    confirmation: dict[str, Any] | None = None
    phase = "search"

    def snapshot(finished: bool = False) -> Progress:
        reports = [
            TaskReport(
                s.task.name,
                s.task.key,
                s.task.weight,
                s.task.flops,
                s.trials,
                s.best_secs,
                s.default_secs,
                list(task_curves[s.task.key]),
            )
            for s in states
        ]
        untuned = sum(s.task.weight * s.default_secs for s in states if s.task.alternative_of is None)
        return Progress(
            done - base,
            topts.trials,
            time.monotonic() - start,
            sched.estimated_latency(),
            reports,
            list(curve),
            finished,
            phase,
            confirmation,
            base,
            stop_reason,
            default_latency_s=untuned,
        )

    def out_of_budget() -> bool:
        nonlocal stop_reason
        if should_stop and should_stop():
            stop_reason = "cancelled"
        elif done >= budget:
            stop_reason = f"budget: {done - base} trial(s) measured"
        elif topts.timeout_s is not None and time.monotonic() - start >= topts.timeout_s:
            stop_reason = f"time budget: {topts.timeout_s:g} s spent"
        return stop_reason is not None

    def run_batch(state: TaskState, traces: list[Trace]) -> None:
        nonlocal done
        inputs = [MeasureInput(state.task, t) for t in traces]
        results = measure(builder, runner, inputs)
        feats, ys = [], []
        for trace, (build, run) in zip(traces, results, strict=True):
            error = build.error_kind or run.error_kind
            message = build.error_message if build.error_kind else run.error_message
            rec = TuningRecord(
                state.task.key,
                target.key,
                trace.to_json(),
                tuple(run.run_secs) if error is None else (),
                error,
                message,
                __version__,
            )
            rid = db.commit_record(rec)
            secs = rec.seconds
            if state.add(secs, trace, rid):
                task_curves[state.task.key].append((done + 1 - base, secs))
            done += 1
            try:
                feats.append(_features_of(state.task, trace))
                ys.append(state.task.flops / secs if secs < float("inf") else 0.0)
            except ScheduleError:
                pass
        if feats:
            cost_model.update(feats, ys, [state.task.key] * len(feats))

    # the default schedule of every task is always measured: tuned is never slower than untuned
    for st in states:
        if out_of_budget():
            break
        d = default_trace(st.task.workload)
        before = st.best_secs
        if _hash(d) not in st.measured:
            run_batch(st, [d])
            sched.record_round(st, before)
        st.default_secs = st.secs_by_hash.get(_hash(d), float("inf"))
    curve.append((done - base, sched.estimated_latency(), time.monotonic() - start))
    if on_progress:
        on_progress(snapshot())
    while not out_of_budget():
        picked = sched.next()
        if picked is None:
            stop_reason = _converged(states, exhausted, topts.patience)
            break
        n = min(topts.batch, budget - done)
        cands = propose(picked, cost_model, n, rng, topts.epsilon)
        if not cands:
            picked.rounds_without_gain = topts.patience  # space exhausted
            exhausted.add(picked.task.key)
            continue
        before = picked.best_secs
        run_batch(picked, [c.trace for c in cands])
        sched.record_round(picked, before)
        curve.append((done - base, sched.estimated_latency(), time.monotonic() - start))
        if on_progress:
            on_progress(snapshot())
    if topts.confirm and not (should_stop and should_stop()):
        phase = "confirm"
        if on_progress:
            on_progress(snapshot())
        in_model = [t for t in tasks if t.alternative_of is None]  # only these run in the model
        confirmation = _confirm(
            model, options, db, in_model, target, getattr(runner, "executor", None), should_stop
        )
    final = snapshot(finished=True)
    if on_progress:
        on_progress(final)
    return final


def _converged(states: list[TaskState], exhausted: set[str], patience: int) -> str:
    """Why the scheduler has no task left to tune."""
    if all(s.task.key in exhausted for s in states):
        return "space exhausted: every task's candidates have all been measured"
    spent = sum(s.task.key in exhausted for s in states)
    detail = f" ({spent} of them had no untried candidate left)" if spent else ""
    return f"converged: every task went {patience} rounds without improving{detail}"


def _confirm(
    model: ModelInput,
    options: CompileOptions,
    db: Database,
    tasks: list[Task],
    target: Target,
    executor: Any,
    should_stop: Callable[[], bool] | None,
) -> Any:
    """The in-model confirmation's summary; its failure is reported, never raised (the records of the
    search stand as they are), and a stop request ends it with nothing stored (None)."""
    from compiler.errors import CompilerError
    from tuner.confirm import ConfirmError, ConfirmStopped, confirm, summary

    try:
        result = confirm(model, options, db, tasks, target, executor=executor, should_stop=should_stop)
    except ConfirmStopped:
        return None
    except (ConfirmError, CompilerError) as exc:
        return {"error": str(exc)}
    return None if result is None else summary(result)


def _hash(trace: Trace) -> str:
    from tuner.records import trace_hash

    return trace_hash(trace.to_json())
