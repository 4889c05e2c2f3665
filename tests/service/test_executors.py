"""Builds and measurements on a real Dask cluster: a `dask scheduler` and a single-threaded `dask
worker` tagged with this machine's target resource, started as local processes on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compiler.pipeline import CompileOptions
from compiler.target import parse_target
from service.config import get_settings
from service.executors import DaskExecutors, ExecutorError, resource_name
from service.worker import Worker
from storage import repos as repo
from tests.models.builders import mlp
from tuner.measure import LocalBuilder, LocalRunner, MeasureInput, measure
from tuner.space import default_trace
from tuner.task import extract_tasks

REPO = Path(__file__).resolve().parents[2]
MODEL = mlp(sizes=(64, 32, 8))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def dask_env() -> dict[str, str]:
    """What compose gives the Dask containers: temper importable, workers allowed child processes."""
    return {**os.environ, "PYTHONPATH": str(REPO), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}


def start_dask(log_dir: Path, workers: int = 1) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A scheduler and `workers` single-threaded workers offering this machine's target resource."""
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    dask = [sys.executable, "-m", "dask"]
    log = open(log_dir / "dask.log", "ab")  # noqa: SIM115  (kept open by the processes)
    common = {"cwd": REPO, "env": dask_env(), "stdout": log, "stderr": log, "start_new_session": True}
    procs.append(
        subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], **common
        )
    )
    wait_for_port(port, procs[0])
    address = f"tcp://127.0.0.1:{port}"
    tag = f"{resource_name('host')}=1"
    for k in range(workers):
        procs.append(
            subprocess.Popen(
                [
                    *dask,
                    "worker",
                    address,
                    "--nworkers",
                    "1",
                    "--nthreads",
                    "1",
                    "--resources",
                    tag,
                    "--no-dashboard",
                    "--name",
                    f"measure-{k}",
                    "--host",
                    "127.0.0.1",
                ],
                **common,
            )
        )
    return address, procs


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill the test cluster outright (process groups: nannies, workers and their measurers)."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.wait(30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    address, procs = start_dask(tmp_path_factory.mktemp("dask"))
    try:
        yield address
    finally:
        stop_all(procs)


def test_measurements_run_on_the_dask_worker_with_the_target_resource(cluster: str) -> None:
    target = parse_target("host")
    tasks = extract_tasks(MODEL.SerializeToString(), CompileOptions())
    inputs = [MeasureInput(task, default_trace(task.workload)) for task in tasks]
    with DaskExecutors(cluster, wait_for_workers_s=60) as dask:
        build, run = dask.executors(target)  # waits for the measuring worker to join
        assert dask.resources().get(resource_name(target), 0) >= 1
        results = measure(LocalBuilder(target, executor=build), LocalRunner(executor=run), inputs)
        ran_on = dask.client.run(lambda: os.getpid())  # the worker processes measured, not this one
    assert len(results) == len(inputs)
    for built, timed in results:
        assert built.error_kind is None, built.error_message
        assert timed.ok, timed.error_message
        assert all(s > 0 for s in timed.run_secs)
    assert os.getpid() not in ran_on.values()


def test_no_worker_for_the_target_is_a_clear_error(cluster: str) -> None:
    with DaskExecutors(cluster, wait_for_workers_s=0.5) as dask, pytest.raises(ExecutorError) as err:
        dask.executors("skylake-avx512")
    assert "target-skylake-avx512" in str(err.value) and "--resources" in str(err.value)


def test_unreachable_scheduler_is_a_clear_error() -> None:
    with pytest.raises(ExecutorError, match="cannot reach the Dask scheduler"):
        DaskExecutors(f"tcp://127.0.0.1:{free_port()}", timeout_s=1)


def test_a_tuning_job_measures_on_the_cluster(cluster: str, tmp_path: Path) -> None:
    settings = get_settings(
        data_dir=tmp_path / "data", database_url="", dask_scheduler=cluster, worker_lease_s=5, target="host"
    )
    with Worker(settings, "dask-user") as worker:
        data = MODEL.SerializeToString()
        key = worker.blobs.put_bytes(data)
        with worker.db.write_session() as s:
            tenant = repo.get_or_create_tenant(s, name="acme")
            model = repo.create_model(
                s, tenant_id=tenant.id, name="mlp", sha256=key, size=len(data), blob_key=key, summary={}
            )
            job = repo.create_job(
                s, kind="tune", tenant_id=tenant.id, model_id=model.id, params={"trials": 4, "batch": 2}
            )
        assert worker.run_one()
        with worker.db.read_session() as s:
            done = repo.get_job(s, "tune", tenant.id, job.id)
        records = list(worker.db.iter_records())
    assert done is not None and done.state == "succeeded", done
    assert len(records) == 4 and all(r.ok for r in records), [r.error_message for r in records]
    confirmation = done.progress["confirmation"]  # timed inside the model on the cluster's worker
    assert confirmation and not confirmation.get("error") and confirmation["tasks"], confirmation
    assert any(r.model_secs for r in records)
