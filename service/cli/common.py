"""What every command group of `temper` shares: the app, the options, the consoles, the one-line
error handling (`fail`, `user_errors`, `storage_errors`), the schedule source compile, inspect and
explain use, and the client for `--server` runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from compiler import errors as compiler_errors
from compiler.runtime import ArtifactError, InputError, KernelError
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
