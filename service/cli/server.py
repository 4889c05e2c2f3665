"""`temper keys ... | worker | serve`: the service, its workers and its API keys (settings: TEMPER_*)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from compiler.version import __version__
from service.cli.common import (
    DbOpt,
    _cells,
    _db_url,
    _settings,
    app,
    err,
    fail,
    out,
    storage_errors,
    user_errors,
)

# --- workers and API keys (service settings: TEMPER_*) -------------------------------------------

keys_app = typer.Typer(help="Create, list and revoke API keys of the HTTP API.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create_command(
    tenant: Annotated[str, typer.Option("--tenant", metavar="NAME", help="The tenant (created if new).")],
    admin: Annotated[bool, typer.Option("--admin", help="The key may also import records.")] = False,
    db: DbOpt = None,
) -> None:
    """Create an API key for a tenant; the key is printed once, as the last word (only its hash is kept)."""
    with user_errors(), storage_errors():
        from storage import SqlDatabase
        from storage import repos as repo
        from storage.session import display_url

        url = _db_url(db)
        try:
            with SqlDatabase(url) as database, database.write_session() as session:
                key, info = repo.create_api_key(session, tenant_name=tenant, is_admin=admin)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--tenant'") from None
    # which database: a server started with another data directory or URL does not know the key
    err.print(
        f"stored in {display_url(url)}: a server finds this key when it uses the same database "
        "(the same TEMPER_DATA_DIR or TEMPER_DATABASE_URL, or --db)",
        markup=False,
        soft_wrap=True,
    )
    kind = "admin key" if info.is_admin else "key"
    typer.echo(f"created {kind} {info.id} for tenant {info.tenant_name!r} (shown only now): {key}")


@keys_app.command("list")
def keys_list_command(
    tenant: Annotated[
        str | None, typer.Option("--tenant", metavar="NAME", help="Only this tenant's.")
    ] = None,
    db: DbOpt = None,
) -> None:
    """List API keys (their prefixes: the keys themselves are not stored)."""
    with user_errors(), storage_errors():
        from storage import SqlDatabase
        from storage import repos as repo

        with SqlDatabase(_db_url(db)) as database, database.read_session() as session:
            keys = repo.list_api_keys(session, tenant)
    table = Table("id", "tenant", "prefix", "admin", "created", "revoked")
    for k in keys:
        revoked = k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "-"
        table.add_row(
            *_cells(
                str(k.id),
                k.tenant_name,
                k.prefix + "…",
                "yes" if k.is_admin else "no",
                k.created_at.isoformat(timespec="seconds"),
                revoked,
            )
        )
    out.print(table)


@keys_app.command("revoke")
def keys_revoke_command(
    key_id: Annotated[int, typer.Argument(metavar="ID", help="The key's id (see `temper keys list`).")],
    db: DbOpt = None,
) -> None:
    """Revoke an API key: requests with it are refused from now on."""
    with user_errors(), storage_errors():
        from storage import SqlDatabase
        from storage import repos as repo

        with SqlDatabase(_db_url(db)) as database, database.write_session() as session:
            info = repo.revoke_api_key(session, key_id=key_id)
    if info is None:
        raise fail(f"no API key {key_id}")
    typer.echo(f"revoked key {info.id} ({info.prefix}…) of tenant {info.tenant_name!r}")


@app.command("worker")
def worker_command(
    processes: Annotated[
        int,
        typer.Option("--processes", "-n", min=1, help="Worker processes to run (one job each at a time)."),
    ] = 1,
    once: Annotated[
        bool, typer.Option("--once", help="Exit when no job is left instead of waiting.")
    ] = False,
    worker_id: Annotated[
        str | None, typer.Option("--id", metavar="NAME", help="Worker name in the jobs table.")
    ] = None,
    db: DbOpt = None,
) -> None:
    """Run compile and tuning jobs from the database (settings from TEMPER_*), until Ctrl-C or SIGTERM.

    Any number of workers, on any machines sharing the database and the data directory, may run at
    once. A worker that is stopped hands its tuning job back; one that dies leaves it to be taken
    over when its lease expires, resuming from the records already committed.
    """
    settings = _settings(**({"database_url": db} if db else {}))
    with user_errors(), storage_errors():
        from service.worker import configure_logging, run_workers
        from storage import SqlDatabase
        from storage.session import display_url

        SqlDatabase(settings.database_url).close()  # migrate once, before the workers start
        configure_logging()
        err.print(
            f"temper {__version__}: {processes} worker process(es), database "
            f"{display_url(settings.database_url)}, data {settings.data_dir}"
            + (f", Dask at {settings.dask_scheduler}" if settings.dask_scheduler else ""),
            markup=False,
            soft_wrap=True,
        )
        code = run_workers(settings, processes, once=once, worker_id=worker_id)
    if code:
        raise typer.Exit(code)


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8000,
    log_level: Annotated[
        str, typer.Option("--log-level", metavar="LEVEL", help="critical|error|warning|info|debug")
    ] = "info",
) -> None:
    """Run the HTTP API (settings from TEMPER_*; a worker runs in-process unless
    TEMPER_EMBEDDED_WORKER=false)."""
    if log_level.lower() not in ("critical", "error", "warning", "info", "debug", "trace"):
        raise typer.BadParameter(f"{log_level!r} is not a log level", param_hint="'--log-level'")
    settings = _settings()
    with user_errors(), storage_errors():
        import uvicorn

        from service.app import create_app
        from storage import SqlDatabase
        from storage.session import display_url

        SqlDatabase(settings.database_url).close()  # migrate now: a bad database is one line, not a trace
        api = create_app(settings)
    worker = "an embedded worker" if settings.embedded_worker else "no embedded worker"
    err.print(
        f"temper {__version__} on http://{host}:{port}  "
        f"database {display_url(settings.database_url)}, {worker}",
        markup=False,
        soft_wrap=True,
    )
    uvicorn.run(api, host=host, port=port, log_level=log_level.lower(), timeout_graceful_shutdown=5)
