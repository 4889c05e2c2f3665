"""Restarting the API process (a clean stop, or a crash) during a tuning job loses nothing: the job
completes after the restart, with every committed record kept and nothing measured twice."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from service.client import Client
from storage import repos as repo
from tests.models.builders import mlp
from tests.service.api.server import LiveServer

TRIALS = 24


def _records(server: LiveServer) -> list[tuple[str, str]]:
    with server.database() as db:
        return [(r.workload_key, r.trace_hash) for r in db.iter_records()]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_tuning_job_survives_an_api_restart(how: str, start_server: Callable[..., LiveServer]) -> None:
    server = start_server()
    key = server.create_key("acme")
    with Client(server.url, key, timeout=60) as client:
        model = client.upload_model(mlp(batch=2, sizes=(64, 32, 8)).SerializeToString())
        job = client.create_tuning_job(model.id, trials=TRIALS, batch=3)
        deadline = time.monotonic() + 180
        while True:  # wait until the job is well under way
            job = client.get_tuning_job(job.id)
            assert job.state in ("queued", "running"), job
            if job.progress is not None and job.progress.trials_done >= 6:
                break
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.2)

    code = server.stop(getattr(signal, how))
    with server.database() as db, db.read_session() as s:
        stopped = repo.get_job_for_worker(s, "tune", job.id)
    assert stopped is not None
    if how == "SIGTERM":
        assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
        assert "Application shutdown complete" in server.log_tail(), server.log_tail()
        assert stopped.state == "queued"  # the embedded worker handed the job back on the way out
    else:
        assert stopped.state == "running"  # the dead worker's lease will expire
    kept = _records(server)
    assert 6 <= len(kept) < TRIALS

    server.start()
    with Client(server.url, key, timeout=60) as client:
        done = client.wait_tuning_job(job.id, timeout=300, poll=0.5)
    assert done.state == "succeeded", done.error
    assert done.attempts == 2
    assert done.progress is not None and done.progress.trials_done == TRIALS and done.progress.finished
    records = _records(server)
    assert set(kept) <= set(records)  # nothing committed before the restart was lost
    assert len(records) == len(set(records)) == TRIALS  # nor measured twice
