"""Measurement: build candidates in worker processes, time each in a process of its own, check it.

`measure()` builds a whole batch, then runs it: on one machine builds and timed runs never
overlap, since a compile competing for the cores spoils the timing. Failures are values: an
invalid trace, a compile error, a crash, a hang or a wrong result becomes a result with an
`ErrorKind`, and the batch goes on.

Builder and runner take a `concurrent.futures.Executor` so that the work can move to other
machines later; by default the builder owns a local process pool and the runner measures one
candidate at a time from the calling thread. Either way `build_one` and `run_one` are the picklable
units of work, and `run_one` always isolates the candidate in a child process with a hard timeout,
so a segfault or an endless loop never takes an executor's worker down with it.

Builder workers are started with forkserver (spawn where that is missing), never fork: forking a
process while another of its threads holds the LLVM lock would deadlock the child. A measuring
process is a fresh interpreter that imports only the standard library (tuner._measure_child says
why), so it starts in tens of milliseconds whatever the calling program imported.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any, Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from compiler.errors import ScheduleError
from compiler.kernels import Candidate, build_candidate
from compiler.target import Target, host_l2_bytes, host_llc_bytes
from compiler.tir.trace import Trace
from tuner._measure_child import command as measure_command
from tuner._measure_child import die_with_parent
from tuner.records import ErrorKind
from tuner.task import Task, pack_inputs

WORKER_DIED = "builder process died"


def default_rotate_bytes() -> int:
    """Four times this machine's L2s: every buffer of a kernel has left the private caches before it
    is used again."""
    return max(16 << 20, 4 * host_l2_bytes())


# a model whose constants outgrow the host's last-level cache reads each kernel's weights from DRAM
# on every run: its candidates rotate through copies spanning this many times that cache, so each
# call finds its weights evicted from it too. Timed with the weights in L3, a Winograd kernel whose
# schedule reuses its transformed weights least measured fastest, and ran slower inside the model
LLC_SPANS = 2


def rotate_bytes_for(task: Task, options: MeasureOptions) -> int:
    """The span a task's candidates rotate their buffers through: the options' (0 keeps the caches
    hot), or beyond the last-level cache for the kernels of a model whose constants outgrow it."""
    llc = host_llc_bytes()
    if options.rotate_bytes == 0 or task.model_weight_bytes <= llc:
        return options.rotate_bytes
    return max(options.rotate_bytes, LLC_SPANS * llc)


@dataclass(frozen=True)
class MeasureInput:
    task: Task
    trace: Trace | None = None  # None: the op family's default schedule


@dataclass(frozen=True)
class BuildResult:
    candidate: Candidate | None  # None when error_kind is set
    error_kind: ErrorKind | None = None
    error_message: str = ""
    build_secs: float = 0.0


@dataclass(frozen=True)
class RunResult:
    run_secs: tuple[float, ...] = ()  # mean seconds per call, one entry per repeat; empty on error
    error_kind: ErrorKind | None = None
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.run_secs)


@dataclass(frozen=True)
class MeasureOptions:
    repeats: int = 5  # timed repeats
    warmup: int = 1  # untimed calls after the checked first call
    min_repeat_secs: float = 0.002  # each repeat loops the kernel this long and keeps the mean per call
    timeout_secs: float = 10.0  # per candidate, from process start (loading included) to its last timing
    rtol: float = 1e-3  # allowed error: atol + rtol * max |reference|
    atol: float = 1e-4
    inputs_seed: int = 0  # Task.inputs(seed): the fixed inputs every candidate of a task runs on
    # timed calls rotate through copies of the buffers spanning this many bytes, so kernels are
    # timed with cold private caches as in a model (0: one copy, caches stay hot)
    rotate_bytes: int = field(default_factory=default_rotate_bytes)
    # activation inputs are rewritten right before each timed call, in cache as after the kernel
    # that produces them in a model (False: they rotate cold like the weights)
    fresh_inputs: bool = True

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.warmup < 0 or self.min_repeat_secs < 0:
            raise ValueError("measure options need repeats >= 1, warmup >= 0 and min_repeat_secs >= 0")
        if self.rotate_bytes < 0:
            raise ValueError("measure options need rotate_bytes >= 0")
        if self.timeout_secs <= 0 or self.rtol < 0 or self.atol < 0:
            raise ValueError("measure options need timeout_secs > 0 and non-negative tolerances")


class Builder(Protocol):
    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """One result per input, in order; never raises for a candidate's failure."""
        ...


