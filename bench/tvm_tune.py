"""Apache TVM MetaSchedule as the tuning benchmark's peer: one operator workload, one trial budget.

It runs in a child process of its own (`tune_in_subprocess`): TVM links its own LLVM, which must not meet
llvmlite's in one process; its thread pool must not meet temper's and onnxruntime's while they are timed
(three pools spinning on two cores made every timing erratic); a crash or a hang in TVM costs its row,
not the run; and the builder's worker processes must import this module to find `f_build` (the child runs
from the repository root).

The child follows the driving notes of shared/bench/TVM_NOTES.md: the workload as a TE compute — the
constant weights of gemm and conv marked layout-free, as relax does for constants and as temper packs them
at compile time; matmul's operands are inputs on both sides — tuned by `tune_tir` (XGBoost cost model,
evolutionary search) on a target with the host's CPU name and `num-cores` = THREADS, with a LocalBuilder
whose build function skips the tensor-intrinsic import that otherwise costs 12–15 s per batch. The best
schedule is checked against numpy (with its weight-layout block, so the original weights can be fed) and
timed without that block (weights pre-packed, as while tuning) through its Python call, the runtime inputs
converted from numpy arrays and the output copied back as temper's and onnxruntime's calls do (the bare
kernel call is timed too, for the JSON).

    python -m bench.tvm_tune --workload gemm1024 --trials 64 --mcpu znver3 --out result.json [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import THREADS, common, ops

REPO = Path(__file__).resolve().parents[1]
FAILED_SECS = 1e9
"""MetaSchedule records a failed build or run with a huge cost (1e10 s): anything above this failed."""


# -- the workloads as TE -------------------------------------------------------------------------


def prim_func(spec: dict[str, Any]) -> Any:
    """The workload as a TIR PrimFunc; parameters in the order of `workload_args`, then the output."""
    from tvm import te, topi

    op = spec["op"]
    if op == "matmul":
        (m, k), (_, n) = spec["a"], spec["b"]
        a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
        r = te.reduce_axis((0, k), name="r")
        y = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="y")
        return te.create_prim_func([a, b, y])
    if op == "gemm":
        (m, k), (_, n) = spec["a"], spec["b"]
        x, w = te.placeholder((m, k), name="x"), te.placeholder((k, n), name="w")
        r = te.reduce_axis((0, k), name="r")
        mm = te.compute(
            (m, n),
            lambda i, j: te.sum(x[i, r] * w[r, j], axis=r),
            name="matmul",
            attrs={"layout_free_placeholders": [w]},
        )
        if not spec.get("bias"):
            return te.create_prim_func([x, w, mm])
        bias = te.placeholder((n,), name="bias")
        y = te.compute((m, n), lambda i, j: mm[i, j] + bias[j], name="y")
        return te.create_prim_func([x, w, bias, y])
    if op == "conv2d":
        n, c, h, wd = spec["x"]
        o, cg, kh, kw = spec["w"]
        stride, pad, groups = spec.get("stride", 1), spec.get("pad", 0), spec.get("groups", 1)
        x, w = te.placeholder((n, c, h, wd), name="x"), te.placeholder((o, cg, kh, kw), name="w")
        xp = topi.nn.pad(x, (0, 0, pad, pad), (0, 0, pad, pad), name="pad") if pad else x
        oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
        per_group = o // groups
        rc = te.reduce_axis((0, cg), name="rc")
        ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")

        def channel(f: Any) -> Any:
            return rc if groups == 1 else f // per_group * cg + rc

        y = te.compute(
            (n, o, oh, ow),
            lambda b, f, yy, xx: te.sum(
                xp[b, channel(f), yy * stride + ry, xx * stride + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]
            ),
            name="y",
            attrs={"layout_free_placeholders": [w]},
        )
        return te.create_prim_func([x, w, y])
    raise ValueError(f"unknown workload op {op!r} in {spec['name']}")


def workload_args(spec: dict[str, Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """The same seeded arrays bench/ops.py feeds every system, in parameter order, and numpy's result."""
    _, feeds, consts = ops.workload_model(spec, np.random.default_rng(0))
    return [*feeds.values(), *consts.values()], ops.numpy_fn(spec, feeds, consts)()


# -- tuning ---------------------------------------------------------------------------------------


def f_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build minus `import tvm.s_tir.tensor_intrin` (TVM_NOTES.md, item 2)."""
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def read_curve(work_dir: Path, flops: int) -> tuple[list[list[float]], int, float]:
    """(curve of [trial, best GFLOP/s so far], failed trials, best seconds) from the tuning-record log,
    which MetaSchedule appends one line per measured candidate, in measurement order."""
    path = work_dir / "database_tuning_record.json"
    best, failed, curve = float("inf"), 0, []
    lines = path.read_text().splitlines() if path.exists() else []
    for trial, line in enumerate(lines, start=1):
        run_secs = json.loads(line)[1][1] or []
        secs = statistics.fmean(float(s) for s in run_secs) if run_secs else float("inf")
        if secs >= FAILED_SECS:
            failed += 1
        else:
            best = min(best, secs)
        curve.append([trial, flops / best / 1e9 if best < float("inf") else 0.0])
    return curve, failed, best


def tune(
    spec: dict[str, Any], trials: int, per_iter: int, mcpu: str, work_dir: Path
) -> tuple[dict[str, Any], Any]:
    """Tune one workload with `trials` candidates: (summary with the curve, best schedule or None)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    func = prim_func(spec)
    target = tvm.target.Target(common.tvm_target_config(mcpu))
    start = time.perf_counter()
    database = ms.tune_tir(
        func,
        target,
        str(work_dir),
        max_trials_global=trials,
        max_trials_per_task=trials,
        num_trials_per_iter=min(per_iter, trials),
        builder=ms.builder.LocalBuilder(f_build=f_build, max_workers=THREADS),
        runner=ms.runner.LocalRunner(),
        num_tuning_cores=THREADS,
        seed=0,
    )
    tune_s = time.perf_counter() - start
    curve, failed, best_s = read_curve(work_dir, spec["flops"])
    summary = {
        "trials": len(curve),
        "failed": failed,
        "tune_s": tune_s,
        "best_s": best_s,
        "best_gflops": spec["flops"] / best_s / 1e9 if best_s < float("inf") else 0.0,
        "curve": curve,
    }
    return summary, (ms.tir_integration.compile_tir(database, func, target), target)


