"""Databases for the storage tests: a SQLite file under tmp_path, and the real PostgreSQL server.

PostgreSQL tests each get their own schema (set as the connection's search_path through the URL),
dropped afterwards, so reruns and parallel runs never see each other's tables. They are skipped,
with the reason, only when no server answers at 127.0.0.1:5432 (database `test`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from storage import SqlDatabase

PG_HOST, PG_PORT, PG_DATABASE = "127.0.0.1", 5432, "test"
PG_USERS = ("postgres", "root")


def _pg_user() -> tuple[str | None, str]:
    """The first user the server lets in, or None and why not."""
    reason = ""
    for user in PG_USERS:
        try:
            with psycopg.connect(
                host=PG_HOST, port=PG_PORT, dbname=PG_DATABASE, user=user, connect_timeout=3
            ) as conn:
                conn.execute("SELECT 1")
            return user, ""
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None, reason


@pytest.fixture(scope="session")
def pg_user() -> str:
    user, reason = _pg_user()
    if user is None:
        pytest.skip(f"PostgreSQL at {PG_HOST}:{PG_PORT} (database {PG_DATABASE!r}) is unreachable: {reason}")
    return user


@pytest.fixture
def pg_url(pg_user: str) -> Iterator[str]:
    """A URL whose connections work in a fresh schema of their own (dropped after the test)."""
    schema = f"temper_test_{uuid.uuid4().hex[:12]}"
    conninfo = f"host={PG_HOST} port={PG_PORT} dbname={PG_DATABASE} user={pg_user}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield (
            f"postgresql+psycopg://{pg_user}@{PG_HOST}:{PG_PORT}/{PG_DATABASE}"
            f"?options=-csearch_path%3D{schema}"
        )
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'temper.sqlite'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest) -> str:
    """The same test on both backends."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


@pytest.fixture
def db(db_url: str) -> Iterator[SqlDatabase]:
    database = SqlDatabase(db_url)
    try:
        yield database
    finally:
        database.close()
