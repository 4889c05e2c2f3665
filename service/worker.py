"""Workers: claim jobs from the database and run them (compilations and tuning).

A worker claims one job at a time (storage.repos.claim_job), renews the job's lease from a
heartbeat thread while it works, and ends the job itself: succeeded (with the artifact, or the final
tuning progress), failed (a user error's message: bad model, bad override...) or cancelled. It
stops working on a job as soon as the heartbeat reports that the job was cancelled or taken over.

Nothing is lost when a worker dies: its lease runs out, another worker claims the job, and tuning
resumes from the records the dead worker committed (tuner.tune never re-measures a recorded
candidate and counts recorded ones against the budget). A worker asked to stop (SIGTERM, Ctrl-C)
stops its tuning run and puts the job back in the queue, so another worker takes it at once.

`temper worker` runs one worker per process (`run_workers`); `temper serve` runs one in a thread.
A compile job compiles in a child process (LLVM's assertions abort the process they fail in: such a
crash fails the job, not the worker or the API); a tuning job builds and measures its candidates in
child processes of the tuner's own.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypedDict

from sqlalchemy.exc import SQLAlchemyError

from service.config import Settings
from service.jobparams import CompileParams, CompileTarget, JobParamError, TuneParams
from storage import SqlDatabase
from storage import repos as repo
from storage.blobs import BlobError, BlobStore
from storage.errors import StorageError
from storage.repos import JOB_KINDS, JobInfo, JobKind, JobState

log = logging.getLogger("temper.worker")

_RETRY_S = 2.0  # wait after a database error before trying again


class JobError(Exception):
    """A job that cannot run as asked (bad parameters, missing model); its message is the job's error."""


