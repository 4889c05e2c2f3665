"""Measurement builds and times real compiled kernels, and turns every candidate failure into a value.

Faults are injected with tiny C libraries that export the task's kernel symbol (a NULL write, an
endless loop, zeros instead of the result, ...) and go through the same runner as real candidates.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from compiler.kernels import Candidate, build_candidate, default_schedule
from compiler.pipeline import CompileOptions
from compiler.target import Target, host_llc_bytes, host_target
from compiler.tir.printer import func_str
from compiler.tir.trace import Trace
from tests.models.builders import mlp
from tuner.measure import (
    WORKER_DIED,
    BuildResult,
    LocalBuilder,
    LocalRunner,
    MeasureInput,
    MeasureOptions,
    RunResult,
    build_one,
    check_output,
    measure,
    mp_context,
    rotate_bytes_for,
)
from tuner.records import ErrorKind
from tuner.task import Task, extract_tasks, pack_inputs

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler driver (cc) to link kernels with")

FAST = MeasureOptions(repeats=3, min_repeat_secs=0.001, timeout_secs=5.0)
BAD_SPLIT = {"version": 1, "instructions": [{"prim": "split", "loop": "no_such_loop", "factors": [None, 4]}]}


@pytest.fixture(scope="module")
def target() -> Target:
    return host_target()


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    # batch 32 x 128 -> 128: the first kernel's default schedule has a parallel loop
    return extract_tasks(mlp(32, sizes=(128, 128, 8)), CompileOptions())


@pytest.fixture(scope="module")
def good(tasks: list[Task], target: Target) -> Candidate:
    result = build_one(MeasureInput(tasks[0]), target)
    assert result.candidate is not None, result.error_message
    return result.candidate


def _fake(good: Candidate, tmp: Path, name: str, body: str) -> Candidate:
    """`good` with its library replaced by C code exporting the same symbol."""
    out_bytes = int(np.prod(good.param_shapes[-1])) * np.dtype(good.param_dtypes[-1]).itemsize
    src = tmp / f"{name}.c"
    src.write_text(
        "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
        f"#define OUT args[{len(good.param_shapes) - 1}]\n#define OUT_BYTES {out_bytes}\n"
        f"int32_t {good.symbol}(void **args) {{ {body} }}\n"
    )
    lib = tmp / f"{name}.so"
    subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    return dataclasses.replace(good, library=lib.read_bytes())


def _built(candidate: Candidate) -> BuildResult:
    return BuildResult(candidate, None, "", 0.0)


def test_default_schedules_build_and_time(tasks: list[Task], target: Target) -> None:
    replayed = MeasureInput(tasks[0], default_schedule(tasks[0].workload)[0].trace)
    inputs = [MeasureInput(t) for t in tasks] + [replayed]
    with LocalBuilder(target, max_workers=2) as builder:
        results = measure(builder, LocalRunner(FAST), inputs)
    assert len(results) == len(inputs)
    for build, run in results:
        assert build.error_kind is None and build.candidate is not None, build.error_message
        assert build.build_secs > 0
        assert run.ok, run.error_message
        assert len(run.run_secs) == FAST.repeats and all(s > 0 for s in run.run_secs)


def test_references_are_computed_and_candidates_timed_with_one_blas_thread(
    tasks: list[Task], good: Candidate, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a BLAS pool of several threads keeps spinning after a call, on the cores the candidates are
    # timed on: the runner holds numpy's BLAS to one thread, and gives the caller's setting back
    def blas_threads() -> list[int]:
        return [int(p["num_threads"]) for p in threadpool_info() if p["user_api"] == "blas"]

    seen: list[list[int]] = []
    reference = Task.reference

    def spying(self: Task, inputs: Any) -> np.ndarray:
        seen.append(blas_threads())
        return reference(self, inputs)

    monkeypatch.setattr(Task, "reference", spying)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        (run,) = LocalRunner(FAST).run([MeasureInput(tasks[0])], [_built(good)])
        assert blas_threads() == before
    assert run.ok, run.error_message
    assert seen and all(threads == [1] * len(threads) for threads in seen)


def test_invalid_trace_is_recorded_and_the_batch_goes_on(tasks: list[Task], target: Target) -> None:
    inputs = [MeasureInput(tasks[1], Trace.from_json(BAD_SPLIT)), MeasureInput(tasks[1])]
    with LocalBuilder(target, max_workers=1) as builder:
        (bad_build, bad_run), (ok_build, ok_run) = measure(builder, LocalRunner(FAST), inputs)
    assert bad_build.candidate is None and bad_build.error_kind is ErrorKind.INVALID
    assert "no_such_loop" in bad_build.error_message
    assert bad_run.error_kind is ErrorKind.INVALID and bad_run.run_secs == ()
    assert ok_build.error_kind is None and ok_run.ok


def test_faulty_candidates_become_error_kinds(tasks: list[Task], good: Candidate, tmp_path: Path) -> None:
    cases = {
        "segfault": ("*(volatile int *)0 = 1; return 0;", ErrorKind.CRASH, "SIGSEGV"),
        "abort": ("abort();", ErrorKind.CRASH, "SIGABRT"),
        "hang": ("volatile int spin = 1; while (spin) {} return 0;", ErrorKind.TIMEOUT, "timeout"),
        "zeros": ("memset(OUT, 0, OUT_BYTES); return 0;", ErrorKind.WRONG, "max abs error"),
        "untouched": ("return 0;", ErrorKind.WRONG, "max abs error inf"),
        "status": ("return 3;", ErrorKind.RUNTIME, "kernel returned 3"),
    }
    candidates = [_fake(good, tmp_path, name, body) for name, (body, _, _) in cases.items()]
    wrong_symbol = dataclasses.replace(good, symbol="not_exported")
    builds = [_built(good), *map(_built, candidates), _built(wrong_symbol), _built(good)]
    inputs = [MeasureInput(tasks[0])] * len(builds)
    options = dataclasses.replace(FAST, timeout_secs=3.0)

    results = LocalRunner(options).run(inputs, builds)

    assert len(results) == len(builds)
    assert results[0].ok and results[-1].ok, (results[0], results[-1])
    for (name, (_, kind, words)), result in zip(cases.items(), results[1:], strict=False):
        assert result.error_kind is kind, (name, result)
        assert words in result.error_message, (name, result.error_message)
        assert result.run_secs == ()
    assert results[-2].error_kind is ErrorKind.RUNTIME and "not_exported" in results[-2].error_message


def test_measuring_after_the_parent_ran_a_parallel_kernel_does_not_hang(
    tasks: list[Task], good: Candidate, tmp_path: Path
) -> None:
    # a child process must not inherit a parent's thread pool in a state it cannot use: run the
    # parallel kernel here first (its pool starts), then measure it in a child process
    assert b"temper_parallel_for" in good.library
    path = tmp_path / "good.so"
    path.write_bytes(good.library)
    kernel = ctypes.CDLL(str(path))[good.symbol]
    kernel.restype = ctypes.c_int32
    feeds = pack_inputs(tasks[0].inputs(0), good.layouts)
    arrays = [np.ascontiguousarray(feeds[p.name]) for p in tasks[0].workload.func.params[:-1]]
    arrays.append(np.empty(good.param_shapes[-1], good.param_dtypes[-1]))
    assert kernel((ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))) == 0

    (result,) = LocalRunner(FAST).run([MeasureInput(tasks[0])], [_built(good)])
    assert result.ok, result.error_message


_MAIN_MODULE = """
import os, sys
with open(os.environ["IMPORTS_LOG"], "a") as log:  # a side effect of importing this module
    log.write(__name__ + "\\n")
