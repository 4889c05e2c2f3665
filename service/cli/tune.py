"""`temper tune`: tune a model's kernels here or on a server; every measurement is recorded."""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli.common import (
    ApiKeyOpt,
    DbOpt,
    ModelArg,
    NoExternalOpt,
    OptLevelOpt,
    ServerOpt,
    ShapeOpt,
    TargetOpt,
    _db_url,
    _options,
    _refuse_local_options,
    _remote,
    app,
    out,
    parse_shapes,
    storage_errors,
    user_errors,
)


@app.command("tune")
def tune_command(
    model: ModelArg,
    shape: ShapeOpt = None,
    trials: Annotated[
        int,
        typer.Option(
            "--trials",
            min=1,
            help="Candidates to measure in this run, all tasks together (recorded ones not counted).",
        ),
    ] = 64,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0.0, metavar="MIN", help="Stop after this many minutes.")
    ] = None,
    db: DbOpt = None,
    target: TargetOpt = "host",
    opt_level: OptLevelOpt = 3,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Candidates measured per round.")] = 8,
    seed: Annotated[int, typer.Option("--seed", help="Search seed.")] = 0,
    server: ServerOpt = None,
    api_key: ApiKeyOpt = None,
    no_external_data: NoExternalOpt = False,
) -> None:
    """Tune a model's kernels for the target; every measurement is recorded in the database.

    --trials is how many candidates this run measures (as for a tuning job over HTTP): records
    already in the database are kept, used and never measured again, but not counted.
    """
    shapes = parse_shapes(shape)
    if server is not None:
        _refuse_local_options(db=db)
        with _remote(server, api_key) as (client, remote):
            job = remote.tune_remote(
                client,
                model,
                shapes=shapes,
                target=target,
                opt_level=opt_level,
                trials=trials,
                time_budget_s=None if timeout is None else timeout * 60,
                batch=batch,
                seed=seed,
                console=out,
            )
        final = remote.Progress.from_json(job.progress.model_dump() if job.progress else {})
        from service.progress import confirmation_lines, stop_line

        for line in [stop_line(final), *confirmation_lines(final.confirmation)]:
            if line is None:
                continue
            out.print(line, markup=False, soft_wrap=True)
        out.print(
            f"tuned {final.trials_done} candidate(s); estimated latency "
            f"{final.estimated_latency_s * 1e3:.3f} ms; records on {server}",
            markup=False,
            soft_wrap=True,
        )
        return
    with user_errors(), storage_errors():
        from rich.live import Live

        from service.progress import render
        from storage import SqlDatabase
        from tuner.tune import TuneOptions, tune

        options = _options(target, opt_level, shapes, None, no_external_data)
        topts = TuneOptions(
            trials=trials, timeout_s=None if timeout is None else timeout * 60, batch=batch, seed=seed
        )
        with SqlDatabase(_db_url(db)) as database, Live(console=out, auto_refresh=False) as live:
            final = tune(
                model, options, database, topts, on_progress=lambda p: live.update(render(p), refresh=True)
            )
    from service.progress import confirmation_lines, stop_line

    for line in [stop_line(final), *confirmation_lines(final.confirmation)]:
        if line is not None:
            out.print(line, markup=False, soft_wrap=True)
    kept = f" ({final.trials_base} recorded earlier, not measured again)" if final.trials_base else ""
    out.print(
        f"tuned {final.trials_done} candidate(s){kept}; estimated latency "
        f"{final.estimated_latency_s * 1e3:.3f} ms; records in {_db_url(db)}",
        markup=False,
        soft_wrap=True,
    )
