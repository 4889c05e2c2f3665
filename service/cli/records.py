"""`temper records ...` and `temper db ...`: tuning records and the database that keeps them
(storage/ is imported only by these commands)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from service.cli.common import (
    DbOpt,
    OptLevelOpt,
    ShapeOpt,
    TargetOpt,
    _cells,
    _db_url,
    _options,
    app,
    fail,
    out,
    parse_shapes,
    storage_errors,
    user_errors,
)

# --- records and database (storage/ is imported only by these commands) -------------------------

records_app = typer.Typer(help="Export, import and verify tuning records (JSON lines).", no_args_is_help=True)
db_app = typer.Typer(help="Manage the database that keeps tuning records.", no_args_is_help=True)
app.add_typer(records_app, name="records")
app.add_typer(db_app, name="db")


@records_app.command("export")
def records_export_command(
    file: Annotated[Path, typer.Argument(dir_okay=False, help="The JSON-lines file to write.")],
    db: DbOpt = None,
    target: RecordsTargetOpt = None,
) -> None:
    """Write tuning records (and their workloads) to a JSON-lines file."""
    with user_errors(), storage_errors():
        from storage import SqlDatabase, export_records
        from storage.session import display_url, sqlite_path

        url = _db_url(db)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            raise fail(f"no database at {path} (nothing to export; pass --db URL)")
        with SqlDatabase(url) as database:
            key = _records_target(database, target)
            summary = export_records(database, file, target_key=key)
    out.print(
        f"exported {summary.records} record(s) of {summary.workloads} workload(s) "
        f"from {display_url(url)} to {file}",
        markup=False,
        soft_wrap=True,
    )


RecordsTargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        metavar="NAME|KEY",
        help="Only this target's records: 'host', an LLVM CPU name or a target key (temper records targets).",
    ),
]


def _records_target(database: Any, target: str | None) -> str | None:
    """The key --target names (None: every target); a target with no records in the database is an
    error listing those that have some, not an empty answer."""
    if target is None:
        return None
    from compiler.target import target_key

    key = target_key(target)
    counts = database.target_counts()
    if key not in counts:
        have = ", ".join(sorted(counts)) or "none"
        raise fail(f"no records of target {key} ({target}) in this database; targets with records: {have}")
    return str(key)


@records_app.command("list")
def records_list_command(
    db: DbOpt = None,
    target: RecordsTargetOpt = None,
    model: Annotated[
        Path | None,
        typer.Option(
            "--model", exists=True, dir_okay=False, help="Only the records of this ONNX model's kernels."
        ),
    ] = None,
    shape: ShapeOpt = None,
    opt_level: OptLevelOpt = 3,
    best: Annotated[
        bool, typer.Option("--best", help="Only the record compiles use per kernel and target.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many records.")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Tuning records with their ids (for --override NODE=record:ID), kernel, op, measured and
    in-model times, state and date, fastest first per kernel."""
    shapes = parse_shapes(shape)
    with user_errors(), storage_errors():
        from storage import SqlDatabase
        from storage.session import display_url, sqlite_path

        url = _db_url(db)
        path = sqlite_path(url)
        if path is not None and not path.exists():
            raise fail(f"no database at {path} (pass --db URL)")
        keys = None
        if model is not None:
            from tuner.task import alternative_tasks, extract_tasks

            options = _options(target or "host", opt_level, shapes, None, False)
            keys = [t.key for t in (*extract_tasks(model, options), *alternative_tasks(model, options))]
        with SqlDatabase(url) as database:
            key = _records_target(database, target)
            rows = database.listing(key, keys, best=best)
    if as_json:
        typer.echo(json.dumps({"records": [r.to_json() for r in rows[:limit]], "total": len(rows)}, indent=1))
        return
    shown = f", first {limit}" if len(rows) > limit else ""
    table = Table(title=f"{len(rows)} record(s) in {display_url(url)}{shown}", title_justify="left")
    for column in ("id", "kernel", "op", "target", "alone", "in model", "state", "created"):
        table.add_column(column, overflow="fold")  # ids and keys are for copying: never cut short
    for r in rows[:limit]:
        alone = f"{r.seconds * 1e3:.4f} ms" if r.seconds is not None else (r.error_kind or "failed")
        in_model = f"{r.model_secs * 1e3:.4f} ms" if r.model_secs is not None else "-"
        table.add_row(
            *_cells(
                str(r.id), r.name or r.workload_key, r.anchor or "-", r.target_key, alone, in_model,
                r.verification, r.created.strftime("%Y-%m-%d"),
            )
        )  # fmt: skip
    out.print(table)


