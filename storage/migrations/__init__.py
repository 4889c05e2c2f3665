"""Schema migrations (Alembic), run from code: no alembic.ini, the scripts live in this package.

Every schema change is a new script in versions/; `upgrade` brings any database (a new empty one
included) to the newest revision. It is safe to call from several processes at once: on SQLite the
migration runs inside one write transaction (BEGIN IMMEDIATE), on PostgreSQL under an advisory lock,
so the second process waits and then finds nothing to do. SQLite answers "database is locked" at
once, without its busy timeout, in a few lock races of a brand-new file (two processes switching it
to WAL together); `upgrade` retries those until the busy timeout has passed.
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import URL, Connection, Engine
from sqlalchemy.exc import OperationalError

from storage.session import BUSY_TIMEOUT_MS, make_engine, writer

MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at this package's scripts, optionally bound to an open connection."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision among the scripts shipped with this version of temper."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migration scripts found"
    return head


def current_revision(url_or_engine: str | URL | Engine) -> str | None:
    """The revision the database is at (None for a database never migrated)."""
    engine, owned = _engine(url_or_engine)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        if owned:
            engine.dispose()


def upgrade(url_or_engine: str | URL | Engine, revision: str = "head") -> str | None:
    """Run `alembic upgrade <revision>` on the database; returns the revision it is at afterwards."""
    engine, owned = _engine(url_or_engine)
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    try:
        while True:
            try:
                with writer(engine).connect() as connection:
                    command.upgrade(alembic_config(connection), revision)
                    connection.commit()
                return current_revision(engine)
            except OperationalError as exc:
                if not is_lock_race(exc) or time.monotonic() > deadline:
                    raise
                engine.dispose()  # a connection that lost the race may hold a stale view of the file
                time.sleep(random.uniform(0.01, 0.1))
    finally:
        if owned:
            engine.dispose()


def is_lock_race(exc: OperationalError) -> bool:
    """SQLite's immediate "database is locked"/"busy" answer (never raised by PostgreSQL)."""
    if not isinstance(exc.orig, sqlite3.OperationalError):
        return False
    message = str(exc.orig).lower()
    return "database is locked" in message or "database is busy" in message


def _engine(url_or_engine: str | URL | Engine) -> tuple[Engine, bool]:
    if isinstance(url_or_engine, Engine):
        return url_or_engine, False
    return make_engine(url_or_engine), True
