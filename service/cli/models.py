"""`temper compile | run | inspect | explain | ops`: models on this machine (or a server for compile)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from compiler.runtime import InputError, Module, TensorSpec, load
from service.cli.common import (
    STAGE_HELP,
    ApiKeyOpt,
    DbOpt,
    DisablePassOpt,
    ModelArg,
    NoExternalOpt,
    NoTunedOpt,
    OptLevelOpt,
    OverrideOpt,
    ServerOpt,
    ShapeOpt,
    TargetOpt,
    _cells,
    _options,
    _refuse_local_options,
    _remote,
    _schedule_source,
    app,
    err,
    out,
    parse_shapes,
    storage_errors,
    user_errors,
)


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
    return f"{values.min():.6g}", f"{values.max():.6g}", f"{values.mean():.6g}"


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