def default_worker_id() -> str:
    """host-pid-random: unique per worker, readable in the jobs table."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class _Carried(TypedDict):
    """What an attempt carries over from the job's earlier ones: progress_to_json's keywords."""

    elapsed_offset: float
    trials_base: int | None
    onnxruntime_latency_s: float | None


def progress_to_json(
    progress: Any,
    *,
    elapsed_offset: float = 0.0,
    trials_base: int | None = None,
    onnxruntime_latency_s: float | None = None,
) -> dict[str, Any]:
    """A tuner.tune.Progress as the JSON a tuning job stores (infinities and NaN become null).

    The tuner counts the job's trials from the records there before the job began (`trials_base`,
    kept from the first attempt: TuneOptions.since), so an attempt that takes the job over goes on
    counting; `elapsed_offset` seconds were spent by the earlier attempts.
    """
    data: dict[str, Any] = progress.to_json()  # the one shape (tuner.progress.Progress)
    if trials_base is not None:
        data["trials_base"] = trials_base
    data["elapsed_s"] = float(progress.elapsed_s) + elapsed_offset
    if onnxruntime_latency_s is not None:
        data["onnxruntime_latency_s"] = onnxruntime_latency_s
    data["curve"] = [
        [n, latency, None if at is None else at + elapsed_offset] for n, latency, at in data["curve"]
    ]
    return data


@dataclass
class _Control:
    """What the heartbeat thread and the job share."""

    shutdown: threading.Event  # the worker is stopping: hand the job back
    done: threading.Event = field(default_factory=threading.Event)  # the job's work has ended
    halted: threading.Event = field(default_factory=threading.Event)  # cancelled or taken over
    stopped_early: bool = False

    def should_stop(self) -> bool:
        if self.halted.is_set() or self.shutdown.is_set():
            self.stopped_early = True
            return True
        return False


@dataclass(frozen=True)
class _Outcome:
    state: JobState
    error: str | None = None
    result: Any = None
    release: bool = False  # stopped by shutdown: back to the queue
    ended: bool = False  # the job was already ended (in the transaction that stored its result)


class _Lost(Exception):
    """The worker no longer owns the job (rolls back what it was about to commit)."""


class Worker:
    """Runs jobs from the database of `settings`; one job at a time."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str | None = None,
        *,
        kinds: tuple[JobKind, ...] = JOB_KINDS,
        db: SqlDatabase | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id or default_worker_id()
        self.kinds = kinds
        self.db = db if db is not None else SqlDatabase(settings.database_url)
        self._owns_db = db is None
        self.blobs = BlobStore(settings.blobs_dir)
        self._dask: Any = None  # service.executors.DaskExecutors, made on first use
        # what a compile job runs in its child process (a module-level function: it is pickled)
        self.compile_fn: Callable[[bytes, Any, str | None], bytes | str] = compile_artifact

    def close(self) -> None:
        if self._dask is not None:
            self._dask.close()
            self._dask = None
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the loop ------------------------------------------------------------------------------

    def run_forever(self, stop_event: threading.Event) -> None:
        """Claim and run jobs until `stop_event` is set; a running tuning job is then handed back."""
        log.info("worker %s started", self.worker_id)
        while not stop_event.is_set():
            try:
                worked = self.run_one(stop_event)
            except (SQLAlchemyError, StorageError) as exc:
                log.warning("worker %s: database error, retrying: %s", self.worker_id, exc)
                stop_event.wait(_RETRY_S)
                continue
            if not worked and not self.verify_records(stop_event):
                stop_event.wait(self.settings.job_poll_s)
        log.info("worker %s stopped", self.worker_id)

    def run_one(self, stop_event: threading.Event | None = None) -> bool:
        """Claim one job and run it to its end; False when there was nothing to claim."""
        with self.db.write_session() as s:
            job = repo.claim_job(
                s, worker_id=self.worker_id, lease_s=self.settings.worker_lease_s, kinds=self.kinds
            )
        if job is None:
            return False
        log.info("worker %s: %s job %s (attempt %d)", self.worker_id, job.kind, job.id, job.attempts)
        self._run(job, _Control(stop_event or threading.Event()))
        return True

    def verify_records(self, stop_event: threading.Event | None = None) -> bool:
        """Verify a batch of imported records of this worker's target (tuner.verify); False when none
        were waiting. Runs between jobs: a job never waits for it for longer than one batch."""
        from compiler.target import parse_target
        from tuner.verify import verify_pending

        target = parse_target(self.settings.target)
        if self.db.count_pending(target.key) == 0:
            return False
        builder, runner, close = self._measurers(self.settings.target)
        try:
            done = verify_pending(
                self.db,
                target,
                builder,
                runner,
                limit=self.settings.verify_batch,
                should_stop=None if stop_event is None else stop_event.is_set,
            )
        finally:
            close()
        log.info(
            "worker %s: verified %d and rejected %d imported record(s)",
            self.worker_id,
            done.verified,
            done.rejected,
        )
        return done.verified + done.rejected > 0

    # --- one job -------------------------------------------------------------------------------

    def _run(self, job: JobInfo, ctl: _Control) -> None:
        beat = threading.Thread(target=self._heartbeat, args=(job, ctl), name="temper-heartbeat", daemon=True)
        beat.start()
        try:
            outcome = self._compile(job, ctl) if job.kind == "compile" else self._tune(job, ctl)
        except (JobError, JobParamError, BlobError) as exc:
            outcome = _Outcome("failed", str(exc))
        except Exception as exc:
            outcome = self._failure(job, exc)
        finally:
            ctl.done.set()
            beat.join()
        self._end(job, outcome)

    def _failure(self, job: JobInfo, exc: Exception) -> _Outcome:
        from compiler.errors import CompilerError

        if isinstance(exc, CompilerError):
            return _Outcome("failed", str(exc))
        log.exception("worker %s: %s job %s failed", self.worker_id, job.kind, job.id)
        return _Outcome("failed", f"internal error: {type(exc).__name__}: {exc}")

    def _end(self, job: JobInfo, outcome: _Outcome) -> None:
        if outcome.ended:
            return
        with self.db.write_session() as s:
            if outcome.release:
                owned = repo.release_job(s, kind=job.kind, id=job.id, worker_id=self.worker_id)
            else:
                owned = repo.finish_job(
                    s,
                    kind=job.kind,
                    id=job.id,
                    worker_id=self.worker_id,
                    state=outcome.state,
                    error=outcome.error,
                    result=outcome.result,
                )
        if owned:
            ending = "released" if outcome.release else outcome.state
            log.info("worker %s: %s job %s %s", self.worker_id, job.kind, job.id, ending)
        else:
            log.warning("worker %s: lost %s job %s before it ended", self.worker_id, job.kind, job.id)

    def _heartbeat(self, job: JobInfo, ctl: _Control) -> None:
        interval = self.settings.worker_lease_s / 3
        while not ctl.done.wait(interval):
            try:
                with self.db.write_session() as s:
                    keep = repo.heartbeat(
                        s,
                        kind=job.kind,
                        id=job.id,
                        worker_id=self.worker_id,
                        lease_s=self.settings.worker_lease_s,
                    )
            except (SQLAlchemyError, StorageError) as exc:
                log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
                continue
            if not keep:
                ctl.halted.set()  # cancelled or taken over: stop as soon as possible
                return

    def _time_left(self, job: JobInfo) -> float:
        """Seconds the job may still run under TEMPER_JOB_TIMEOUT_S (counted from its first start)."""
        started = job.started_at or job.created_at
        spent = (datetime.now(UTC) - started).total_seconds() if started is not None else 0.0
        left = self.settings.job_timeout_s - max(0.0, spent)
        if left <= 0:
            raise JobError(f"the job ran past its time limit of {self.settings.job_timeout_s:g} s")
        return left

    def _model_bytes(self, job: JobInfo) -> bytes:
        with self.db.read_session() as s:
            model = repo.get_model(s, job.tenant_id, job.model_id, include_deleted=True)
        if model is None:
            raise JobError(f"model {job.model_id} no longer exists")
        return self.blobs.read_bytes(model.blob_key)

    # --- compile -------------------------------------------------------------------------------

    def _compile(self, job: JobInfo, ctl: _Control) -> _Outcome:
        from compiler.errors import CompilerError
        from compiler.runtime import read_artifact

        params = CompileParams.from_json(job.params)
        options = self._compile_options(params, self._overrides(params.overrides))
        url = self.settings.database_url if params.use_tuned else None
        seconds = min(self.settings.compile_timeout_s, self._time_left(job))
        data = self._in_child(self.compile_fn, self._model_bytes(job), options, url, seconds=seconds)
        if isinstance(data, str):
            raise CompilerError(data)
        if ctl.halted.is_set():
            return _Outcome("cancelled")
        if self.settings.artifact_key is not None:
            from compiler.runtime import sign_artifact

            data = sign_artifact(data, self.settings.artifact_key.get_secret_value().encode())
        key = self.blobs.put_bytes(data)
        manifest, _ = read_artifact(data)
        try:  # the artifact and the job's end commit together, and only while the job is still ours
            with self.db.write_session() as s:
                artifact = repo.create_artifact(
                    s,
                    tenant_id=job.tenant_id,
                    compilation_id=job.id,
                    sha256=key,
                    size=len(data),
                    blob_key=key,
                    manifest=manifest,
                )
                if not repo.finish_job(
                    s,
                    kind="compile",
                    id=job.id,
                    worker_id=self.worker_id,
                    state="succeeded",
                    result=artifact.id,
                ):
                    raise _Lost
        except _Lost:
            log.warning("worker %s: lost compile job %s before it ended", self.worker_id, job.id)
        else:
            log.info("worker %s: compile job %s succeeded: artifact %s", self.worker_id, job.id, artifact.id)
        return _Outcome("succeeded", ended=True)

    def _in_child(self, fn: Callable[..., Any], *args: Any, seconds: float) -> Any:
        """fn(*args) in a process of its own with the compile limits (service.sandbox): code
        generation runs LLVM, whose assertions abort the process they fail in, and a compile must
        cost only its job, never the worker (nor, for `temper serve`'s embedded worker, the API)."""
        from service.sandbox import SandboxCrash, run_limited

        try:
            return run_limited(
                fn,
                *args,
                seconds=seconds,
                memory_bytes=self.settings.compile_memory_bytes,
                what="the compiler",
            )
        except SandboxCrash as exc:
            raise JobError(str(exc)) from None

    def _overrides(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """{node: "record:ID" | trace JSON} -> {node: ScheduleChoice} (tuner.apply.override_choice:
        records and inline traces only; a server never reads a file a request names)."""
        from compiler.errors import CompilerError
        from tuner.apply import override_choice

        try:
            return {str(node): override_choice(str(node), spec, self.db) for node, spec in raw.items()}
        except CompilerError as exc:
            raise JobError(str(exc)) from None

    def _compile_options(self, params: CompileTarget, overrides: Mapping[str, Any]) -> Any:
        from compiler.pipeline import CompileOptions

        return CompileOptions(
            target=params.target or self.settings.target,
            opt_level=params.opt_level,
            shapes=dict(params.shapes),
            overrides=dict(overrides),
        )

    # --- tune ----------------------------------------------------------------------------------

    def _tune(self, job: JobInfo, ctl: _Control) -> _Outcome:
        from tuner.tune import TuneOptions, tune

        params = TuneParams.from_json(job.params)
        options = self._compile_options(params, {})
        model = self._model_bytes(job)
        previous = job.progress or {}
        # `trials` is what this job measures (as on the CLI); an attempt taking the job over counts
        # from the records there before the job began, so its earlier attempts' records are spent
        base = previous.get("trials_base")
        since = base if isinstance(base, int) else None
        reference = previous.get("onnxruntime_latency_s")  # measured once per job, by its first attempt
        if reference is None and not previous:
            reference = self._onnxruntime_latency(job, model, options.shapes)
        carried: _Carried = {
            "elapsed_offset": float(previous.get("elapsed_s") or 0.0),
            "trials_base": since,
            "onnxruntime_latency_s": reference,
        }
        budget = params.time_budget_s
        # the job's own budget, and never past the deployment's job time limit
        left = self._time_left(job)
        timeout = left if budget is None else min(left, max(0.0, budget - carried["elapsed_offset"]))
        topts = TuneOptions(
            trials=params.trials, since=since, timeout_s=timeout, batch=params.batch, seed=params.seed
        )
        builder, runner, close = self._measurers(options.target)
        try:
            final = tune(
                model,
                options,
                self.db,
                topts,
                builder=builder,
                runner=runner,
                on_progress=self._progress_writer(job, carried),
                should_stop=ctl.should_stop,
            )
        finally:
            close()
        result = progress_to_json(final, **carried)
        if ctl.stopped_early and ctl.halted.is_set():
            return _Outcome("cancelled", result=result)
        if ctl.stopped_early:
            return _Outcome("succeeded", release=True)
        return _Outcome("succeeded", result=result)

    def _onnxruntime_latency(self, job: JobInfo, model: bytes, shapes: Mapping[str, Any]) -> float | None:
        """onnxruntime's latency for the job's model on this machine (a tuning curve's reference
        line), timed in the sandbox before the search starts; None when it cannot be had."""
        from compiler.errors import CompilerError
        from service.profiling import onnxruntime_latency
        from service.sandbox import SandboxCrash, run_limited

        try:
            latency: float | None = run_limited(
                onnxruntime_latency,
                model,
                dict(shapes),
                seconds=min(self.settings.compile_timeout_s, self._time_left(job)),
                memory_bytes=self.settings.compile_memory_bytes,
                what="onnxruntime's timing",
            )
        except (CompilerError, SandboxCrash) as exc:
            log.warning("worker %s: job %s has no onnxruntime reference: %s", self.worker_id, job.id, exc)
            return None
        return latency

    def _progress_writer(self, job: JobInfo, carried: _Carried) -> Callable[[Any], None]:
        def write(progress: Any) -> None:
            try:
                with self.db.write_session() as s:
                    repo.update_progress(
                        s, id=job.id, progress=progress_to_json(progress, **carried), worker_id=self.worker_id
                    )
            except (SQLAlchemyError, StorageError) as exc:  # progress is advisory: the records are the truth
                log.warning("worker %s: progress not saved: %s", self.worker_id, exc)

        return write

    def _measurers(self, target_name: str) -> tuple[Any, Any, Callable[[], None]]:
        """Builder and runner: local processes, or the Dask cluster when one is configured."""
        from compiler.target import parse_target
        from tuner.measure import LocalBuilder, LocalRunner

        target = parse_target(target_name)
        if self.settings.dask_scheduler is None:
            builder = LocalBuilder(target)
            return builder, LocalRunner(), builder.close
        from service.executors import DaskExecutors, ExecutorError

        try:
            if self._dask is None:
                self._dask = DaskExecutors(self.settings.dask_scheduler)
            build, run = self._dask.executors(target)
        except ExecutorError as exc:
            raise JobError(str(exc)) from None
        return LocalBuilder(target, executor=build), LocalRunner(executor=run), lambda: None


def compile_artifact(model: bytes, options: Any, database_url: str | None) -> bytes | str:
    """A compile job's work (run in a child process): the artifact's bytes, using the tuning
    records of `database_url` (None: default schedules), or a CompilerError's message."""
    from compiler.errors import CompilerError
    from compiler.pipeline import compile_model
    from compiler.runtime import artifact_bytes
    from storage import tuned_schedules

    try:
        with tuned_schedules(database_url or None) as source:
            compiled = compile_model(model, options, source)
    except CompilerError as exc:  # sent back as its message: the job fails with exactly it
        return str(exc)
    return artifact_bytes(
        manifest=compiled.manifest, library=compiled.library, plan=compiled.plan, params=compiled.params
    )


# --- worker processes (`temper worker`) ----------------------------------------------------------


def run_workers(
    settings: Settings, processes: int = 1, *, once: bool = False, worker_id: str | None = None
) -> int:
    """Run `processes` workers, each in a process of its own (this one when 1), until SIGTERM or
    SIGINT (a running tuning job is handed back to the queue) or, with `once`, until no job is left.
    Returns an exit code: 0, or 1 when a worker process failed."""
    if processes <= 1:
        _work_here(settings, once, worker_id)
        return 0
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited threads or locks
    children = [
        ctx.Process(
            target=_process_main,
            args=(settings, once, f"{worker_id}-{k}" if worker_id else None),
            name=f"temper-worker-{k}",
        )
        for k in range(processes)
    ]
    for child in children:
        child.start()

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.is_alive() and child.pid is not None:
                os.kill(child.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for child in children:
            child.join()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if all(child.exitcode == 0 for child in children) else 1


def _process_main(settings: Settings, once: bool, worker_id: str | None) -> None:
    from tuner._measure_child import die_with_parent

    die_with_parent()  # a killed `temper worker` leaves no workers behind
    configure_logging()
    _work_here(settings, once, worker_id)


def _work_here(settings: Settings, once: bool, worker_id: str | None) -> None:
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second signal: stop now
            raise KeyboardInterrupt
        log.info("signal %s: finishing up (again to stop at once)", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with Worker(settings, worker_id) as worker:
            if once:
                while not stop.is_set() and worker.run_one(stop):
                    pass
            else:
                worker.run_forever(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def configure_logging(level: int = logging.INFO) -> None:
    """Log lines on stderr with time and origin (for worker processes; idempotent)."""
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
