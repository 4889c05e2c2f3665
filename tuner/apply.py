"""Tuned schedules as the compiler's schedule source, and per-node overrides.

The compiler only knows the ScheduleSource protocol (workload key -> schedule); this module answers
it from the tuning database: the best record of exactly that workload on exactly that target, with
its provenance (record id, measured time, date) for the artifact manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

from compiler.errors import CompilerError, ScheduleError
from compiler.kernels import ScheduleChoice
from compiler.tir.trace import Trace
from tuner.records import Database, TuningRecord


def _choice(rec: TuningRecord, source: str) -> ScheduleChoice:
    return ScheduleChoice(
        Trace.from_json(dict(rec.trace)),
        {
            "source": source,
            "record_id": rec.id,
            "measured_s": rec.seconds,
            **({} if rec.model_secs is None else {"model_s": rec.model_secs}),
            "date": rec.created.isoformat(timespec="seconds"),
            "temper_version": rec.temper_version,
        },
        rec.seconds,  # timed alone, as every candidate is: comparable across workloads
    )


class DatabaseSource:
    """Best tuned record per (workload, target) from a Database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def lookup(self, workload_key: str, target_key: str) -> ScheduleChoice | None:
        rec = self.db.best(workload_key, target_key)
        if rec is None:
            return None
        try:
            return _choice(rec, "record")
        except ScheduleError:  # stored before traces were checked on the way in: not a schedule
            return None


def parse_override(spec: str, db: Database | None) -> tuple[str, ScheduleChoice]:
    """`NODE=record:ID` or `NODE=PATH.json` (a trace file) -> (node name, schedule to force)."""
    node, sep, value = spec.partition("=")
    if not sep or not node or not value:
        raise CompilerError(f"override {spec!r} must look like NODE=record:ID or NODE=TRACE.json")
    if value.startswith("record:"):
        if db is None:
            raise CompilerError("an override by record id needs a database (--db)")
        try:
            rid = int(value.removeprefix("record:"))
        except ValueError:
            raise CompilerError(f"override {spec!r}: record id must be an integer") from None
        rec = db.get_record(rid)
        if rec is None:
            raise CompilerError(f"override {spec!r}: no tuning record {rid}")
        if not rec.trusted:
            raise CompilerError(
                f"override {spec!r}: record {rid} is {rec.verification} (an imported record is used once "
                "it has been verified on this machine: temper records verify)"
            )
        return node, _choice(rec, "override")
    path = Path(value)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CompilerError(f"override {spec!r}: cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise CompilerError(f"override {spec!r}: {path} is not JSON: {e}") from None
    try:
        trace = Trace.from_json(data)
    except ScheduleError as e:
        raise CompilerError(f"override {spec!r}: {e}") from None
    return node, ScheduleChoice(trace, {"source": "override", "file": path.name})
