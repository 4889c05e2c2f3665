"""Verification of imported tuning records: data from elsewhere is checked here before it is used.

An imported record says "this trace, on this workload, ran this fast". None of that is taken on
trust: the record waits as `pending` until a worker of this deployment (or `temper records verify`)
rebuilds its workload from the stored description, replays the trace (the trace schema and the
legality checks apply), builds it, runs it on this machine against the reference kernel, and times
it. A record that passes becomes `verified` with this machine's timings (an imported timing could
be made up to win every comparison); one that fails becomes `rejected` with the reason, and neither
compiles nor the tuner ever use it. Records of another target cannot be run here and stay pending;
imported failure records are rejected without measuring (they carry nothing a compile could use).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.errors import ScheduleError
from compiler.target import Target
from compiler.tir.trace import Trace
from tuner.measure import Builder, MeasureInput, Runner, measure
from tuner.records import Database, TuningRecord
from tuner.workloads import rebuild_task


@dataclass(frozen=True)
class VerifySummary:
    verified: int = 0
    rejected: int = 0

    def __add__(self, other: VerifySummary) -> VerifySummary:
        return VerifySummary(self.verified + other.verified, self.rejected + other.rejected)


def verify_pending(
    db: Database,
    target: Target,
    builder: Builder,
    runner: Runner,
    *,
    limit: int = 16,
    should_stop: Callable[[], bool] | None = None,
) -> VerifySummary:
    """Verify up to `limit` pending records of `target` (one measured batch); returns the counts."""
    inputs: list[MeasureInput] = []
    waiting: list[TuningRecord] = []
    summary = VerifySummary()
    for record in db.pending(target.key, limit):
        if should_stop is not None and should_stop():
            break
        reason, inp = _prepare(db, record, target)
        if inp is None:
            assert record.id is not None
            db.set_rejected(record.id, reason)
            summary += VerifySummary(rejected=1)
            continue
        inputs.append(inp)
        waiting.append(record)
    if not inputs:
        return summary
    for record, (build, run) in zip(waiting, measure(builder, runner, inputs), strict=True):
        assert record.id is not None
        if run.ok:
            db.set_verified(record.id, run.run_secs)
            summary += VerifySummary(verified=1)
        else:
            kind = build.error_kind or run.error_kind
            message = build.error_message or run.error_message
            db.set_rejected(record.id, f"{kind.value if kind else 'error'}: {message}")
            summary += VerifySummary(rejected=1)
    return summary


def _prepare(db: Database, record: TuningRecord, target: Target) -> tuple[str, MeasureInput | None]:
    """What to measure for a record, or why it is rejected unmeasured."""
    if not record.ok:
        return "an imported failure record (measured elsewhere) is not used", None
    entry = db.workload(record.workload_key)
    task = None if entry is None else rebuild_task(entry.description, target)
    if task is None or task.key != record.workload_key:
        return f"workload {record.workload_key} cannot be rebuilt from its description here", None
    try:
        trace = Trace.from_json(dict(record.trace))
    except ScheduleError as exc:
        return f"invalid: {exc.message}", None
    return "", MeasureInput(task, trace)
