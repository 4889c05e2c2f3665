"""temper's command line: compile, run and inspect models on this machine; move tuning records.

User mistakes (bad model, bad artifact, bad inputs, bad flags) print one red `error:` line and
exit with code 2, never a traceback. The compiler is imported inside the commands that need it,
so `temper run` starts with numpy and the runtime alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from compiler import errors as compiler_errors
from compiler.runtime import ArtifactError, InputError, KernelError, Module, TensorSpec, load
from compiler.version import __version__

app = typer.Typer(
    name="temper",
    help="temper: an auto-tuning compiler for deep-learning models (ONNX in, native code out).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

# Failures that are the user's to fix: reported as one line, exit code 2.
USER_ERRORS: tuple[type[Exception], ...] = (
    compiler_errors.CompilerError,
    compiler_errors.ArtifactError,
    compiler_errors.InputError,
    ArtifactError,
    InputError,
    OSError,
)
STAGE_HELP = "graph|optimized|fused|tir|scheduled|llvm|asm"
_DIMS = re.compile(r"[1-9][0-9]*(,[1-9][0-9]*)*")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: message` in red on stderr; return the Exit to raise."""
    err.print(f"error: {message}", style="red", markup=False, soft_wrap=True)
    return typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the typed errors of the compiler and runtime into one-line messages."""
    try:
        yield
    except USER_ERRORS as exc:
        raise fail(str(exc)) from None
    except KernelError as exc:
        raise fail(str(exc), code=1) from None


def _cells(*values: str) -> list[Text]:
    """Table cells as plain text: model and kernel names may contain [brackets] rich would eat."""
    return [Text(value) for value in values]


def parse_shapes(values: list[str] | None) -> dict[str, tuple[int, ...]]:
    """`NAME=D1,D2,...` flags -> {name: shape}; strict: positive integer dims, each name once."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values or []:
        name, sep, dims = value.partition("=")
        if not sep or not name or not _DIMS.fullmatch(dims):
            raise typer.BadParameter(
                f"{value!r} is not NAME=D1,D2,... with positive integer dims (e.g. input=1,3,224,224)",
                param_hint="'--shape'",
            )
        if name in shapes:
            raise typer.BadParameter(f"input {name!r} is given twice", param_hint="'--shape'")
        shapes[name] = tuple(int(d) for d in dims.split(","))
    return shapes


def _options(
    target: str,
    opt_level: int,
    shapes: dict[str, tuple[int, ...]],
    dump_ir: Path | None,
    no_external_data: bool = False,
    disable_pass: list[str] | None = None,
) -> Any:
    from compiler.pipeline import CompileOptions

    return CompileOptions(
        target=target,
        opt_level=opt_level,
        shapes=shapes,
        dump_ir=str(dump_ir) if dump_ir else None,
        external_data=not no_external_data,
        disabled_passes=frozenset(disable_pass or ()),
    )


