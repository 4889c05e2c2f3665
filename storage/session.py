"""Engines and sessions: where the database is and how connections to it behave.

SQLite (the embedded default, one file in the data directory) is set up for several processes
writing at once: WAL journal (readers never block the writer), a busy timeout (a writer waits for
the lock instead of failing), foreign keys on, and full sync (a committed record survives a killed
process and a power cut). Write transactions take SQLite's write lock when they begin (BEGIN
IMMEDIATE), so a read-then-write transaction waits its turn instead of failing with "database is
locked" when another process committed in between. PostgreSQL is used as is, by URL
(`postgresql+psycopg://user@host/db`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, sessionmaker

DATABASE_FILE = "temper.sqlite"
BUSY_TIMEOUT_MS = 30_000
_WRITE_OPTION = "temper_write"


def default_data_dir(explicit: str | Path | None = None) -> Path:
    """The data directory: the explicit one when given, else `./.temper` under the current directory.

    The one place that decides it; the service passes its setting (TEMPER_DATA_DIR) as `explicit`.
    """
    if explicit is not None and str(explicit) != "":
        return Path(explicit).expanduser()
    return Path.cwd() / ".temper"


def default_url(data_dir: str | Path | None = None) -> str:
    """The embedded database: the SQLite file `temper.sqlite` in the (default) data directory."""
    path = default_data_dir(data_dir) / DATABASE_FILE
    return URL.create("sqlite", database=str(path.absolute())).render_as_string()


def display_url(url: str | URL) -> str:
    """The URL with any password hidden, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as given: it holds no parsable password either
        return str(url)


def make_engine(url: str | URL, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, **kwargs: Any) -> Engine:
    """An engine for `url`; SQLite files get their directory created and the settings above."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, **kwargs)
    path = sqlite_path(parsed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, connect_args={"timeout": busy_timeout_ms / 1000}, **kwargs)
    _configure_sqlite(engine, busy_timeout_ms)
    return engine


def _configure_sqlite(engine: Engine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from the sqlite3 module: the "begin" hook below emits BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")  # first: the others may wait
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = FULL")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions are writes: BEGIN IMMEDIATE on SQLite."""
    if engine.get_execution_options().get(_WRITE_OPTION):
        return engine
    return engine.execution_options(**{_WRITE_OPTION: True})


def make_sessionmaker(engine: Engine, *, write: bool = False, **kwargs: Any) -> sessionmaker[Session]:
    """Sessions on `engine` (writes when `write`); loaded rows stay readable after commit."""
    options: Mapping[str, Any] = {"expire_on_commit": False, **kwargs}
    return sessionmaker(writer(engine) if write else engine, **options)


def sqlite_path(url: str | URL) -> Path | None:
    """The file of a SQLite URL (None for other databases and in-memory SQLite)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database).expanduser()