@records_app.command("targets")
def records_targets_command(db: DbOpt = None) -> None:
    """The targets with records in the database: each key with its CPU and what its digest stands for."""
    with user_errors(), storage_errors():
        from compiler.target import describe_key
        from storage import SqlDatabase

        with SqlDatabase(_db_url(db)) as database:
            counts = database.target_counts()
        table = Table(
            "target key", "records", "what it is", title=f"{len(counts)} target(s)", title_justify="left"
        )
        for key, n in sorted(counts.items()):
            table.add_row(*_cells(key, str(n), describe_key(key)))
    out.print(table)


@records_app.command("import")
def records_import_command(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The JSON-lines file to read.")],
    db: DbOpt = None,
) -> None:
    """Read tuning records from a JSON-lines file: all of them or, on any bad line, none."""
    with user_errors(), storage_errors():
        from storage import SqlDatabase, import_records
        from storage.session import display_url

        url = _db_url(db)
        with SqlDatabase(url) as database:
            summary = import_records(database, file)
    out.print(
        f"imported {summary.records_added} record(s) and {summary.workloads_added} new workload(s) "
        f"from {file} into {display_url(url)}; {summary.records_skipped} record(s) were already there",
        markup=False,
        soft_wrap=True,
    )
    if summary.records_added:
        out.print(
            "imported records are used once verified on this machine: `temper records verify`, "
            "or any worker of this database does it between jobs",
            markup=False,
            soft_wrap=True,
        )


@records_app.command("verify")
def records_verify_command(
    db: DbOpt = None,
    target: TargetOpt = "host",
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Verify at most this many records.")
    ] = 1_000_000,
) -> None:
    """Verify imported records of TARGET here: replay, build, run against the reference, time.
    Records that pass are used for compiles from then on; the others are rejected with the reason."""
    with user_errors(), storage_errors():
        from compiler.target import parse_target
        from storage import SqlDatabase
        from tuner.measure import LocalBuilder, LocalRunner
        from tuner.verify import VerifySummary, verify_pending

        tgt = parse_target(target)
        total = VerifySummary()
        with SqlDatabase(_db_url(db)) as database:
            builder = LocalBuilder(tgt)
            try:
                while total.verified + total.rejected < limit:
                    batch = min(16, limit - total.verified - total.rejected)
                    done = verify_pending(database, tgt, builder, LocalRunner(), limit=batch)
                    if done.verified + done.rejected == 0:
                        break
                    total += done
            finally:
                builder.close()
            left = database.count_pending(tgt.key)
    out.print(
        f"verified {total.verified} record(s), rejected {total.rejected}; {left} still pending for {tgt.key}",
        markup=False,
        soft_wrap=True,
    )


@db_app.command("upgrade")
def db_upgrade_command(db: DbOpt = None) -> None:
    """Create the database or migrate it to this version's schema."""
    with user_errors(), storage_errors():
        from storage import SqlDatabase, current_revision
        from storage.session import display_url

        url = _db_url(db)
        with SqlDatabase(url) as database:
            revision = current_revision(database.engine)
    out.print(f"database {display_url(url)} is at revision {revision}", markup=False, soft_wrap=True)