def _version(value: bool) -> None:
    if value:
        typer.echo(f"temper {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """temper: an auto-tuning compiler for deep-learning models (ONNX in, native code out)."""


ModelArg = Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The ONNX model file.")]
TargetOpt = Annotated[str, typer.Option("--target", help="LLVM target: 'host' or an LLVM CPU name.")]
OptLevelOpt = Annotated[int, typer.Option("--opt-level", min=0, help="Graph optimisation level.")]
DisablePassOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--disable-pass",
        metavar="PASS",
        help="Skip this graph pass (repeatable; e.g. alter_layout). The manifest lists the passes that ran.",
    ),
]
ShapeOpt = Annotated[
    list[str] | None,
    typer.Option("--shape", metavar="NAME=D1,D2,...", help="Bind an input's shape (repeatable)."),
]
NoExternalOpt = Annotated[
    bool,
    typer.Option(
        "--no-external-data",
        help="Refuse weights kept in external data files (by default they are read from the model "
        "file's own directory, never from outside it).",
    ),
]


DbOpt = Annotated[
    str | None,
    typer.Option("--db", metavar="URL", help="Database URL (default: temper.sqlite in the data directory)."),
]
NoTunedOpt = Annotated[
    bool, typer.Option("--no-tuned", help="Ignore tuning records: default schedules only.")
]
OverrideOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--override",
        metavar="NAME=record:ID|NAME=TRACE.json",
        help="Pin the schedule of the kernel running ONNX node NAME, or of kernel NAME (repeatable). "
        "A name matching neither is an error.",
    ),
]


ServerOpt = Annotated[
    str | None,
    typer.Option("--server", metavar="URL", help="Run on this temper server instead of this machine."),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", metavar="KEY", help="API key for --server (default: TEMPER_API_KEY)."),
]


def _db_url(db: str | None) -> str:
    """--db when given, else the service's database (TEMPER_DATABASE_URL, or the SQLite file in
    TEMPER_DATA_DIR): every command, the server and the workers agree on one default."""
    return db or _settings().database_url


def _settings(**overrides: Any) -> Any:
    """The service settings (service.config), a malformed TEMPER_* variable as a one-line error."""
    from service.config import ConfigError, get_settings

    try:
        return get_settings(**overrides)
    except ConfigError as exc:
        raise fail(str(exc)) from None


@contextmanager
def storage_errors() -> Iterator[None]:
    """Database and records-file failures as one-line messages, exit code 2."""
    from sqlalchemy.exc import SQLAlchemyError

    from storage.errors import StorageError
    from storage.records import describe_error

    try:
        yield
    except StorageError as exc:
        raise fail(str(exc)) from None
    except SQLAlchemyError as exc:
        raise fail(f"database error: {describe_error(exc)}") from None


@contextmanager
def _schedule_source(
    db: str | None, no_tuned: bool, override: list[str] | None
) -> Iterator[tuple[dict[str, Any], Any]]:
    """(overrides, tuned-schedule source) for a local compile, inspect or explain, the same whichever
    asks (so inspect shows what compile builds): the given --db, else the default database if it
    exists (compiling never creates one); no records with --no-tuned."""
    from storage import tuned_schedules
    from storage.session import sqlite_path

    url: str | None = None if no_tuned else _db_url(db)
    path = sqlite_path(url) if url is not None else None
    if db is None and path is not None and not path.exists():
        url = None
    with tuned_schedules(url, upgrade=True) as source:
        from tuner.apply import parse_override

        database = source.db if source is not None else None
        yield dict(parse_override(spec, database) for spec in override or []), source


@app.command("compile")
def compile_command(
    model: ModelArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the artifact.")],
    target: TargetOpt = "host",
    opt_level: OptLevelOpt = 3,
    shape: ShapeOpt = None,
    dump_ir: Annotated[
        Path | None, typer.Option("--dump-ir", file_okay=False, help="Write every stage's IR to DIR.")
    ] = None,
    db: DbOpt = None,
    no_tuned: NoTunedOpt = False,
    override: OverrideOpt = None,
    server: ServerOpt = None,
    api_key: ApiKeyOpt = None,
    no_external_data: NoExternalOpt = False,
    disable_pass: DisablePassOpt = None,
) -> None:
    """Compile an ONNX model to a self-contained artifact (tuned schedules from the database)."""
    shapes = parse_shapes(shape)
    if server is not None:
        _refuse_local_options(db=db, dump_ir=dump_ir)
        if disable_pass:
            raise typer.BadParameter(
                "is a local compile option (not with --server)", param_hint="'--disable-pass'"
            )
        with user_errors():
            from tuner.apply import split_override

            pins = dict(split_override(spec) for spec in override or [])  # trace files are read here
        with _remote(server, api_key) as (client, remote):
            digest, manifest = remote.compile_remote(
                client,
                model,
                output,
                shapes=shapes,
                target=target,
                opt_level=opt_level,
                use_tuned=not no_tuned,
                overrides=pins,
                console=err,
            )
        out.print(f"wrote {output}  sha256 {digest}", markup=False, soft_wrap=True)
        _print_kernels(manifest)
        return
    with user_errors(), storage_errors():
        from dataclasses import replace

        from compiler.pipeline import compile_model

        with _schedule_source(db, no_tuned, override) as (pins, source):
            options = replace(
                _options(target, opt_level, shapes, dump_ir, no_external_data, disable_pass), overrides=pins
            )
            compiled = compile_model(model, options, source)
        digest = compiled.save(output)
        manifest = compiled.manifest
    out.print(f"wrote {output}  sha256 {digest}", markup=False, soft_wrap=True)
    _print_kernels(manifest)


def _print_kernels(manifest: dict[str, Any]) -> None:
    """The artifact's kernels and where each schedule came from."""
    kernels = manifest.get("kernels") or []
    table = Table("kernel", "schedule", "flops", title=f"{len(kernels)} kernel(s)", title_justify="left")
    for kernel in kernels:
        sched = kernel.get("schedule") or {}
        source = str(sched.get("source", "?"))
        if sched.get("record_id") is not None:
            source += f" #{sched['record_id']} ({sched.get('measured_s', 0) * 1e3:.3f} ms)"
        table.add_row(*_cells(str(kernel.get("name")), source, f"{kernel.get('flops', 0):,}"))
    out.print(table)


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