if __name__ == "__main__":
    from compiler.pipeline import CompileOptions
    from compiler.target import host_target
    from tests.models.builders import mlp
    from tuner.measure import LocalRunner, MeasureInput, MeasureOptions, build_one
    from tuner.task import extract_tasks

    task = extract_tasks(mlp(32, sizes=(128, 128, 8)), CompileOptions())[0]
    built = build_one(MeasureInput(task), host_target())
    options = MeasureOptions(repeats=1, min_repeat_secs=0.0, timeout_secs=30.0)
    results = LocalRunner(options).run([MeasureInput(task)] * 3, [built] * 3)
    assert all(r.ok for r in results), results
"""


def test_measuring_processes_do_not_import_the_callers_main_module(tmp_path: Path) -> None:
    # a program run as `python -m module` (a bench, a user's script) may import onnxruntime or the
    # compiler at its top: a measuring process that imported it again waited for all of that first
    (tmp_path / "caller_main.py").write_text(_MAIN_MODULE)
    log = tmp_path / "imports.log"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "IMPORTS_LOG": str(log), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    done = subprocess.run(
        [sys.executable, "-m", "caller_main"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text().split() == ["__main__"]  # imported once, by the caller itself


def test_a_measuring_process_starts_on_the_standard_library_alone() -> None:
    from tuner._measure_child import command

    cmd = command(7)
    assert cmd[0] == sys.executable and {"-I", "-S"} <= set(cmd) and cmd[-1] == "7"
    probe = "import sys; print(any('site-packages' in p for p in sys.path))"
    isolated = subprocess.run([*cmd[:-2], "-c", probe], capture_output=True, text=True, check=True)
    assert isolated.stdout.strip() == "False"


def test_executors_run_the_same_units_of_work(
    tasks: list[Task], good: Candidate, target: Target, tmp_path: Path
) -> None:
    segfault = _fake(good, tmp_path, "segv", "*(volatile int *)0 = 1; return 0;")
    with ProcessPoolExecutor(1, mp_context=mp_context()) as executor:
        builds = LocalBuilder(target, executor=executor).build([MeasureInput(tasks[1])])
        runner = LocalRunner(FAST, executor=executor)
        crashed, fine = runner.run([MeasureInput(tasks[0])] * 2, [_built(segfault), _built(good)])
    assert builds[0].error_kind is None and builds[0].candidate is not None
    assert crashed.error_kind is ErrorKind.CRASH  # the child died, not the executor's worker
    assert fine.ok, fine.error_message


class _KillsTheWorker:
    """Unpickling it ends the process that unpickles it (a builder worker)."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return os._exit, (13,)