class Runner(Protocol):
    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[RunResult]:
        """One result per input, in order; never raises for a candidate's failure."""
        ...


def mp_context() -> ForkServerContext | SpawnContext:
    """The start method for builder workers (see the module docstring) and other Python children."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def measure(
    builder: Builder, runner: Runner, inputs: Sequence[MeasureInput]
) -> list[tuple[BuildResult, RunResult]]:
    """Build the whole batch, then time it: builds and timed runs never overlap."""
    batch = list(inputs)
    builds = builder.build(batch)
    runs = runner.run(batch, builds)
    return list(zip(builds, runs, strict=True))


# --- building ---------------------------------------------------------------------------------------


def build_one(inp: MeasureInput, target: Target) -> BuildResult:
    """Replay the trace and compile the kernel alone (the unit of work sent to an executor)."""
    start = time.perf_counter()
    try:
        candidate = build_candidate(inp.task.workload, inp.trace, target)
    except ScheduleError as exc:
        return BuildResult(None, ErrorKind.INVALID, str(exc), time.perf_counter() - start)
    except Exception as exc:
        return BuildResult(None, ErrorKind.BUILD, _describe(exc), time.perf_counter() - start)
    return BuildResult(candidate, None, "", time.perf_counter() - start)


def _failed_build(exc: BaseException) -> BuildResult:
    if isinstance(exc, BrokenProcessPool):
        return BuildResult(None, ErrorKind.BUILD, WORKER_DIED)
    return BuildResult(None, ErrorKind.BUILD, f"build failed in the executor: {_describe(exc)}")


class LocalBuilder:
    """Builds candidates in parallel worker processes: `executor` when given, else a process pool of
    its own (`max_workers`, default one per core) that is replaced when a worker dies."""

    def __init__(
        self, target: Target, *, executor: Executor | None = None, max_workers: int | None = None
    ) -> None:
        self.target = target
        self._executor = executor
        self._max_workers = max_workers
        self._pool: ProcessPoolExecutor | None = None

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        if self._executor is not None:
            futures = [self._executor.submit(build_one, inp, self.target) for inp in inputs]
            return [self._result(f) for f in futures]
        futures = [self._submit(inp) for inp in inputs]
        results: list[BuildResult | None] = []
        lost: list[int] = []
        for k, future in enumerate(futures):
            try:
                results.append(future.result())
            except BrokenProcessPool:  # a worker died: every build in flight fails with this
                results.append(None)
                lost.append(k)
            except Exception as exc:
                results.append(_failed_build(exc))
        if lost:
            self._replace_pool()
        for k in lost:  # built again one by one, so the death is charged to the input that caused it
            results[k] = self._result(self._submit(inputs[k]))
        return [r for r in results if r is not None]

    def _result(self, future: Future[BuildResult]) -> BuildResult:
        try:
            return future.result()
        except BrokenProcessPool as exc:
            if self._executor is None:
                self._replace_pool()
            return _failed_build(exc)
        except Exception as exc:
            return _failed_build(exc)

    def _submit(self, inp: MeasureInput) -> Future[BuildResult]:
        try:
            return self._local_pool().submit(build_one, inp, self.target)
        except BrokenProcessPool:  # broken since the last batch
            self._replace_pool()
            return self._local_pool().submit(build_one, inp, self.target)

    def _local_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self._max_workers,
                mp_context=mp_context(),
                initializer=die_with_parent,
                initargs=(os.getpid(),),
            )
        return self._pool

    def _replace_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None

    def close(self) -> None:
        """Stop the owned worker pool (a given executor is left to its owner)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pool = None

    def __enter__(self) -> LocalBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- running ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPayload:
    """Everything one measurement needs (the unit of work sent to an executor)."""

    library: bytes
    symbol: str
    args: tuple[np.ndarray, ...]  # the inputs as the candidate takes them (packed), in parameter order
    expected: np.ndarray  # the reference kernel's output
    out_shape: tuple[int, ...]
    out_dtype: str
    options: MeasureOptions
    fresh: tuple[int, ...] = ()  # indices of args that are activations (not the model's constants)