def tuned_kernels(spec: dict[str, Any], schedule: Any, target: Any) -> dict[str, Callable[[], object]]:
    """The best schedule as calls to time, checked against numpy first (raises when wrong):
    "call" as a Python user runs it — runtime inputs converted from numpy, the output copied back, as
    temper's Module.run and onnxruntime do — and "kernel", the bare call on preallocated tensors."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    if schedule is None:
        raise RuntimeError("MetaSchedule found no valid schedule")
    args, reference = workload_args(spec)
    device = tvm.cpu()
    # correctness: the schedule as tuned, weight-layout block included, on the original arrays
    checked = tvm.compile(schedule.mod, target=target).mod["main"]
    out = tvm.runtime.tensor(np.zeros(reference.shape, np.float32), device)
    checked(*(tvm.runtime.tensor(a, device) for a in args), out)
    ops._check(out.numpy(), reference)
    # timing: as measured while tuning, the weights already in the schedule's layout (random values)
    timed_mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(schedule.mod)
    rng = np.random.default_rng(0)
    tensors = [  # in TVM 0.27 a PrimFunc's params are its buffers
        tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.shape]).astype(np.float32), device)
        for p in timed_mod["main"].params
    ]
    timed = tvm.compile(timed_mod, target=target).mod["main"]
    runtime_inputs = len(ops.workload_model(spec, np.random.default_rng(0))[1])  # the rest are constants
    feeds = args[:runtime_inputs]

    def call() -> np.ndarray:
        timed(*(tvm.runtime.tensor(a, device) for a in feeds), *tensors[runtime_inputs:])
        return tensors[-1].numpy()

    return {"call": call, "kernel": lambda: timed(*tensors)}


def child(args: argparse.Namespace) -> dict[str, Any]:
    """The child's work: tune, then check and time the best schedule (the tuning summary stands when
    the tuned kernel fails; the result's "error" says why it has no timing)."""
    spec = {s["name"]: s for s in ops.load_workloads()}[args.workload]
    result: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="temper-bench-ms-") as tmp:
            summary, (schedule, target) = tune(spec, args.trials, args.per_iter, args.mcpu, Path(tmp))
        result.update(summary)
        settings = common.Settings.from_args(args.quick)
        calls = tuned_kernels(spec, schedule, target)
        kernel = common.measure(calls["kernel"], settings)
        timing = common.measure(calls["call"], settings)
        result.update(latency_s=timing.median, min_s=min(timing.samples), samples=list(timing.samples))
        result.update(kernel_latency_s=kernel.median, kernel_min_s=min(kernel.samples))
    except Exception as exc:  # reported as TVM's error in the parent's row
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    return result


# -- the parent's side ----------------------------------------------------------------------------


def tune_in_subprocess(
    name: str,
    trials: int,
    *,
    per_iter: int,
    quick: bool,
    timeout_s: float,
) -> dict[str, Any]:
    """Run `child` in a child process: the tuning summary and the tuned kernel's timing, or {"error": ...}."""
    with tempfile.TemporaryDirectory(prefix="temper-bench-tvm-") as tmp:
        command = ["-m", "bench.tvm_tune", "--workload", name, "--trials", str(trials)]
        command += ["--per-iter", str(per_iter), "--mcpu", common.host_cpu_name()]
        command += ["--quick"] if quick else []
        out = Path(tmp) / "result.json"
        return run_child([*command, "--out", str(out)], out, timeout_s)


def run_child(arguments: list[str], out: Path, timeout_s: float) -> dict[str, Any]:
    """Run `python ARGUMENTS` from the repository root and read the JSON it writes to `out`; {"error": ...}
    when it times out or exits without writing it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    # a session of its own: on timeout the child's builder and runner workers are killed with it
    with subprocess.Popen(
        [sys.executable, *arguments],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"TVM did not finish within {timeout_s:.0f} s"}
    if out.exists():
        return json.loads(out.read_text())
    tail = log.strip().splitlines()[-3:]
    return {"error": f"TVM child exited with code {proc.returncode}: " + " | ".join(tail)[:400]}


def add_child_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every TVM child takes from its parent besides what it tunes."""
    parser.add_argument("--per-iter", type=int, default=64, help="candidates per search iteration")
    parser.add_argument("--mcpu", default="generic", help="LLVM CPU name for TVM's target (the host's)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the result (JSON)")
    parser.add_argument("--quick", action="store_true", help="fewer timing samples")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tvm_tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", required=True, help="a name from bench/workloads.json")
    parser.add_argument("--trials", type=int, required=True, help="MetaSchedule's trial budget")
    add_child_flags(parser)
    args = parser.parse_args(argv)
    if args.workload not in {s["name"] for s in ops.load_workloads()}:
        raise SystemExit(f"unknown workload {args.workload!r}")
    args.out.write_text(json.dumps(child(args)) + "\n")


if __name__ == "__main__":
    main()
