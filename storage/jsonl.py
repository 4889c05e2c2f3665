"""Tuning records as JSON lines, so tuning logs travel between deployments.

The format (version 1): the first line is the header `{"format": "temper-records", "version": 1}`;
then one JSON object per line, either a workload

    {"kind": "workload", "key": ..., "description": {...}, "flops": N}

or a record (times are ISO 8601 with a timezone; `run_secs` is empty for most failures)

    {"kind": "record", "workload_key": ..., "target_key": ..., "trace": {...}, "run_secs": [...],
     "error_kind": null | "build_error" | ..., "error_message": "", "temper_version": "", "created": ...}

Every field is required and no other field is allowed, so a typo cannot pass silently. An export
lists the workloads first, then the records oldest first. An import checks every line before it
writes anything, names the first bad line, and stores the whole file in one transaction; records
already present (same workload, target, trace hash and created time) are skipped, so importing a
file twice changes nothing.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from sqlalchemy import insert, select

from compiler.errors import ScheduleError
from compiler.runtime.archive import create_temp
from compiler.tir.trace import Trace
from storage.errors import RecordFileError, StorageError
from storage.models import TuningRecordRow, WorkloadRow
from storage.records import (
    SqlDatabase,
    insert_workloads,
    record_from_row,
    record_values,
    records_query,
    workload_from_row,
    workloads_query,
)
from tuner.records import ErrorKind, TuningRecord, WorkloadEntry, trace_hash
from tuner.workloads import check_description

FORMAT = "temper-records"
VERSION = 1
HEADER: dict[str, Any] = {"format": FORMAT, "version": VERSION}

_WORKLOAD_FIELDS = frozenset({"kind", "key", "description", "flops"})
_RECORD_FIELDS = frozenset(
    {"kind", "workload_key", "target_key", "trace", "run_secs", "error_kind", "error_message",
     "temper_version", "created"}
)  # fmt: skip
_ERROR_KINDS = ", ".join(kind.value for kind in ErrorKind)


@dataclass(frozen=True)
class ExportSummary:
    workloads: int
    records: int


@dataclass(frozen=True)
class ImportSummary:
    workloads_added: int
    records_added: int
    records_skipped: int  # already in the database, or repeated in the file


@dataclass(frozen=True)
class ParsedFile:
    """A validated records file; `record_lines[i]` is the line `records[i]` came from."""

    workloads: tuple[WorkloadEntry, ...]
    records: tuple[TuningRecord, ...]
    record_lines: tuple[int, ...]


# --- export --------------------------------------------------------------------------------------


def workload_line(entry: WorkloadEntry) -> dict[str, Any]:
    return {
        "kind": "workload",
        "key": entry.key,
        "description": dict(entry.description),
        "flops": entry.flops,
    }


def record_line(record: TuningRecord) -> dict[str, Any]:
    return {
        "kind": "record",
        "workload_key": record.workload_key,
        "target_key": record.target_key,
        "trace": dict(record.trace),
        "run_secs": list(record.run_secs),
        "error_kind": None if record.error_kind is None else ErrorKind(record.error_kind).value,
        "error_message": record.error_message,
        "temper_version": record.temper_version,
        "created": record.created.astimezone(UTC).isoformat(),
    }


def export_lines(db: SqlDatabase, target_key: str | None = None) -> Iterator[str]:
    """The file's lines (with newlines): header, workloads, records, all from one snapshot."""
    yield _dumps(HEADER)
    with db.read_session(snapshot=True) as session:
        for workload in session.scalars(workloads_query(target_key)):
            yield _dumps(workload_line(workload_from_row(workload)))
        for row, key in session.execute(records_query(target_key)):
            yield _dumps(record_line(record_from_row(row, key)))


def export_records(
    db: SqlDatabase, destination: Path | TextIO, *, target_key: str | None = None
) -> ExportSummary:
    """Write the records (of one target, or all) and their workloads; a path is replaced atomically."""
    if not isinstance(destination, str | os.PathLike):
        return _write(export_lines(db, target_key), destination)
    path = Path(destination)
    try:
        # created like any file the user writes (0666 less the umask), then renamed into place
        fd, tmp = create_temp(str(path.parent), prefix=f".{path.name}.")
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            summary = _write(export_lines(db, target_key), out)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return summary