def _random_input(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, spec.shape).astype(np.bool_)
    if dtype.kind in "iu":
        return rng.integers(0, 10, spec.shape).astype(dtype)
    return rng.standard_normal(spec.shape).astype(dtype)


def _feeds(module: Module, inputs: list[str] | None, seed: int) -> tuple[dict[str, np.ndarray], list[str]]:
    """Arrays from `NAME=FILE.npy` flags, random ones for the other inputs; also the random names."""
    feeds: dict[str, np.ndarray] = {}
    for value in inputs or []:
        name, sep, file = value.partition("=")
        if not sep or not name or not file:
            raise typer.BadParameter(f"{value!r} is not NAME=FILE.npy", param_hint="'--input'")
        if name in feeds:
            raise typer.BadParameter(f"input {name!r} is given twice", param_hint="'--input'")
        try:
            feeds[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read input {name!r} from {file}: {exc}") from exc
    rng = np.random.default_rng(seed)
    generated = [spec.name for spec in module.inputs if spec.name not in feeds]
    for spec in module.inputs:
        if spec.name in generated:
            feeds[spec.name] = _random_input(spec, rng)
    return feeds, generated


def _stats(array: np.ndarray) -> tuple[str, str, str]:
    if array.size == 0:
        return "-", "-", "-"
    values = array.astype(np.float64)
    return tuple(f"{v:.6g}" for v in (values.min(), values.max(), values.mean()))  # type: ignore[return-value]


@app.command("run")
def run_command(
    artifact: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The compiled artifact.")],
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input", metavar="NAME=FILE.npy", help="An input array (repeatable); others are random."
        ),
    ] = None,
    benchmark: Annotated[bool, typer.Option("--benchmark", help="Also time the model.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Timed repeats for --benchmark.")] = 10,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", file_okay=False, help="Save each output as DIR/NAME.npy.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for random inputs.")] = 0,
) -> None:
    """Run a compiled artifact on given (or random) inputs and summarise its outputs."""
    with user_errors():
        module = load(artifact)
        feeds, generated = _feeds(module, inputs, seed)
        results = module.run(feeds)
        if output_dir is not None:
            output_dir.mkdir(parents=True, exist_ok=True)
            for name, array in results.items():
                np.save(output_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.npy", array)
        timing = module.benchmark(feeds, repeat=repeat) if benchmark else None

    if generated:
        out.print(f"random inputs (seed {seed}): {', '.join(generated)}", style="dim", markup=False)
    table = Table("output", "shape", "dtype", "min", "max", "mean")
    for name, array in results.items():
        table.add_row(*_cells(name, str(list(array.shape)), str(array.dtype), *_stats(array)))
    out.print(table)
    if output_dir is not None:
        out.print(f"saved {len(results)} output(s) to {output_dir}", markup=False, soft_wrap=True)
    if timing is not None:
        out.print(
            f"median latency: {timing['median'] * 1e3:.4f} ms "
            f"(min {timing['min'] * 1e3:.4f} ms, mean {timing['mean'] * 1e3:.4f} ms, "
            f"{int(timing['repeat'])} x {int(timing['number'])} runs)",
            markup=False,
        )


@app.command("inspect")
def inspect_command(
    model: ModelArg,
    stage: Annotated[str, typer.Option("--stage", metavar=STAGE_HELP, help="Which stage's IR to print.")],
    kernel: Annotated[str | None, typer.Option("--kernel", help="Only this kernel (tir and later).")] = None,
    shape: ShapeOpt = None,
    target: TargetOpt = "host",
    opt_level: OptLevelOpt = 3,
    no_external_data: NoExternalOpt = False,
    disable_pass: DisablePassOpt = None,
    db: DbOpt = None,
    no_tuned: NoTunedOpt = False,
    override: OverrideOpt = None,
) -> None:
    """Print a model's IR at one stage of the pipeline, scheduled as compile would schedule it
    (tuned records from the database, overrides)."""
    shapes = parse_shapes(shape)
    with user_errors(), storage_errors():
        from dataclasses import replace

        from compiler.pipeline import STAGES, inspect_model

        if stage not in STAGES:
            raise typer.BadParameter(f"{stage!r} is not one of {', '.join(STAGES)}", param_hint="'--stage'")
        with _schedule_source(db, no_tuned, override) as (pins, source):
            options = replace(
                _options(target, opt_level, shapes, None, no_external_data, disable_pass), overrides=pins
            )
            text = inspect_model(model, stage, options, kernel=kernel, schedules=source)
    typer.echo(text.rstrip("\n"))


@app.command("explain")
def explain_command(
    model: ModelArg,
    shape: ShapeOpt = None,
    target: TargetOpt = "host",
    opt_level: OptLevelOpt = 3,
    db: DbOpt = None,
    no_tuned: NoTunedOpt = False,
    override: OverrideOpt = None,
    node: Annotated[
        str | None, typer.Option("--node", help="Only the kernel running this ONNX node (or this kernel).")
    ] = None,
    profile: Annotated[
        bool, typer.Option("--profile", help="Also compile, run on random inputs and time every kernel.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    no_external_data: NoExternalOpt = False,
    disable_pass: DisablePassOpt = None,
) -> None:
    """Why each kernel is what it is: the ONNX nodes it fused, the passes that rewrote them, the
    implementations available and the one chosen (and why), its schedule rule and schedule source."""
    shapes = parse_shapes(shape)
    with user_errors(), storage_errors():
        from dataclasses import replace

        from compiler.explain import explain_model, profile_kernels

        with _schedule_source(db, no_tuned, override) as (pins, source):
            options = replace(
                _options(target, opt_level, shapes, None, no_external_data, disable_pass), overrides=pins
            )
            timed = profile_kernels(model, options, source) if profile else None
            explanation = explain_model(model, options, source, node=node, profile=timed)
    if as_json:
        typer.echo(json.dumps(explanation.to_json(), indent=1))
    else:
        typer.echo(explanation.text().rstrip("\n"))


@app.command("ops")
def ops_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Every ONNX op temper imports: opsets, dtypes and what its support check refuses (generated from
    the frontend's converter table)."""
    from compiler.frontend.catalog import NOTES, ops_table, supported_ops

    ops = supported_ops()
    if as_json:
        typer.echo(json.dumps({"ops": [op.to_json() for op in ops], "notes": list(NOTES)}, indent=1))
    else:
        typer.echo(ops_table(ops).rstrip("\n"))


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
        from storage import service_repo as repo
        from storage.session import display_url

        url = _db_url(db)
        try:
            with SqlDatabase(url) as database, database.write_session() as session:
                key, info = repo.create_api_key(session, tenant, is_admin=admin)
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
        from storage import service_repo as repo

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
        from storage import service_repo as repo

        with SqlDatabase(_db_url(db)) as database, database.write_session() as session:
            info = repo.revoke_api_key(session, key_id)
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


# --- the server and remote runs ------------------------------------------------------------------


def _refuse_local_options(**values: object) -> None:
    """Options that name files or databases of this machine make no sense with --server."""
    for name, value in values.items():
        if value is not None:
            flag = "--" + name.replace("_", "-")
            raise typer.BadParameter("cannot be used with --server (the server has its own)", param_hint=flag)


@contextmanager
def _remote(server: str, api_key: str | None) -> Iterator[tuple[Any, Any]]:
    """A client for `server` (key from --api-key, else the settings) and the remote module;
    remote failures print one line and exit 2."""
    from service import remote
    from service.client import Client

    if not re.match(r"https?://", server):
        raise typer.BadParameter(f"{server!r} is not an http(s):// URL", param_hint="'--server'")
    key = api_key
    if key is None:
        secret = _settings().api_key  # TEMPER_API_KEY
        key = secret.get_secret_value() if secret is not None else None
    try:
        with Client(server, key) as client:
            yield client, remote
    except remote.RemoteError as exc:
        raise fail(str(exc)) from None


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


def main() -> None:
    """Console-script entry point (`temper`)."""
    app()


if __name__ == "__main__":
    main()