class _Failure(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def check_output(out: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when `out` matches the reference within atol + rtol * max |reference| (NaN and inf must
    sit where the reference has them); otherwise what is wrong, naming the max abs error."""
    if out.size != expected.size:
        return f"output has {out.size} elements, the reference {expected.size}"
    got = out.astype(np.float64).reshape(-1)
    ref = expected.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        same = (got == ref) | (np.isnan(got) & np.isnan(ref))
        err = np.nan_to_num(np.where(same, 0.0, np.abs(got - ref)), nan=np.inf)
    finite = ref[np.isfinite(ref)]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    tol = atol + rtol * scale
    if err.size == 0 or err.max() <= tol:
        return None
    worst = int(err.argmax())
    index = tuple(int(i) for i in np.unravel_index(worst, out.shape)) if out.ndim else ()
    return (
        f"max abs error {err[worst]:.4g} at {list(index)} (output {got[worst]:.6g}, reference "
        f"{ref[worst]:.6g}) exceeds {tol:.3g} = atol {atol:g} + rtol {rtol:g} * max |reference| {scale:.4g}"
    )


def _death(proc: subprocess.Popen[bytes]) -> str:
    try:
        code = proc.wait(5.0)
    except subprocess.TimeoutExpired:
        return "measuring process closed its connection without a result"
    if code < 0:
        try:
            return f"measuring process killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"measuring process killed by signal {-code}"
    return f"measuring process exited with code {code}"


def _receive(
    conn: Connection, proc: subprocess.Popen[bytes], deadline: float, timeout: float
) -> tuple[str, Any]:
    if not conn.poll(max(0.0, deadline - time.monotonic())):  # poll is also woken by the child's death
        proc.kill()
        raise _Failure(ErrorKind.TIMEOUT, f"no result within the {timeout:g} s timeout (process killed)")
    try:
        message: tuple[str, Any] = conn.recv()
    except (EOFError, OSError):
        raise _Failure(ErrorKind.CRASH, _death(proc)) from None
    if message[0] == "error":
        raise _Failure(ErrorKind.RUNTIME, message[1])
    return message


def _start_measuring() -> tuple[subprocess.Popen[bytes], Connection]:
    """A measuring process (tuner._measure_child.command) and this side of its connection."""
    mine, theirs = socket.socketpair()
    try:
        proc = subprocess.Popen(
            measure_command(theirs.fileno()), pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL
        )
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()  # the child holds its own copy: its death then reads as end of file here
    return proc, Connection(mine.detach())


def run_one(payload: RunPayload) -> RunResult:
    """Measure one candidate in a fresh child process: call it once and check the output against the
    reference here, then let the child warm up and time it. A child that dies is a CRASH, one that
    does not finish within the timeout is killed (TIMEOUT)."""
    opts = payload.options
    out_nbytes = math.prod(payload.out_shape) * np.dtype(payload.out_dtype).itemsize
    args = [np.ascontiguousarray(a).tobytes() for a in payload.args]
    child_args = (
        payload.library,
        payload.symbol,
        args,
        out_nbytes,
        opts.warmup,
        opts.repeats,
        opts.min_repeat_secs,
        opts.rotate_bytes,
        payload.fresh if opts.fresh_inputs else (),
        os.getpid(),
    )
    deadline = time.monotonic() + opts.timeout_secs
    proc: subprocess.Popen[bytes] | None = None
    conn: Connection | None = None
    try:
        proc, conn = _start_measuring()
        try:
            conn.send(child_args)
        except OSError:  # it died before reading them (the interpreter could not start, say)
            raise _Failure(ErrorKind.CRASH, _death(proc)) from None
        tag, data = _receive(conn, proc, deadline, opts.timeout_secs)
        if tag != "output":
            raise _Failure(ErrorKind.RUNTIME, f"unexpected message {tag!r} from the measuring process")
        out = np.frombuffer(data, dtype=payload.out_dtype).reshape(payload.out_shape)
        wrong = check_output(out, payload.expected, opts.rtol, opts.atol)
        with contextlib.suppress(OSError):
            conn.send(wrong is None)
        if wrong is not None:
            raise _Failure(ErrorKind.WRONG, wrong)
        tag, data = _receive(conn, proc, deadline, opts.timeout_secs)
        if tag != "timing":
            raise _Failure(ErrorKind.RUNTIME, f"unexpected message {tag!r} from the measuring process")
        return RunResult(tuple(float(s) for s in data))
    except _Failure as failure:
        return RunResult((), failure.kind, str(failure))
    except Exception as exc:  # e.g. the process could not be started
        return RunResult((), ErrorKind.RUNTIME, _describe(exc))
    finally:
        if conn is not None:
            conn.close()
        if proc is not None:
            try:
                proc.wait(1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _failed_run(exc: BaseException) -> RunResult:
    if isinstance(exc, BrokenProcessPool):
        return RunResult((), ErrorKind.CRASH, "measurement worker process died")
    return RunResult((), ErrorKind.RUNTIME, f"measurement failed in the executor: {_describe(exc)}")


class LocalRunner:
    """Times built candidates, one child process per candidate, on each task's fixed inputs.

    The inputs and the reference output of a task are computed once per `run()` call in this
    process (by the graph interpreter) and sent along with each candidate. Without an executor the
    candidates are measured one after another from the calling thread; an executor given here must
    itself run at most one measurement per machine at a time, or the timings disturb each other, and
    its workers must be allowed to start child processes (a Dask worker must not be daemonic).
    """

    def __init__(self, options: MeasureOptions | None = None, *, executor: Executor | None = None) -> None:
        self.options = options or MeasureOptions()
        self._executor = executor

    @property
    def executor(self) -> Executor | None:
        """Where timings run (None: child processes of this one); the in-model check runs there too."""
        return self._executor

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[RunResult]:
        """One result per input, in order. numpy's BLAS runs on one thread meanwhile: after a call on
        several threads OpenBLAS's idle workers spin for a while, on the cores the next candidates
        are timed on, and the first candidates of every batch (a task's default among them) were
        timed sharing a core with them, after their reference had been computed."""
        with threadpool_limits(limits=1, user_api="blas"):
            return self._run(inputs, builds)

    def _run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[RunResult]:
        if len(inputs) != len(builds):
            raise ValueError(f"{len(inputs)} measure inputs but {len(builds)} build results")
        results: list[RunResult | None] = [None] * len(inputs)
        references: dict[str, tuple[Mapping[str, np.ndarray], np.ndarray] | str] = {}
        pending: list[tuple[int, RunPayload]] = []
        for k, (inp, build) in enumerate(zip(inputs, builds, strict=True)):
            if build.candidate is None:
                kind = build.error_kind or ErrorKind.BUILD
                results[k] = RunResult((), kind, build.error_message or "not built")
                continue
            try:
                pending.append((k, self._payload(inp.task, build.candidate, references)))
            except _Failure as failure:
                results[k] = RunResult((), failure.kind, str(failure))
        if self._executor is None:
            for k, payload in pending:
                results[k] = run_one(payload)
        else:
            futures = [(k, self._executor.submit(run_one, payload)) for k, payload in pending]
            for k, future in futures:
                try:
                    results[k] = future.result()
                except Exception as exc:
                    results[k] = _failed_run(exc)
        return [r for r in results if r is not None]

    def _payload(
        self,
        task: Task,
        candidate: Candidate,
        references: dict[str, tuple[Mapping[str, np.ndarray], np.ndarray] | str],
    ) -> RunPayload:
        if task.key not in references:
            try:
                inputs = task.inputs(self.options.inputs_seed)
                references[task.key] = (inputs, task.reference(inputs))
            except Exception as exc:
                references[task.key] = f"the reference kernel failed: {_describe(exc)}"
        reference = references[task.key]
        if isinstance(reference, str):
            raise _Failure(ErrorKind.RUNTIME, reference)
        feeds, expected = reference
        try:
            packed = pack_inputs(feeds, candidate.layouts)
            names = [buf.name for buf in task.workload.func.params[:-1]]
            args = tuple(np.ascontiguousarray(packed[name]) for name in names)
        except Exception as exc:
            raise _Failure(ErrorKind.RUNTIME, f"cannot prepare the inputs: {_describe(exc)}") from None
        if len(args) + 1 != len(candidate.param_shapes):
            raise _Failure(
                ErrorKind.RUNTIME,
                f"the candidate takes {len(candidate.param_shapes)} buffers, the task has {len(args) + 1}",
            )
        options = replace(self.options, rotate_bytes=rotate_bytes_for(task, self.options))
        return RunPayload(
            candidate.library,
            candidate.symbol,
            args,
            expected,
            tuple(candidate.param_shapes[-1]),
            candidate.param_dtypes[-1],
            options,
            tuple(k for k, name in enumerate(names) if name not in task.workload.const_params),
        )