def _write(lines: Iterable[str], out: TextIO) -> ExportSummary:
    workloads = records = 0
    for line in lines:
        out.write(line)
        workloads += line.startswith('{"kind":"workload"')
        records += line.startswith('{"kind":"record"')
    return ExportSummary(workloads=workloads, records=records)


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n"


# --- import --------------------------------------------------------------------------------------


def import_records(db: SqlDatabase, source: Path | TextIO) -> ImportSummary:
    """Validate the whole file, then store its new workloads and records in one transaction."""
    if isinstance(source, str | os.PathLike):
        name = str(source)
        with open(source, "rb") as binary:
            parsed = parse_lines(_decoded(binary, name), name)
    else:
        name = str(getattr(source, "name", "<records>"))
        parsed = parse_lines(source, name)
    return store(db, parsed, name)


def store(db: SqlDatabase, parsed: ParsedFile, source: str = "<records>") -> ImportSummary:
    """Write a validated file in one transaction; nothing is stored if any record cannot be."""
    with db.write_session() as session:
        workloads_added = insert_workloads(session, parsed.workloads)
        keys = {record.workload_key for record in parsed.records}
        ids = dict(
            session.execute(select(WorkloadRow.key, WorkloadRow.id).where(WorkloadRow.key.in_(keys))).all()
        )
        for record, line in zip(parsed.records, parsed.record_lines, strict=True):
            if record.workload_key not in ids:
                raise RecordFileError(
                    source,
                    line,
                    f"record names workload {record.workload_key!r}, in neither the file nor the database",
                )
        seen = _stored_identities(session, list(ids.values()))
        rows: list[dict[str, Any]] = []
        for record in parsed.records:
            identity = (ids[record.workload_key], record.target_key, trace_hash(record.trace), record.created)
            if identity in seen:
                continue
            seen.add(identity)
            rows.append(record_values(record, ids[record.workload_key]))
        if rows:
            session.execute(insert(TuningRecordRow), rows)
    skipped = len(parsed.records) - len(rows)
    return ImportSummary(workloads_added=workloads_added, records_added=len(rows), records_skipped=skipped)


def _stored_identities(session: Any, workload_ids: list[int]) -> set[tuple[int, str, str, datetime]]:
    found: set[tuple[int, str, str, datetime]] = set()
    columns = (
        TuningRecordRow.workload_id,
        TuningRecordRow.target_key,
        TuningRecordRow.trace_hash,
        TuningRecordRow.created_at,
    )
    for start in range(0, len(workload_ids), 500):
        chunk = workload_ids[start : start + 500]
        found.update(tuple(row) for row in session.execute(select(*columns).where(columns[0].in_(chunk))))
    return found


