"""SqlDatabase as the tuner's record database, on a SQLite file and on the real PostgreSQL server."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from storage import DatabaseUnavailableError, SqlDatabase, StorageError, UnknownWorkloadError, make_engine
from tests.storage.helpers import key, record, without_id, workload
from tuner.records import Database, ErrorKind, trace_hash


def test_implements_the_tuner_protocol(db: SqlDatabase) -> None:
    database: Database = db  # checked statically; at run time every protocol method must exist
    methods = ("commit_workload", "commit_record", "best", "set_model_secs", "records", "measured_hashes")
    for name in (*methods, "iter_records", "get_record"):
        assert callable(getattr(database, name))


def test_records_round_trip(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    written = [
        record(n=1, minutes=0),
        record(n=2, run_secs=(), error_kind=ErrorKind.CRASH, error_message="signal 11 (SIGSEGV)", minutes=1),
        record(n=3, run_secs=(1.25e-05, 1.5e-05, 1.125e-05), minutes=2),
    ]
    ids = [db.commit_record(r) for r in written]
    assert len(set(ids)) == 3

    read = db.records(key("wl-conv"), "znver3-abc")
    assert without_id(read) == written
    assert [r.id for r in read] == ids
    for got, want in zip(read, written, strict=True):
        assert got.created == want.created and got.created.tzinfo is not None
        assert got.trace_hash == want.trace_hash
        assert db.get_record(got.id or 0) == got
    assert read[1].error_kind is ErrorKind.CRASH and not read[1].ok
    assert db.get_record(max(ids) + 100) is None


def test_reopening_sees_committed_records(db_url: str) -> None:
    with SqlDatabase(db_url) as first:
        first.commit_workload(workload())
        record_id = first.commit_record(record(n=7))
    with SqlDatabase(db_url) as second:
        found = second.get_record(record_id)
    assert found is not None and found.trace == record(n=7).trace


def test_best_is_the_fastest_success_of_exactly_that_target(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_workload(workload("wl-matmul"))
    db.commit_record(record(n=1, run_secs=(5e-3, 4e-3, 6e-3)))  # median 5 ms
    fastest = db.commit_record(record(n=2, run_secs=(3e-3, 9e-3, 2e-3)))  # median 3 ms
    # Faster, but not eligible: another target, another workload, failures (even with timings).
    db.commit_record(record(n=3, target_key="skylake-def", run_secs=(1e-6,)))
    db.commit_record(record("wl-matmul", n=4, run_secs=(1e-6,)))
    db.commit_record(record(n=5, run_secs=(), error_kind=ErrorKind.BUILD, error_message="llvm"))
    db.commit_record(record(n=6, run_secs=(1e-6, 1e-6), error_kind=ErrorKind.WRONG, error_message="diff"))

    best = db.best(key("wl-conv"), "znver3-abc")
    assert best is not None and best.id == fastest
    assert best.seconds == pytest.approx(3e-3)
    other = db.best(key("wl-conv"), "skylake-def")
    assert other is not None and other.target_key == "skylake-def"
    assert db.best(key("wl-conv"), "unknown-target") is None
    assert db.best("unknown-workload", "znver3-abc") is None


def test_best_prefers_the_fastest_in_the_model_once_records_were_timed_there(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_workload(workload("wl-matmul"))
    alone_fast = db.commit_record(record(n=1, run_secs=(1e-3,)))
    alone_slow = db.commit_record(record(n=2, run_secs=(2e-3,)))
    never_timed = db.commit_record(record(n=3, run_secs=(1.5e-3,)))
    other_target = db.commit_record(record(n=4, target_key="skylake-def", run_secs=(1e-3,)))
    matmul = db.commit_record(record("wl-matmul", n=5, run_secs=(1e-3,)))
    assert db.best(key("wl-conv"), "znver3-abc").id == alone_fast  # type: ignore[union-attr]

    db.set_model_secs(key("wl-conv"), "znver3-abc", {alone_fast: 4e-3, alone_slow: 3e-3})
    best = db.best(key("wl-conv"), "znver3-abc")
    assert best is not None and best.id == alone_slow and best.model_secs == pytest.approx(3e-3)
    assert db.get_record(never_timed).model_secs is None  # type: ignore[union-attr]
    # other pairs are untouched
    assert db.best(key("wl-conv"), "skylake-def").id == other_target  # type: ignore[union-attr]
    assert db.best(key("wl-matmul"), "znver3-abc").id == matmul  # type: ignore[union-attr]

    # a later confirmation replaces the pair's in-model times as a whole
    db.set_model_secs(key("wl-conv"), "znver3-abc", {never_timed: 5e-3, alone_fast: 6e-3})
    assert db.get_record(alone_slow).model_secs is None  # type: ignore[union-attr]
    assert db.best(key("wl-conv"), "znver3-abc").id == never_timed  # type: ignore[union-attr]


def test_model_secs_only_for_successful_records_of_the_pair(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    ok = db.commit_record(record(n=1, run_secs=(1e-3,)))
    failed = db.commit_record(record(n=2, run_secs=(), error_kind=ErrorKind.CRASH, error_message="segv"))
    elsewhere = db.commit_record(record(n=3, target_key="skylake-def"))
    db.set_model_secs(key("wl-conv"), "znver3-abc", {ok: 2e-3})
    for bad_id in (failed, elsewhere, ok + 1000):
        with pytest.raises(StorageError, match=f"no successful record {bad_id}"):
            db.set_model_secs(key("wl-conv"), "znver3-abc", {bad_id: 1e-3})
    assert db.get_record(ok).model_secs == pytest.approx(2e-3)  # type: ignore[union-attr]  # rolled back
    with pytest.raises(UnknownWorkloadError):
        db.set_model_secs("wl-unknown", "znver3-abc", {ok: 1e-3})
    with pytest.raises(ValueError, match="finite"):
        db.set_model_secs(key("wl-conv"), "znver3-abc", {ok: float("nan")})


def test_best_is_none_when_every_record_failed(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_record(record(n=1, run_secs=(), error_kind=ErrorKind.TIMEOUT, error_message="10 s"))
    db.commit_record(record(n=2, run_secs=(), error_kind=ErrorKind.INVALID))
    assert db.best(key("wl-conv"), "znver3-abc") is None
    assert len(db.records(key("wl-conv"), "znver3-abc")) == 2


def test_records_are_oldest_first_whatever_the_insertion_order(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    for minutes in (5, 1, 3):
        db.commit_record(record(n=minutes, minutes=minutes))
    assert [r.trace["decisions"]["n"] for r in db.records(key("wl-conv"), "znver3-abc")] == [1, 3, 5]


def test_measured_hashes_cover_failures_of_the_pair_only(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_record(record(n=1))
    db.commit_record(record(n=2, run_secs=(), error_kind=ErrorKind.RUNTIME))
    db.commit_record(record(n=1, minutes=1))  # the same trace measured again: one hash
    db.commit_record(record(n=3, target_key="skylake-def"))
    want = {trace_hash(record(n=1).trace), trace_hash(record(n=2).trace)}
    assert db.measured_hashes(key("wl-conv"), "znver3-abc") == want
    assert db.measured_hashes(key("wl-conv"), "nowhere") == set()


def test_iter_records_all_or_one_target(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_workload(workload("wl-matmul"))
    db.commit_record(record(n=1, minutes=2))
    db.commit_record(record("wl-matmul", "skylake-def", n=2, minutes=1))
    db.commit_record(record(n=3, target_key="skylake-def", minutes=3))
    assert [r.trace["decisions"]["n"] for r in db.iter_records()] == [2, 1, 3]
    assert [r.trace["decisions"]["n"] for r in db.iter_records("skylake-def")] == [2, 3]
    assert list(db.iter_records("nowhere")) == []


def test_commit_workload_is_idempotent_and_keeps_the_first(db: SqlDatabase) -> None:
    db.commit_workload(workload(flops=10))
    db.commit_workload(workload(flops=99))
    db.commit_workload(workload("wl-other"))
    kept = db.workload(key("wl-conv"))
    assert kept is not None and kept.flops == 10
    assert kept.description == workload().description
    assert [w.key for w in db.workloads()] == [key("wl-conv"), "wl-other"]
    assert db.workload("absent") is None


def test_workloads_of_one_target(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    db.commit_workload(workload("wl-matmul"))
    db.commit_record(record("wl-matmul", "skylake-def"))
    assert [w.key for w in db.workloads("skylake-def")] == [key("wl-matmul")]
    assert db.workloads("nowhere") == []


def test_flops_beyond_32_bits(db: SqlDatabase) -> None:
    db.commit_workload(workload(flops=3 * 2**40))
    kept = db.workload(key("wl-conv"))
    assert kept is not None and kept.flops == 3 * 2**40


def test_record_of_an_unknown_workload_is_refused(db: SqlDatabase) -> None:
    with pytest.raises(UnknownWorkloadError, match="'wl-missing'"):
        db.commit_record(record("wl-missing"))
    assert list(db.iter_records()) == []


def test_naive_created_time_is_refused(db: SqlDatabase) -> None:
    db.commit_workload(workload())
    naive = dataclasses.replace(record(), created=datetime(2026, 1, 1, 12, 0))
    with pytest.raises(Exception, match="naive datetime"):
        db.commit_record(naive)
    assert list(db.iter_records()) == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_non_finite_or_negative_seconds_are_refused(db: SqlDatabase, bad: float) -> None:
    db.commit_workload(workload())
    with pytest.raises(ValueError, match="run_secs must be finite non-negative seconds"):
        db.commit_record(record(run_secs=(1e-3, bad)))
    assert list(db.iter_records()) == []


def test_database_from_a_newer_temper_is_refused(db_url: str) -> None:
    SqlDatabase(db_url).close()
    engine = make_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    finally:
        engine.dispose()
    with pytest.raises(DatabaseUnavailableError, match="9999"):
        SqlDatabase(db_url)


def test_unreachable_postgresql_is_a_clear_error_without_the_password() -> None:
    with pytest.raises(DatabaseUnavailableError) as caught:
        SqlDatabase("postgresql+psycopg://postgres:secret@127.0.0.1:1/test?connect_timeout=3")
    message = str(caught.value)
    assert message.startswith("cannot open database postgresql+psycopg://postgres:***@127.0.0.1:1/test")
    assert "secret" not in message


@pytest.mark.parametrize("url", ["not a url", "nosuchdialect://x/y"])
def test_bad_url_is_a_clear_error(url: str) -> None:
    with pytest.raises(DatabaseUnavailableError, match="cannot open database"):
        SqlDatabase(url)


def test_sqlite_file_that_cannot_be_opened(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    with pytest.raises(DatabaseUnavailableError, match="unable to open database file"):
        SqlDatabase(f"sqlite:///{tmp_path / 'adir'}")
