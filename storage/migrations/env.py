"""Alembic's entry script: runs the migrations online, on the connection `upgrade` hands over.

Online only (no SQL-script mode). The whole upgrade is one transaction; on PostgreSQL it first
takes an advisory lock so concurrent upgrades run one after the other.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from storage.base import Base
from storage.session import make_engine, writer

# Any constant shared by every temper process: "temper" in ASCII, as a bigint.
_PG_LOCK_ID = 0x74656D706572


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        transactional_ddl=True,  # SQLite too: the engine emits BEGIN itself, so DDL is transactional
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})
        context.run_migrations()


def _run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: call storage.migrations.upgrade(url) or set sqlalchemy.url")
    engine = make_engine(url)
    try:
        with writer(engine).connect() as own:
            _run(own)
            own.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("temper's migrations run online only (no --sql mode)")
_run_online()