def _decoded(binary: Iterable[bytes], source: str) -> Iterator[str]:
    for number, raw in enumerate(binary, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFileError(
                source, number, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None


def parse_lines(lines: Iterable[str], source: str = "<records>") -> ParsedFile:
    """Check every line of a records file; raises RecordFileError naming the first bad one."""
    workloads: dict[str, tuple[WorkloadEntry, int]] = {}
    records: list[TuningRecord] = []
    record_lines: list[int] = []
    header_seen = False
    for number, text in enumerate(lines, 1):
        if not header_seen:
            _check_header(text, source, number)
            header_seen = True
            continue
        if not text.strip():
            continue  # blank lines carry nothing
        obj = _load_object(text, source, number)
        kind = obj.get("kind")
        if kind == "workload":
            entry = _workload(obj, source, number)
            if entry.key in workloads and workloads[entry.key][0] != entry:
                first = workloads[entry.key][1]
                raise RecordFileError(source, number, f"workload {entry.key!r} differs from line {first}")
            workloads.setdefault(entry.key, (entry, number))
        elif kind == "record":
            records.append(_record(obj, source, number))
            record_lines.append(number)
        else:
            raise RecordFileError(source, number, f"unknown kind {kind!r} (expected 'workload' or 'record')")
    if not header_seen:
        raise RecordFileError(source, 1, f"empty file (expected the header {_dumps(HEADER).strip()})")
    return ParsedFile(
        workloads=tuple(entry for entry, _ in workloads.values()),
        records=tuple(records),
        record_lines=tuple(record_lines),
    )


def _check_header(text: str, source: str, number: int) -> None:
    expected = _dumps(HEADER).strip()
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordFileError(
            source, number, f"not a temper records file (the first line must be {expected})"
        )
    version = header.get("version")
    if version != VERSION or isinstance(version, bool):
        raise RecordFileError(
            source, number, f"unsupported records format version {version!r} (this temper reads {VERSION})"
        )


def _load_object(text: str, source: str, number: int) -> dict[str, Any]:
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise RecordFileError(source, number, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise RecordFileError(source, number, "JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise RecordFileError(source, number, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _fields(obj: dict[str, Any], allowed: frozenset[str], source: str, number: int) -> None:
    missing = sorted(allowed - obj.keys())
    if missing:
        raise RecordFileError(source, number, f"missing field {missing[0]!r}")
    extra = sorted(obj.keys() - allowed)
    if extra:
        raise RecordFileError(source, number, f"unknown field {extra[0]!r}")


def _workload(obj: dict[str, Any], source: str, number: int) -> WorkloadEntry:
    _fields(obj, _WORKLOAD_FIELDS, source, number)
    key, description, flops = obj["key"], obj["description"], obj["flops"]
    bad = _bad(source, number)
    if not _is_text(key) or not key or len(key) > 255:
        raise bad("'key' must be a non-empty string of at most 255 characters")
    if not isinstance(description, dict):
        raise bad("'description' must be a JSON object")
    if not _is_int(flops) or not 0 <= flops < 1 << 62:
        raise bad("'flops' must be a non-negative integer")
    problem = check_description(key, description)
    if problem:
        raise bad(f"workload {key!r}: {problem}")
    return WorkloadEntry(key=key, description=description, flops=flops)


def _record(obj: dict[str, Any], source: str, number: int) -> TuningRecord:
    _fields(obj, _RECORD_FIELDS, source, number)
    bad = _bad(source, number)
    for name in ("workload_key", "target_key"):
        if not _is_text(obj[name]) or not obj[name] or len(obj[name]) > 255:
            raise bad(f"{name!r} must be a non-empty string of at most 255 characters")
    if not isinstance(obj["trace"], dict):
        raise bad("'trace' must be a JSON object")
    try:
        Trace.from_json(obj["trace"])
    except ScheduleError as exc:
        raise bad(f"'trace' is not a schedule trace: {exc.message}") from None
    run_secs = obj["run_secs"]
    if not isinstance(run_secs, list) or not all(_is_seconds(s) for s in run_secs):
        raise bad("'run_secs' must be a list of non-negative finite numbers")
    error_kind = obj["error_kind"]
    if error_kind is not None and (not isinstance(error_kind, str) or error_kind not in set(ErrorKind)):
        raise bad(f"'error_kind' must be null or one of {_ERROR_KINDS}, not {error_kind!r}")
    for name in ("error_message", "temper_version"):
        if not _is_text(obj[name]):
            raise bad(f"{name!r} must be a string of UTF-8 text")
    created = _time(obj["created"])
    if created is None:
        raise bad("'created' must be an ISO 8601 time with a timezone")
    return TuningRecord(
        workload_key=obj["workload_key"],
        target_key=obj["target_key"],
        trace=obj["trace"],
        run_secs=tuple(float(s) for s in run_secs),
        error_kind=None if error_kind is None else ErrorKind(error_kind),
        error_message=obj["error_message"],
        temper_version=obj["temper_version"],
        created=created,
        verification="pending",  # data from elsewhere: used once a worker verified it here
    )


def _bad(source: str, number: int) -> Any:
    return lambda reason: RecordFileError(source, number, reason)


def _is_text(value: Any) -> bool:
    """A string that UTF-8 can hold (JSON admits lone surrogates, which no database stores) and
    without NUL (which PostgreSQL refuses in text)."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_seconds(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    )


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return None if parsed.tzinfo is None else parsed.astimezone(UTC)
