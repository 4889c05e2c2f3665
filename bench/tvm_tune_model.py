"""Apache TVM MetaSchedule on a whole model, as the tuning benchmark's peer for tuned models.

Runs in a child process of its own for the reasons bench/tvm_tune.py gives (TVM's LLVM must not meet
llvmlite's, its thread pool must not spin while the others are timed, a crash costs only its row). The
child follows relax's static-shape tuning pipeline (TVM_NOTES.md, item 6) with CPU weight pre-packing, but
drives MetaSchedule through `tune_relax` so that every task gets the same per-task budget temper gets
(`max_trials_global` = tasks × budget) and the builder skips the tensor-intrinsic import (item 2). The tuned
model is checked against onnxruntime's outputs, then timed through its Python call: inputs converted from
numpy, outputs copied back, weights pre-packed once beforehand (as temper's artifact holds them packed).

    python -m bench.tvm_tune_model --model m.onnx --shapes '{"x": [1, 3]}' --feeds in.npz \
        --reference out.npz --trials-per-task 32 --mcpu znver4 --out result.json [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import THREADS, common, tvm_tune


def relax_module(model_path: Path, shapes: dict[str, list[int]]) -> tuple[Any, list[Any]]:
    """The ONNX model as a relax module whose weights are parameters (so they can be pre-packed), and
    those weights."""
    import onnx
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = onnx.load(str(model_path))
    mod = from_onnx(model, shape_dict={k: list(v) for k, v in shapes.items()}, keep_params_in_input=True)
    mod, params = relax.frontend.detach_params(mod)
    return mod, list(params.get("main", []))


def tune(mod: Any, per_task: int, per_iter: int, mcpu: str, work_dir: Path) -> tuple[Any, dict[str, Any]]:
    """Tune every task of `mod` with `per_task` trials; returns (the module with the best schedules
    applied and its weight transform lifted out, tuning summary)."""
    import tvm
    from tvm import relax
    from tvm.relax import transform
    from tvm.s_tir import meta_schedule as ms

    target = tvm.target.Target(common.tvm_target_config(mcpu))
    with target:
        mod = tvm.transform.Sequential(
            [
                transform.DecomposeOpsForInference(),
                transform.CanonicalizeBindings(),
                relax.get_pipeline("zero"),
                transform.AttachAttrLayoutFreeBuffers(),
            ]
        )(mod)
    tasks = ms.relax_integration.extract_tasks(mod, target, params={})
    start = time.perf_counter()
    crashed: list[str] = []
    try:
        _tune_tasks(tasks, per_task, per_iter, work_dir)
    except Exception as exc:  # MetaSchedule's scheduler died on one task: tune the others one by one
        crashed = _tune_one_by_one(tasks, per_task, per_iter, work_dir, first_error=exc)
    tune_s = time.perf_counter() - start
    curve, failed, _ = tvm_tune.read_curve(work_dir, flops=1)  # one line per measured candidate
    trials = len(curve)
    with target:
        mod = tvm.transform.Sequential(
            [
                transform.MetaScheduleApplyDatabase(str(work_dir)),
                transform.SplitLayoutRewritePreproc(),
                transform.LiftTransformParams(),
                transform.FoldConstant(),
            ]
        )(mod)
    summary = {"tasks": len(tasks), "budget": per_task * len(tasks), "trials": trials, "failed": failed}
    if crashed:
        summary["crashed_tasks"] = crashed
    return (mod, target), {**summary, "tune_s": tune_s}


def _tune_tasks(tasks: list[Any], per_task: int, per_iter: int, work_dir: Path) -> None:
    """MetaSchedule's gradient task scheduler over `tasks`, `per_task` trials each, into the JSON
    database in `work_dir` (which already holds whatever an earlier call recorded)."""
    from tvm.s_tir import meta_schedule as ms

    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        extracted_tasks=tasks, work_dir=str(work_dir), seed=0
    )
    ms.tune.tune_tasks(
        tasks=contexts,
        task_weights=weights,
        work_dir=str(work_dir),
        max_trials_global=per_task * len(tasks),
        max_trials_per_task=per_task,
        num_trials_per_iter=min(per_iter, per_task),
        builder=ms.builder.LocalBuilder(f_build=tvm_tune.f_build, max_workers=THREADS),
        runner=ms.runner.LocalRunner(),
    )


def _tune_one_by_one(
    tasks: list[Any], per_task: int, per_iter: int, work_dir: Path, first_error: Exception
) -> list[str]:
    """After a crash of the scheduler: every task without records yet is tuned on its own, so one task
    MetaSchedule cannot schedule costs that task (left as relax lowered it), not the model's row.
    Returns "task: error" for the tasks that crashed again."""
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    crashed = []
    for task in tasks:
        module = task.dispatched[0]
        if database.has_workload(module) and database.get_top_k(database.commit_workload(module), 1):
            continue
        try:
            _tune_tasks([task], per_task, per_iter, work_dir)
        except Exception as exc:
            crashed.append(f"{task.task_name}: {_first_line(exc)}")
    if not crashed:  # every task tuned alone: report what stopped the joint run
        crashed.append(f"(joint run): {_first_line(first_error)}")
    return crashed


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Tune, build, check against the reference and time; the tuning summary stands when a later step
    fails (the result's "error" says why it has no timing)."""
    import tvm
    from tvm import relax

    from bench import models

    shapes = json.loads(args.shapes)
    with np.load(args.feeds) as data:
        feeds = [data[name] for name in data.files]
    with np.load(args.reference) as data:
        reference = [data[name] for name in data.files]
    result: dict[str, Any] = {}
    try:
        mod, weights = relax_module(args.model, shapes)
        with tempfile.TemporaryDirectory(prefix="temper-bench-ms-model-") as tmp:
            (mod, target), summary = tune(mod, args.trials_per_task, args.per_iter, args.mcpu, Path(tmp))
        result.update(summary)
        start = time.perf_counter()
        executable = tvm.compile(mod, target=target)
        result["compile_s"] = time.perf_counter() - start
        device = tvm.cpu()
        vm = relax.VirtualMachine(executable, device)
        packed = vm["main_transform_params"]([tvm.runtime.tensor(w.numpy(), device) for w in weights])
        main = vm["main"]

        def call() -> list[np.ndarray]:
            return models._tvm_outputs(main(*(tvm.runtime.tensor(a, device) for a in feeds), *packed))

        models._check(call(), reference)
        timing = common.measure(call, common.Settings.from_args(args.quick))
        result.update(latency_s=timing.median, min_s=min(timing.samples), samples=list(timing.samples))
    except Exception as exc:  # reported as TVM's error in the parent's row
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    return result


