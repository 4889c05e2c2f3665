"""Where the database is by default, and how SQLite connections are set up for several writers."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from storage.session import (
    BUSY_TIMEOUT_MS,
    default_data_dir,
    default_url,
    display_url,
    make_engine,
    sqlite_path,
)


def test_default_data_dir_explicit_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_data_dir() == tmp_path / ".temper"
    assert default_data_dir("") == tmp_path / ".temper"
    assert default_data_dir(tmp_path / "elsewhere") == tmp_path / "elsewhere"
    assert default_data_dir(str(tmp_path / "x")) == tmp_path / "x"


def test_default_url_is_the_sqlite_file_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_path(default_url()) == tmp_path / ".temper" / "temper.sqlite"
    assert sqlite_path(default_url("rel")) == tmp_path / "rel" / "temper.sqlite"  # made absolute


def test_sqlite_path_of_other_urls() -> None:
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("postgresql+psycopg://u@h/db") is None


def test_display_url_hides_the_password() -> None:
    assert (
        display_url("postgresql+psycopg://me:hunter2@db.local/x") == "postgresql+psycopg://me:***@db.local/x"
    )


def test_sqlite_engine_settings(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "t.sqlite"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as connection:
            pragma = {
                name: connection.execute(text(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
            }
        assert path.parent.is_dir()  # the data directory is created on demand
        assert pragma == {
            "journal_mode": "wal",
            "foreign_keys": 1,
            "busy_timeout": BUSY_TIMEOUT_MS,
            "synchronous": 2,
        }
    finally:
        engine.dispose()


def test_sqlite_enforces_foreign_keys(tmp_path: Path) -> None:
    from sqlalchemy.exc import IntegrityError

    from storage import upgrade

    url = f"sqlite:///{tmp_path / 't.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    try:
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO tuning_records (workload_id, target_key, trace, trace_hash, run_secs,"
                    " error_message, temper_version, created_at)"
                    " VALUES (42, 't', '{}', 'h', '[]', '', '', '2026-01-01 00:00:00')"
                )
            )
    finally:
        engine.dispose()