def test_a_dying_builder_worker_is_charged_to_its_input(tasks: list[Task], target: Target) -> None:
    bomb = MeasureInput(dataclasses.replace(tasks[1], workload=_KillsTheWorker()))  # type: ignore[arg-type]
    with LocalBuilder(target, max_workers=2) as builder:
        first, died, last = builder.build([MeasureInput(tasks[1]), bomb, MeasureInput(tasks[0])])
        (after,) = builder.build([MeasureInput(tasks[1])])
    assert died.candidate is None and died.error_kind is ErrorKind.BUILD and died.error_message == WORKER_DIED
    for result in (first, last, after):
        assert result.error_kind is None and result.candidate is not None, result.error_message


def test_compiler_values_pickle(tasks: list[Task], good: Candidate, target: Target) -> None:
    task = tasks[0]
    trace = default_schedule(task.workload)[0].trace
    again: Task = pickle.loads(pickle.dumps(task))
    # IR nodes compare by identity, so check behaviour: same IR text, same key, same reference, same code
    assert again.key == task.key and again.weight == task.weight and again.flops == task.flops
    assert func_str(again.workload.func) == func_str(task.workload.func)
    feeds = task.inputs(0)
    np.testing.assert_array_equal(again.reference(feeds), task.reference(feeds))
    assert pickle.loads(pickle.dumps(trace)) == trace
    assert pickle.loads(pickle.dumps(good)) == good
    assert pickle.loads(pickle.dumps(target)) == target
    rebuilt = build_candidate(again.workload, pickle.loads(pickle.dumps(trace)), target)
    assert rebuilt.library == build_candidate(task.workload, trace, target).library
    results = (
        BuildResult(good, None, "", 1.0),
        RunResult((1e-3,), None, ""),
        RunResult((), ErrorKind.CRASH, "x"),
    )
    assert [pickle.loads(pickle.dumps(r)) for r in results] == list(results)
    assert pickle.loads(pickle.dumps(MeasureInput(task, trace))).trace == trace