def tune_in_subprocess(
    model: Any,
    shapes: dict[str, tuple[int, ...]],
    feeds: dict[str, np.ndarray],
    reference: list[np.ndarray],
    per_task: int,
    *,
    per_iter: int,
    quick: bool,
    timeout_s: float,
) -> dict[str, Any]:
    """Run `child` on `model` (an onnx.ModelProto) in a child process: the tuning summary and the tuned
    model's timing, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="temper-bench-tvm-model-") as tmp:
        directory = Path(tmp)
        (directory / "model.onnx").write_bytes(model.SerializeToString())
        np.savez(directory / "feeds.npz", **feeds)  # keeps the order: the model's input order
        np.savez(directory / "reference.npz", *reference)
        command = ["-m", "bench.tvm_tune_model", "--model", str(directory / "model.onnx")]
        command += ["--shapes", json.dumps({k: list(v) for k, v in shapes.items()})]
        command += ["--feeds", str(directory / "feeds.npz"), "--reference", str(directory / "reference.npz")]
        command += ["--trials-per-task", str(per_task), "--per-iter", str(per_iter)]
        command += ["--mcpu", common.host_cpu_name()] + (["--quick"] if quick else [])
        out = directory / "result.json"
        return tvm_tune.run_child([*command, "--out", str(out)], out, timeout_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tvm_tune_model", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", type=Path, required=True, help="the ONNX file")
    parser.add_argument("--shapes", default="{}", help="JSON object: input name -> dims")
    parser.add_argument("--feeds", type=Path, required=True, help="the inputs (.npz, in the model's order)")
    parser.add_argument("--reference", type=Path, required=True, help="expected outputs (.npz, in order)")
    parser.add_argument("--trials-per-task", type=int, required=True, help="MetaSchedule's budget per task")
    tvm_tune.add_child_flags(parser)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(child(args)) + "\n")


if __name__ == "__main__":
    main()
