"""Processes end with their parent: a `temper serve` or `temper worker` killed with SIGKILL in the
middle of a tuning job leaves no forkserver, resource tracker, builder or measuring process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.models.builders import small_conv_model
from tests.service.api.server import REPO, LiveServer

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def session_members(sid: int) -> list[str]:
    """Live (not zombie) processes of session `sid`, as 'pid command' lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            found.append(f"{entry.name} ppid={fields[1]} {cmdline[:90]}")
    return found


def wait_until_empty(sid: int, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    left = session_members(sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = session_members(sid)
    return left


def _tune_until_measuring(server: LiveServer) -> None:
    key = server.create_key("alice")
    with httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
        data = small_conv_model().SerializeToString()
        model = http.post("/v1/models", files={"file": ("m.onnx", data, "application/octet-stream")}).json()
        job = http.post("/v1/tuning-jobs", json={"model_id": model["id"], "trials": 400, "batch": 4}).json()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            progress = http.get(f"/v1/tuning-jobs/{job['id']}").json().get("progress") or {}
            if progress.get("trials_done", 0) >= 4:
                return
            time.sleep(0.3)
    raise AssertionError(f"tuning never got going:\n{server.log_tail()}")


def test_a_killed_server_leaves_no_process_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = LiveServer(data, {"TEMPER_DATA_DIR": str(data), "TEMPER_JOB_POLL_S": "0.2"}).start()
    try:
        _tune_until_measuring(server)
        assert server.proc is not None
        sid = server.proc.pid
        assert len(session_members(sid)) > 1  # the server has helpers: forkserver, tracker, pools
        os.kill(sid, signal.SIGKILL)
        server.proc.wait(10)
        left = wait_until_empty(sid)
        assert left == [], left
    finally:
        server.stop()


def test_a_killed_worker_leaves_no_process_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPER_")}
    env |= {"TEMPER_DATA_DIR": str(data), "TEMPER_JOB_POLL_S": "0.2", "TEMPER_EMBEDDED_WORKER": "false"}
    server = LiveServer(data, {k: v for k, v in env.items() if k.startswith("TEMPER_")}).start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--processes", "2"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _tune_until_measuring(server)
        assert len(session_members(worker.pid)) > 2
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        left = wait_until_empty(worker.pid)
        assert left == [], left
    finally:
        if worker.poll() is None:
            worker.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
        server.stop()