def test_check_output_scales_by_the_reference_and_names_the_error() -> None:
    ref = np.array([[100.0, -0.5], [np.nan, np.inf]], np.float32)
    assert check_output(ref.copy(), ref, rtol=1e-3, atol=1e-4) is None
    assert check_output(ref + np.float32(0.05), ref, rtol=1e-3, atol=1e-4) is None  # within 1e-3 * 100
    off = ref.copy()
    off[0, 1] = 2.0
    message = check_output(off, ref, rtol=1e-3, atol=1e-4)
    assert message is not None and "max abs error 2.5 at [0, 1]" in message
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert check_output(nan, ref, rtol=1e-3, atol=1e-4) is not None
    assert check_output(np.zeros(3, np.float32), ref, rtol=1e-3, atol=1e-4) is not None


def test_measure_options_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="repeats"):
        MeasureOptions(repeats=0)
    with pytest.raises(ValueError, match="timeout"):
        MeasureOptions(timeout_secs=0)
    with pytest.raises(ValueError, match="rotate_bytes"):
        MeasureOptions(rotate_bytes=-1)


def test_timed_calls_rotate_through_enough_buffer_copies_to_leave_the_caches() -> None:
    from tuner._measure_child import copies_for

    assert copies_for(1 << 20, 16 << 20) == 16  # a 1 MiB kernel: 16 copies span 16 MiB
    assert copies_for(40 << 20, 16 << 20) == 1  # already larger than the span
    assert copies_for(1000, 16 << 20) == 64  # capped
    assert copies_for(1 << 20, 0) == 1  # rotation off: one copy, caches stay hot
    assert MeasureOptions().rotate_bytes >= 16 << 20


def test_runner_needs_one_build_per_input(tasks: list[Task]) -> None:
    with pytest.raises(ValueError, match="build results"):
        LocalRunner().run([MeasureInput(tasks[0])], [])


def test_tasks_know_the_bytes_of_their_models_constants(tasks: list[Task]) -> None:
    # the MLP's two weight matrices and biases (128 -> 128 -> 8), float32
    assert {t.model_weight_bytes for t in tasks} == {4 * (128 * 128 + 128 + 128 * 8 + 8)}


_T = TypeVar("_T")


class _RecordingExecutor(ThreadPoolExecutor):
    """Runs measurements one at a time and keeps the rotation span each was sent with."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.spans: list[int] = []

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        self.spans.append(args[0].options.rotate_bytes)
        return super().submit(fn, *args, **kwargs)


def test_a_model_beyond_the_last_level_cache_is_timed_with_its_weights_out_of_it(
    tasks: list[Task], target: Target
) -> None:
    llc = host_llc_bytes()
    fits = tasks[0]
    beyond = dataclasses.replace(fits, model_weight_bytes=llc + 1)
    assert rotate_bytes_for(fits, FAST) == FAST.rotate_bytes  # the MLP's weights stay in cache
    assert rotate_bytes_for(beyond, FAST) >= 2 * llc
    hot = dataclasses.replace(FAST, rotate_bytes=0)
    assert rotate_bytes_for(beyond, hot) == 0  # rotation off stays off
    assert rotate_bytes_for(dataclasses.replace(fits, model_weight_bytes=0), FAST) == FAST.rotate_bytes

    inputs = [MeasureInput(fits), MeasureInput(beyond)]
    with LocalBuilder(target, max_workers=1) as builder, _RecordingExecutor() as executor:
        builds = builder.build(inputs)
        results = LocalRunner(FAST, executor=executor).run(inputs, builds)
        spans = executor.spans
    assert all(r.ok for r in results), results
    assert spans == [FAST.rotate_bytes, rotate_bytes_for(beyond, FAST)]
