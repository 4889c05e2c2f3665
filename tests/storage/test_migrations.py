"""Alembic from an empty database to head, and the ORM and the migrations agreeing exactly."""

from __future__ import annotations

import sqlite3
import threading
import time

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.exc import OperationalError

from storage import current_revision, head_revision, make_engine, upgrade
from storage.base import Base
from storage.migrations import MIGRATIONS_DIR, is_lock_race
from storage.session import writer


def test_upgrade_from_empty_then_autogenerate_finds_nothing(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) is None
        assert upgrade(db_url) == head_revision()
        assert current_revision(engine) == head_revision()
        tables = set(inspect(engine).get_table_names())
        assert {"workloads", "tuning_records", "alembic_version"} <= tables
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_upgrade_twice_is_a_no_op(db_url: str) -> None:
    assert upgrade(db_url) == upgrade(db_url) == head_revision()


def test_indexes_have_convention_names(db_url: str) -> None:
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        indexes = {ix["name"]: ix for ix in inspect(engine).get_indexes("tuning_records")}
        assert indexes["ix_tuning_records_best"]["column_names"] == [
            "workload_id",
            "target_key",
            "median_secs",
        ]
        assert {"ix_tuning_records_target_key", "ix_tuning_records_trace_hash"} <= indexes.keys()
        (key_index,) = inspect(engine).get_indexes("workloads")
        assert key_index["name"] == "ix_workloads_key" and key_index["unique"]
        (fk,) = inspect(engine).get_foreign_keys("tuning_records")
        assert fk["name"] == "fk_tuning_records_workload_id_workloads"
    finally:
        engine.dispose()


def test_downgrade_to_base_and_back(sqlite_url: str) -> None:
    from alembic import command

    from storage.migrations import alembic_config
    from storage.session import writer

    upgrade(sqlite_url)
    engine = make_engine(sqlite_url)
    try:
        with writer(engine).connect() as connection:
            command.downgrade(alembic_config(connection), "base")
            connection.commit()
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
        assert current_revision(engine) is None
        assert upgrade(engine) == head_revision()
    finally:
        engine.dispose()


def test_migration_scripts_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert any(MIGRATIONS_DIR.glob("versions/0001_*.py"))


def test_upgrade_retries_a_lock_sqlite_answers_at_once(sqlite_url: str) -> None:
    """With no busy wait at all, a migration that meets another writer's lock retries until it is free."""
    holder = make_engine(sqlite_url)
    impatient = make_engine(sqlite_url, busy_timeout_ms=0)
    released = threading.Event()

    def hold_lock() -> None:
        with writer(holder).begin():  # BEGIN IMMEDIATE: SQLite's write lock
            time.sleep(0.5)
        released.set()

    thread = threading.Thread(target=hold_lock)
    thread.start()
    time.sleep(0.1)
    try:
        assert upgrade(impatient) == head_revision()
        assert released.is_set()
    finally:
        thread.join()
        holder.dispose()
        impatient.dispose()


def test_only_sqlite_lock_answers_are_retried() -> None:
    assert is_lock_race(OperationalError("BEGIN", {}, sqlite3.OperationalError("database is locked")))
    assert not is_lock_race(OperationalError("x", {}, sqlite3.OperationalError("no such table: t")))
    assert not is_lock_race(OperationalError("x", {}, RuntimeError("database is locked")))
