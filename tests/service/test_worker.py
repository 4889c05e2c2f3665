"""Workers run jobs from the database (no HTTP): compile and tune to completion, user errors as failed
jobs, cancel while running, a clean stop hands the job back, several worker processes share a queue,
and a worker killed mid-tuning leaves its job to another that finishes it without losing a record."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from pydantic import SecretStr

from compiler.runtime import load
from service.config import Settings, get_settings
from service.worker import Worker, progress_to_json
from storage import SqlDatabase
from storage import repos as repo
from tests.models.builders import mlp
from tests.storage.conftest import db_url, pg_url, pg_user, sqlite_url  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
MODEL = mlp(sizes=(64, 32, 8))


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:  # noqa: F811
    return get_settings(
        data_dir=tmp_path / "data", database_url=db_url, worker_lease_s=1.5, job_poll_s=0.1, target="host"
    )


@pytest.fixture
def worker(settings: Settings) -> Iterator[Worker]:
    with Worker(settings, "test-worker") as w:
        yield w


def _submit(w: Worker, kind: repo.JobKind, params: dict[str, Any], data: bytes | None = None) -> repo.JobInfo:
    data = MODEL.SerializeToString() if data is None else data
    key = w.blobs.put_bytes(data)
    with w.db.write_session() as s:
        tenant = repo.get_or_create_tenant(s, name="acme")
        model = repo.create_model(
            s, tenant_id=tenant.id, name="mlp", sha256=key, size=len(data), blob_key=key, summary={}
        )
        return repo.create_job(s, kind=kind, tenant_id=tenant.id, model_id=model.id, params=params)


def _get(db: SqlDatabase, job: repo.JobInfo) -> repo.JobInfo:
    with db.read_session() as s:
        got = repo.get_job(s, job.kind, job.tenant_id, job.id)
    assert got is not None
    return got


def _wait(what: str, check: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _records(db: SqlDatabase) -> dict[int, tuple[str, str]]:
    return {r.id: (r.workload_key, r.trace_hash) for r in db.iter_records()}  # type: ignore[misc]


def _check_artifact(w: Worker, job: repo.JobInfo) -> dict[str, Any]:
    """The artifact blob is intact, runs, and matches onnxruntime; returns its manifest."""
    assert job.artifact_id is not None
    with w.db.read_session() as s:
        artifact = repo.get_artifact(s, job.tenant_id, job.artifact_id)
    assert artifact is not None and artifact.compilation_id == job.id
    data = w.blobs.read_bytes(artifact.blob_key)
    assert hashlib.sha256(data).hexdigest() == artifact.sha256 and len(data) == artifact.size
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    got = load(w.blobs.path(artifact.blob_key)).run({"input": x})["logits"]
    want = ort.InferenceSession(MODEL.SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return artifact.manifest


def test_tune_then_compile_with_the_tuned_records(worker: Worker) -> None:
    tune_job = _submit(worker, "tune", {"trials": 4, "batch": 2})
    assert worker.run_one() is True
    tuned = _get(worker.db, tune_job)
    assert tuned.state == "succeeded" and tuned.error is None and tuned.attempts == 1
    progress = tuned.progress
    assert progress is not None and progress["finished"] and progress["trials_done"] == 4
    assert progress["trials_total"] == 4 and progress["eta_s"] is None
    assert [t["name"] for t in progress["tasks"]] and all(t["trials"] >= 1 for t in progress["tasks"])
    assert progress["curve"][-1][0] == 4 and progress["estimated_latency_s"] > 0
    times = [at for _, _, at in progress["curve"]]
    assert all(at is not None for at in times) and times == sorted(times)  # the curve against wall time
    assert progress["default_latency_s"] >= progress["estimated_latency_s"] > 0  # tuned never slower
    assert all(t["curve"] for t in progress["tasks"])  # every task's best, as it improved
    # onnxruntime's latency for the same model here, timed before the search: the curve's reference
    assert progress["onnxruntime_latency_s"] is not None and progress["onnxruntime_latency_s"] > 0
    assert len(_records(worker.db)) == 4

    compile_job = _submit(worker, "compile", {"use_tuned": True, "opt_level": 3})
    assert worker.run_one() is True
    assert worker.run_one() is False  # the queue is empty
    done = _get(worker.db, compile_job)
    assert done.state == "succeeded" and done.error is None
    manifest = _check_artifact(worker, done)
    assert {k["schedule"]["source"] for k in manifest["kernels"]} == {"record"}


def test_each_tuning_job_measures_its_own_budget(worker: Worker) -> None:
    first = _submit(worker, "tune", {"trials": 2, "batch": 2})
    assert worker.run_one()
    second = _submit(worker, "tune", {"trials": 3, "batch": 2})
    assert worker.run_one()
    assert len(_records(worker.db)) == 5  # not "3 in all, 2 of them there already"
    progress = _get(worker.db, second).progress
    assert progress is not None and _get(worker.db, first).state == "succeeded"
    assert (progress["trials_done"], progress["trials_total"], progress["trials_base"]) == (3, 3, 2)
    assert progress["curve"][-1][0] == 3
    assert progress["stop_reason"] == "budget: 3 trial(s) measured"  # as `temper tune` prints it


def test_compile_without_tuned_records_and_with_an_override(worker: Worker) -> None:
    _submit(worker, "tune", {"trials": 2, "batch": 2})
    assert worker.run_one()
    record = next(r for r in worker.db.iter_records() if r.ok)
    untuned = _submit(worker, "compile", {"use_tuned": False})
    assert worker.run_one()
    manifest = _check_artifact(worker, _get(worker.db, untuned))
    assert {k["schedule"]["source"] for k in manifest["kernels"]} == {"default"}
    node = next(k["nodes"][0] for k in manifest["kernels"] if k["workload_key"] == record.workload_key)
    pinned = _submit(worker, "compile", {"use_tuned": False, "overrides": {node: f"record:{record.id}"}})
    assert worker.run_one()
    manifest = _check_artifact(worker, _get(worker.db, pinned))
    by_key = {k["workload_key"]: k["schedule"] for k in manifest["kernels"]}
    assert by_key[record.workload_key]["source"] == "override"
    assert by_key[record.workload_key]["record_id"] == record.id


@pytest.mark.parametrize(
    ("params", "data", "message"),
    [
        ({}, b"this is not an onnx model", "onnx"),
        ({"overrides": {"fc1": "record:999999"}}, None, "no tuning record 999999"),
        ({"overrides": {"fc1": "/etc/passwd"}}, None, "must be 'record:ID' or a trace object"),
        ({"overrides": {"fcX": {"version": 1, "instructions": []}}}, None, "no ONNX node and no kernel"),
        ({"shapes": {"input": [0, 64]}}, None, "positive integers"),
        ({"opt_level": 9}, None, "opt level"),
        ({"target": "no-such-cpu"}, None, "no-such-cpu"),
    ],
)
def test_user_errors_fail_the_job_with_their_message(
    worker: Worker, params: dict[str, Any], data: bytes | None, message: str
) -> None:
    job = _submit(worker, "compile", params, data)
    assert worker.run_one()
    failed = _get(worker.db, job)
    assert failed.state == "failed" and failed.artifact_id is None
    assert message.lower() in (failed.error or "").lower()
    assert "internal error" not in (failed.error or "")


def test_a_compiler_crash_fails_only_its_job(worker: Worker) -> None:
    """Code generation runs in a child process: an abort there (as an LLVM assertion makes) fails the
    job with a clear error, stores nothing, and the worker goes on with the next job."""
    from tests.service.crashing import abort_compile

    real = worker.compile_fn
    worker.compile_fn = abort_compile
    crashed = _submit(worker, "compile", {})
    blobs = sorted(p for p in Path(worker.settings.blobs_dir).rglob("*") if p.is_file())
    assert worker.run_one()
    got = _get(worker.db, crashed)
    assert got.state == "failed" and "the compiler died" in (got.error or "")
    assert got.artifact_id is None
    assert sorted(p for p in Path(worker.settings.blobs_dir).rglob("*") if p.is_file()) == blobs
    worker.compile_fn = real
    fine = _submit(worker, "compile", {})
    assert worker.run_one()
    assert _get(worker.db, fine).state == "succeeded"


def test_bad_tuning_parameters_fail_the_job(worker: Worker) -> None:
    job = _submit(worker, "tune", {"trials": 0})
    assert worker.run_one()
    failed = _get(worker.db, job)
    assert failed.state == "failed" and "trials must be a positive integer" in (failed.error or "")


def _run_in_thread(w: Worker) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=w.run_forever, args=(stop,), daemon=True)
    thread.start()
    return thread, stop


def test_cancel_while_running(worker: Worker) -> None:
    job = _submit(worker, "tune", {"trials": 200, "batch": 2})
    thread, stop = _run_in_thread(worker)
    try:
        _wait("the first measurements", lambda: len(_records(worker.db)) >= 2)
        with worker.db.write_session() as s:
            flagged = repo.request_cancel(s, kind="tune", tenant_id=job.tenant_id, id=job.id)
        assert flagged is not None and flagged.cancel_requested
        _wait("the cancel", lambda: _get(worker.db, job).state == "cancelled", timeout=60)
    finally:
        stop.set()
        thread.join(60)
    cancelled = _get(worker.db, job)
    assert cancelled.progress is not None and cancelled.progress["trials_done"] < 200
    assert len(_records(worker.db)) < 200


def test_a_stopped_worker_hands_its_job_back(worker: Worker, settings: Settings) -> None:
    job = _submit(worker, "tune", {"trials": 6, "batch": 2})
    thread, stop = _run_in_thread(worker)
    try:
        _wait("the first measurements", lambda: len(_records(worker.db)) >= 2)
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    released = _get(worker.db, job)
    assert released.state == "queued" and released.worker_id is None and released.attempts == 1
    before = _records(worker.db)
    with Worker(settings, "second") as other:
        assert other.run_one()  # at once: no lease to wait for
    done = _get(worker.db, job)
    assert done.state == "succeeded" and done.worker_id == "second" and done.attempts == 2
    after = _records(worker.db)
    assert before.items() <= after.items() and len(after) == 6
    assert len(set(after.values())) == len(after)  # nothing measured twice


def _temper(settings: Settings, *args: str, **kw: Any) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TEMPER_DATA_DIR": str(settings.data_dir),
        "TEMPER_DATABASE_URL": settings.database_url,
        "TEMPER_WORKER_LEASE_S": str(settings.worker_lease_s),
        "TEMPER_JOB_POLL_S": "0.1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the kill reaches its builder and measurers too
        **kw,
    )


def test_several_worker_processes_share_the_queue(worker: Worker, settings: Settings) -> None:
    jobs = [_submit(worker, "compile", {"use_tuned": False}) for _ in range(4)]
    proc = _temper(settings, "worker", "--processes", "2", "--once")
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert "2 worker process(es)" in stderr
    for job in jobs:
        done = _get(worker.db, job)
        assert done.state == "succeeded" and done.attempts == 1, done
        _check_artifact(worker, done)


def test_a_killed_worker_is_taken_over_and_no_record_is_lost(worker: Worker, settings: Settings) -> None:
    job = _submit(worker, "tune", {"trials": 8, "batch": 2})
    proc = _temper(settings, "worker", "--id", "doomed")
    try:
        _wait("the doomed worker's first records", lambda: len(_records(worker.db)) >= 3, timeout=180)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    before = _records(worker.db)
    orphan = _get(worker.db, job)
    assert orphan.state == "running" and orphan.worker_id == "doomed"

    _wait("the lease to expire and the job to be taken over", worker.run_one, timeout=60)
    done = _get(worker.db, job)
    assert done.state == "succeeded" and done.worker_id == "test-worker" and done.attempts == 2
    after = _records(worker.db)
    assert before.items() <= after.items()  # every committed record is still there
    assert len(after) == 8  # the rest of the budget, not a fresh one
    assert len(set(after.values())) == len(after)  # no candidate measured twice
    assert done.progress is not None and done.progress["trials_done"] == 8


def test_progress_json_has_no_infinities() -> None:
    from tuner.tune import Progress, TaskReport

    inf = float("inf")
    progress = Progress(1, 8, 2.0, inf, [TaskReport("k", "key", 1, 100, 1, inf, inf)], [(1, inf, 1.5)])
    data = progress_to_json(progress, elapsed_offset=3.0)
    assert data["elapsed_s"] == 5.0 and data["estimated_latency_s"] is None and data["eta_s"] == 14.0
    assert data["tasks"][0]["best_secs"] is None and data["tasks"][0]["best_gflops"] == 0.0
    assert data["curve"] == [[1, None, 4.5]]  # each point's time counts the earlier attempts' too


def test_artifacts_are_signed_with_the_deployment_key(settings: Settings) -> None:
    from compiler.runtime import ArtifactError

    signed_settings = settings.model_copy(update={"artifact_key": SecretStr("deployment secret")})
    with Worker(signed_settings, "signing-worker") as w:
        job = _submit(w, "compile", {})
        assert w.run_one()
        done = _get(w.db, job)
        assert done.state == "succeeded", done.error
        with w.db.read_session() as s:
            artifact = repo.get_artifact(s, done.tenant_id, done.artifact_id or "")
        assert artifact is not None
        path = w.blobs.path(artifact.blob_key)
        load(path, key=b"deployment secret")
        with pytest.raises(ArtifactError, match="does not match"):
            load(path, key=b"a guess")


def test_a_job_past_its_time_limit_fails(settings: Settings) -> None:
    limited = settings.model_copy(update={"job_timeout_s": 0.001})
    with Worker(limited, "hurried-worker") as w:
        job = _submit(w, "compile", {})
        time.sleep(0.01)
        assert w.run_one()
        done = _get(w.db, job)
        assert done.state == "failed" and "time limit" in (done.error or "")
