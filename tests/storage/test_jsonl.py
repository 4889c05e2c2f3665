"""Records export/import as versioned JSON lines: round trips, skipping duplicates, refusing bad files."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage import RecordFileError, SqlDatabase, export_records, import_records
from storage.jsonl import HEADER, parse_lines
from tests.storage.helpers import key, record, without_id, workload
from tuner.records import ErrorKind


def _fill(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_workload(workload("wl-matmul", flops=2**40))
    db.commit_workload(workload("wl-unused"))
    db.commit_record(record(n=1, minutes=1))
    db.commit_record(
        record(n=2, run_secs=(), error_kind=ErrorKind.TIMEOUT, error_message="hung\nafter 10 s", minutes=2)
    )
    db.commit_record(record("wl-matmul", n=3, run_secs=(0.1, 0.30000000000000004, 1e-300), minutes=3))
    db.commit_record(record("wl-matmul", "skylake-def", n=4, minutes=4))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_export_then_import_into_a_fresh_database(db: SqlDatabase, sqlite_url: str, tmp_path: Path) -> None:
    """Both ways between backends: from the parametrized one into a fresh SQLite file."""
    _fill(db)
    path = tmp_path / "records.jsonl"
    summary = export_records(db, path)
    assert (summary.workloads, summary.records) == (3, 4)
    lines = _lines(path)
    assert lines[0] == {"format": "temper-records", "version": 1}
    assert [line["kind"] for line in lines[1:]] == ["workload"] * 3 + ["record"] * 4

    fresh_url = sqlite_url.replace("temper.sqlite", "fresh.sqlite")
    with SqlDatabase(fresh_url) as fresh:
        result = import_records(fresh, path)
        assert (result.workloads_added, result.records_added, result.records_skipped) == (3, 4, 0)
        imported = list(fresh.iter_records())
        assert {r.verification for r in imported} == {"pending"}  # data from elsewhere, not yet verified
        assert without_id(imported, "-") == without_id(list(db.iter_records()), "-")
        assert fresh.workloads() == db.workloads()
        assert fresh.best(key("wl-conv"), "znver3-abc") is None  # unverified records steer nothing
        assert fresh.records(key("wl-conv"), "znver3-abc") == []
        pending = fresh.pending("znver3-abc", 10)
        first = next(r for r in pending if r.trace == record(n=1).trace)
        assert first.id is not None
        fresh.set_verified(first.id, (5e-3, 4e-3, 6e-3))
        best = fresh.best(key("wl-conv"), "znver3-abc")
        assert best is not None and best.trace == record(n=1).trace
        assert best.verification == "verified" and best.seconds == 5e-3  # this machine's timing


def test_import_into_the_parametrized_backend(db: SqlDatabase, sqlite_url: str, tmp_path: Path) -> None:
    with SqlDatabase(sqlite_url.replace("temper.sqlite", "source.sqlite")) as source:
        _fill(source)
        path = tmp_path / "records.jsonl"
        export_records(source, path)
        result = import_records(db, path)
        assert result.records_added == 4
        assert without_id(list(db.iter_records()), "-") == without_id(list(source.iter_records()), "-")


def test_importing_twice_skips_what_is_there(db: SqlDatabase, tmp_path: Path) -> None:
    _fill(db)
    path = tmp_path / "records.jsonl"
    export_records(db, path)
    again = import_records(db, path)
    assert (again.workloads_added, again.records_added, again.records_skipped) == (0, 0, 4)
    assert len(list(db.iter_records())) == 4


def test_same_trace_measured_at_another_time_is_a_new_record(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_record(record(n=1, minutes=0))
    text = io.StringIO()
    export_records(db, text)
    lines = text.getvalue().splitlines()
    moved = json.loads(lines[-1]) | {"created": "2027-01-01T00:00:00+00:00"}
    repeated = [*lines, lines[-1], json.dumps(moved)]  # an exact duplicate is skipped, a new time is not
    result = import_records(db, io.StringIO("\n".join(repeated) + "\n"))
    assert (result.records_added, result.records_skipped) == (1, 2)


def test_export_of_one_target(db: SqlDatabase, tmp_path: Path) -> None:
    _fill(db)
    path = tmp_path / "skylake.jsonl"
    summary = export_records(db, path, target_key="skylake-def")
    assert (summary.workloads, summary.records) == (1, 1)
    lines = _lines(path)
    assert [line.get("key") for line in lines if line.get("kind") == "workload"] == [key("wl-matmul")]
    assert {line["target_key"] for line in lines if line.get("kind") == "record"} == {"skylake-def"}


def test_export_of_an_empty_database_is_just_the_header(db: SqlDatabase, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    assert export_records(db, path).records == 0
    assert _lines(path) == [HEADER]
    assert import_records(db, path).records_added == 0


def test_export_replaces_the_file_whole(db: SqlDatabase, tmp_path: Path) -> None:
    _fill(db)
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "records.jsonl"
    path.write_text("old content that is longer than nothing\n" * 100)
    export_records(db, path)
    assert _lines(path)[0] == HEADER
    assert [p.name for p in path.parent.iterdir()] == ["records.jsonl"]  # no temporary file left behind


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_an_export_file_gets_the_mode_of_any_file_the_user_writes(
    db: SqlDatabase, tmp_path: Path, umask: int, mode: int
) -> None:
    import os
    import stat

    _fill(db)
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "records.jsonl"
    previous = os.umask(umask)
    try:
        export_records(db, path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.name for p in path.parent.iterdir()] == ["records.jsonl"]


# --- bad files: the first bad line is named and nothing is stored --------------------------------


def _good_lines(db: SqlDatabase) -> list[str]:
    _fill(db)
    text = io.StringIO()
    export_records(db, text)
    return text.getvalue().splitlines()


@pytest.fixture
def target(sqlite_url: str) -> Iterator[SqlDatabase]:
    """A database that already holds one record, which a failed import must leave alone."""
    with SqlDatabase(sqlite_url.replace("temper.sqlite", "target.sqlite")) as database:
        database.commit_workload(workload("wl-existing"))
        database.commit_record(record("wl-existing", n=99))
        yield database


def _refused(target: SqlDatabase, tmp_path: Path, lines: list[str], line: int, fragment: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordFileError) as caught:
        import_records(target, path)
    assert caught.value.line == line
    assert f"bad.jsonl, line {line}: " in str(caught.value)
    assert fragment in str(caught.value)
    assert [w.key for w in target.workloads()] == ["wl-existing"]
    assert [r.workload_key for r in target.iter_records()] == ["wl-existing"]


def test_bad_json_on_line_3(db: SqlDatabase, target: SqlDatabase, tmp_path: Path) -> None:
    lines = _good_lines(db)
    lines[2] = lines[2][:-5]
    _refused(target, tmp_path, lines, 3, "invalid JSON")


@pytest.mark.parametrize(
    ("header", "fragment"),
    [
        ('{"format": "something-else", "version": 1}', "not a temper records file"),
        ("not json at all", "not a temper records file"),
        ('{"format": "temper-records", "version": 2}', "unsupported records format version 2"),
        ('{"format": "temper-records"}', "unsupported records format version None"),
    ],
)
def test_wrong_header(
    db: SqlDatabase, target: SqlDatabase, tmp_path: Path, header: str, fragment: str
) -> None:
    lines = _good_lines(db)
    _refused(target, tmp_path, [header, *lines[1:]], 1, fragment)


def test_missing_header(db: SqlDatabase, target: SqlDatabase, tmp_path: Path) -> None:
    _refused(target, tmp_path, _good_lines(db)[1:], 1, "not a temper records file")


def test_missing_field_in_the_last_record(db: SqlDatabase, target: SqlDatabase, tmp_path: Path) -> None:
    lines = _good_lines(db)
    last = json.loads(lines[-1])
    del last["trace"]
    lines[-1] = json.dumps(last)
    _refused(target, tmp_path, lines, len(lines), "missing field 'trace'")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"run_secs": [0.1, -1.0]}, "'run_secs' must be a list of non-negative finite numbers"),
        ({"run_secs": "fast"}, "'run_secs' must be a list"),
        ({"run_secs": [True]}, "'run_secs' must be a list"),
        ({"error_kind": "exploded"}, "'error_kind' must be null or one of"),
        ({"created": "2026-03-01T12:00:00"}, "'created' must be an ISO 8601 time with a timezone"),
        ({"created": "yesterday"}, "'created' must be an ISO 8601 time"),
        ({"trace": [1, 2]}, "'trace' must be a JSON object"),
        ({"target_key": ""}, "'target_key' must be a non-empty string"),
        ({"temper_version": 1}, "'temper_version' must be a string"),
        ({"extra": 1}, "unknown field 'extra'"),
        ({"kind": "recrod"}, "unknown kind 'recrod'"),
        ({"workload_key": "wl-nowhere"}, "record names workload 'wl-nowhere', in neither the file nor"),
    ],
)
def test_bad_record_fields(
    db: SqlDatabase, target: SqlDatabase, tmp_path: Path, change: dict[str, Any], fragment: str
) -> None:
    lines = _good_lines(db)
    number = 6  # the second record
    lines[number - 1] = json.dumps(json.loads(lines[number - 1]) | change)
    _refused(target, tmp_path, lines, number, fragment)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"flops": -1}, "'flops' must be a non-negative integer"),
        ({"flops": 1.5}, "'flops' must be a non-negative integer"),
        ({"key": ""}, "'key' must be a non-empty string"),
        ({"description": "conv"}, "'description' must be a JSON object"),
    ],
)
def test_bad_workload_fields(
    db: SqlDatabase, target: SqlDatabase, tmp_path: Path, change: dict[str, Any], fragment: str
) -> None:
    lines = _good_lines(db)
    lines[1] = json.dumps(json.loads(lines[1]) | change)
    _refused(target, tmp_path, lines, 2, fragment)


def test_conflicting_workload_lines(db: SqlDatabase, target: SqlDatabase, tmp_path: Path) -> None:
    lines = _good_lines(db)
    twin = json.dumps(json.loads(lines[1]) | {"flops": 7})
    _refused(target, tmp_path, [*lines[:4], twin, *lines[4:]], 5, "differs from line 2")


def test_not_an_object_nan_and_bad_bytes(db: SqlDatabase, target: SqlDatabase, tmp_path: Path) -> None:
    lines = _good_lines(db)
    with pytest.raises(RecordFileError, match="line 2: expected a JSON object, got list"):
        parse_lines([lines[0], "[1, 2]"])
    with pytest.raises(RecordFileError, match="line 2: invalid JSON: NaN is not a JSON number"):
        parse_lines([lines[0], lines[5].replace('"run_secs":[]', '"run_secs":[NaN]')])
    path = tmp_path / "bad.jsonl"
    path.write_bytes(("\n".join(lines[:3]) + "\n").encode() + b'{"kind": "\xff"}\n')
    with pytest.raises(RecordFileError, match="line 4: not UTF-8 text"):
        import_records(target, path)


def test_empty_file(target: SqlDatabase, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with pytest.raises(RecordFileError, match=r"empty\.jsonl, line 1: empty file"):
        import_records(target, path)


def test_blank_lines_are_ignored(db: SqlDatabase, target: SqlDatabase, tmp_path: Path) -> None:
    lines = _good_lines(db)
    path = tmp_path / "spaced.jsonl"
    path.write_text("\n\n".join(lines) + "\n\n")
    assert import_records(target, path).records_added == 4
