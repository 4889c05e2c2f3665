"""What every repository module shares: the clock, new ids, the write-session check and the
dialect's INSERT, kept here once so the resource modules cannot drift apart."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from storage.base import Base
from storage.errors import StorageError
from storage.session import _WRITE_OPTION


class NotWriteSessionError(StorageError):
    """A write function was given a read session (use SqlDatabase.write_session())."""


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


def _require_write(s: Session) -> None:
    bind = s.get_bind()
    if bind.dialect.name == "sqlite" and not bind.get_execution_options().get(_WRITE_OPTION):
        raise NotWriteSessionError(
            "this write needs a write session (SqlDatabase.write_session()): on SQLite a read "
            "transaction that starts writing can fail when another process wrote meanwhile"
        )


def _insert(s: Session, table: type[Base]) -> Any:
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise StorageError(f"unsupported database {dialect!r} (temper uses SQLite or PostgreSQL)")
