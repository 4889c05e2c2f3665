"""Tuned schedules as the compiler's schedule source, and per-node overrides.

The compiler only knows the ScheduleSource protocol (workload key -> schedule); this module answers
it from the tuning database: the best record of exactly that workload on exactly that target, with
its provenance (record id, measured time, date) for the artifact manifest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


# an override's value: "record:ID" (a tuning record) or a trace's JSON (Trace.to_json())
OverrideValue = str | Mapping[str, Any]


def split_override(spec: str) -> tuple[str, OverrideValue]:
    """`NAME=record:ID` or `NAME=TRACE.json` (the file read here, by whoever runs the command: a
    server never reads a file a request names) -> (name, "record:ID" or the trace's JSON)."""
    name, sep, value = spec.partition("=")
    if not sep or not name or not value:
        raise CompilerError(f"override {spec!r} must look like NODE=record:ID or NODE=TRACE.json")
    if value.startswith("record:"):
        if not value.removeprefix("record:").isdigit():
            raise CompilerError(f"override {spec!r}: record id must be an integer")
        return name, value
    path = Path(value)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CompilerError(f"override {spec!r}: cannot read {path}: {e.strerror}") from None
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as e:
        raise CompilerError(f"override {spec!r}: {path} is not JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise CompilerError(f"override {spec!r}: {path} holds no schedule trace (a JSON object)")
    return name, data


def override_choice(
    name: str, value: OverrideValue, db: Database | None, *, file: str | None = None
) -> ScheduleChoice:
    """The schedule an override pins: a trusted tuning record of `db`, or a trace (its JSON, from
    `file` when it came from one). Every mistake is a CompilerError naming the override."""
    if isinstance(value, str):
        if not value.startswith("record:") or not value.removeprefix("record:").isdigit():
            raise CompilerError(
                f"override for node {name!r} must be 'record:ID' or a trace object, not {value!r}"
            )
        if db is None:
            raise CompilerError("an override by record id needs a database (--db)")
        rid = int(value.removeprefix("record:"))
        rec = db.get_record(rid)
        if rec is None:
            raise CompilerError(f"override {name}={value}: no tuning record {rid}")
        if not rec.trusted:
            raise CompilerError(
                f"override {name}={value}: record {rid} is {rec.verification} (an imported record is used "
                "once it has been verified on this machine: temper records verify)"
            )
        return _choice(rec, "override")
    try:
        trace = Trace.from_json(dict(value))
    except (CompilerError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CompilerError(
            f"override for node {name!r}: not a schedule trace ({type(e).__name__}: {e})"
        ) from None
    where = {"file": file} if file is not None else {"inline": True}
    return ScheduleChoice(trace, {"source": "override", **where})


def parse_override(spec: str, db: Database | None) -> tuple[str, ScheduleChoice]:
    """`NODE=record:ID` or `NODE=PATH.json` (a trace file) -> (node name, schedule to force)."""
    name, value = split_override(spec)
    file = None if isinstance(value, str) else Path(spec.partition("=")[2]).name
    return name, override_choice(name, value, db, file=file)
