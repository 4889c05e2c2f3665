"""docker-compose.yml without Docker: the same commands, environments and healthchecks, as local processes.

No container engine runs here, so the test reads docker-compose.yml and starts what each service would
run, in the order of its `depends_on`, on loopback: the migration, the Dask scheduler, both measuring
Dask workers (tagged with this machine's target resource), `temper serve` and `temper worker`. Host
names and ports are mapped to 127.0.0.1 and free ports; PostgreSQL is the server already on
127.0.0.1:5432, in a fresh schema. Each service must pass its own compose healthcheck. Then a small
tuning job goes through the API, its measurements run on the Dask workers, and a compilation with the
tuned records yields an artifact that matches onnxruntime.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import yaml

from compiler.runtime import load
from tests.models.builders import mlp
from tests.service.test_executors import free_port
from tests.storage.conftest import pg_url, pg_user  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
EXTERNAL = {"postgres"}  # already running on loopback: not started by the test
MODEL = mlp(sizes=(64, 32, 8))
TERMINAL = {"succeeded", "failed", "cancelled"}


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def start_order(services: dict[str, Any]) -> list[str]:
    """Services so that each comes after everything it depends on."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle {(*path, name)}"
        if name in order:
            return
        for dep in services[name].get("depends_on") or {}:
            visit(dep, (*path, name))
        order.append(name)

    for name in services:
        visit(name, ())
    return order


def test_compose_describes_the_cluster() -> None:
    services = load_compose()["services"]
    assert {"postgres", "migrate", "api", "worker", "scheduler", "dask-worker-1", "dask-worker-2"} <= set(
        services
    )
    for name, service in services.items():
        if name != "migrate":
            assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    assert services["migrate"]["command"] == ["temper", "db", "upgrade"]
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        env = services[name]["environment"]
        assert env["TEMPER_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["TEMPER_DASK_SCHEDULER"] == "tcp://scheduler:8786"
    assert services["api"]["command"][:2] == ["temper", "serve"]
    assert services["api"]["environment"]["TEMPER_EMBEDDED_WORKER"] == "false"
    assert services["worker"]["command"] == ["temper", "worker"]
    images = {services[n].get("image") for n in services if n not in EXTERNAL}
    assert images == {"temper:latest"}  # one image for all
    for name in ("dask-worker-1", "dask-worker-2"):
        assert services[name]["environment"]["DASK_DISTRIBUTED__WORKER__DAEMON"] == "False"
        assert (
            "--resources" in services[name]["command"][-1] and "--nthreads 1" in services[name]["command"][-1]
        )
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "FROM python:3.11" in dockerfile and "gcc libc6-dev" in dockerfile and "temper" in dockerfile


@dataclass
class LocalCompose:
    """Runs compose services as local processes; ports and host names mapped to loopback."""

    workdir: Path
    database_url: str
    services: dict[str, Any]
    ports: dict[str, dict[int, int]] = field(default_factory=dict)  # service -> container port -> local
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, service in self.services.items():
            text = yaml.safe_dump({"c": service.get("command"), "h": service.get("healthcheck")})
            found = {int(p) for p in re.findall(r"(?<![\d.])(8\d{3})(?!\d)", text)}
            self.ports[name] = {p: free_port() for p in sorted(found)}

    @property
    def scheduler(self) -> str:
        return f"tcp://127.0.0.1:{self.ports['scheduler'][8786]}"

    def url(self, service: str, port: int) -> str:
        return f"http://127.0.0.1:{self.ports[service][port]}"

    def localize(self, service: str, text: str) -> str:
        """A command or value as it runs here: compose escapes undone, hosts and ports on loopback."""
        text = text.replace("$$", "$").replace("tcp://scheduler:8786", self.scheduler)
        text = text.replace("0.0.0.0", "127.0.0.1")
        text = re.sub(r"(^|\s):(8\d{3})\b", r"\g<1>127.0.0.1:\2", text)  # ":8787" listens on all addresses
        for container, local in self.ports[service].items():
            text = re.sub(rf"(?<![\d.]){container}(?!\d)", str(local), text)
        return text

    def env(self, service: str) -> dict[str, str]:
        declared = {
            k: self.localize(service, str(v))
            for k, v in (self.services[service].get("environment") or {}).items()
        }
        path = (
            f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # temper, dask, python
        )
        env = {**os.environ, **declared, "PATH": path, "PYTHONPATH": str(REPO)}
        if "TEMPER_DATABASE_URL" in declared:
            env["TEMPER_DATABASE_URL"] = self.database_url  # a fresh schema on the local server
            env["TEMPER_DATA_DIR"] = str(self.workdir / "data")  # the shared volume
        return env

    def command(self, service: str) -> list[str]:
        return [self.localize(service, str(arg)) for arg in self.services[service]["command"]]

    def start(self, service: str) -> None:
        log = open(self.workdir / f"{service}.log", "ab")  # noqa: SIM115  (the process writes it)
        self.procs[service] = subprocess.Popen(
            self.command(service),
            cwd=REPO,
            env=self.env(service),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )

    def run_to_completion(self, service: str, timeout: float = 120) -> None:
        done = subprocess.run(
            self.command(service),
            cwd=REPO,
            env=self.env(service),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{service}: {done.stdout}\n{done.stderr}"

    def wait_healthy(self, service: str, timeout: float = 120) -> None:
        test = self.services[service]["healthcheck"]["test"]
        if test[0] == "CMD-SHELL":
            argv = ["sh", "-c", self.localize(service, test[1])]
        else:
            assert test[0] == "CMD", test
            argv = [self.localize(service, str(a)) for a in test[1:]]
        deadline = time.monotonic() + timeout
        while True:
            proc = self.procs.get(service)
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{service} exited with {proc.returncode}:\n{self.log(service)}")
            check = subprocess.run(argv, cwd=REPO, env=self.env(service), capture_output=True, timeout=60)
            if check.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{service} is not healthy: {check.stderr!r}\n{self.log(service)}")
            time.sleep(0.5)

    def log(self, service: str) -> str:
        path = self.workdir / f"{service}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> dict[str, int]:
        """SIGTERM every process (dependents first), as `docker compose down` does; their exit codes."""
        for proc in reversed(self.procs.values()):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in reversed(self.procs.items()):
            try:
                codes[name] = proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                codes[name] = proc.wait()
        return codes


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[LocalCompose]:  # noqa: F811
    services = load_compose()["services"]
    stack = LocalCompose(tmp_path, pg_url, services)
    try:
        for name in start_order(services):
            if name in EXTERNAL:
                continue
            if services[name].get("restart") == "no":
                stack.run_to_completion(name)  # the migration
                continue
            stack.start(name)
            stack.wait_healthy(name)
        yield stack
    finally:
        stack.stop()


def _wait_job(client: httpx.Client, path: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(path)
        assert response.status_code == 200, response.text
        job = response.json()
        if job["state"] in TERMINAL:
            return job
        assert time.monotonic() < deadline, f"{path} still {job['state']}"
        time.sleep(0.3)


def test_a_tuning_job_runs_through_the_compose_services(cluster: LocalCompose) -> None:
    keys = subprocess.run(
        ["temper", "keys", "create", "--tenant", "deploy"],
        cwd=REPO,
        env=cluster.env("api"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert keys.returncode == 0, keys.stderr
    key = keys.stdout.split()[-1]
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=cluster.url("api", 8000), headers=headers, timeout=60) as client:
        data = MODEL.SerializeToString()
        upload = client.post("/v1/models", files={"file": ("mlp.onnx", data, "application/octet-stream")})
        assert upload.status_code == 201, upload.text
        model_id = upload.json()["id"]

        submitted = client.post("/v1/tuning-jobs", json={"model_id": model_id, "trials": 4, "batch": 2})
        assert submitted.status_code == 202, submitted.text
        tuned = _wait_job(client, f"/v1/tuning-jobs/{submitted.json()['id']}")
        assert tuned["state"] == "succeeded", (tuned, cluster.log("worker"))
        assert tuned["progress"]["trials_done"] == 4 and tuned["progress"]["finished"]
        # the finalists were timed inside the model, on the measuring worker
        confirmation = tuned["progress"]["confirmation"]
        assert confirmation and not confirmation.get("error") and confirmation["tasks"], confirmation

        compiled = client.post("/v1/compilations", json={"model_id": model_id, "use_tuned": True})
        assert compiled.status_code == 202, compiled.text
        compilation = _wait_job(client, f"/v1/compilations/{compiled.json()['id']}")
        assert compilation["state"] == "succeeded", (compilation, cluster.log("worker"))
        artifact = client.get(f"/v1/artifacts/{compilation['artifact_id']}")
        assert artifact.status_code == 200
        body = artifact.content
        assert hashlib.sha256(body).hexdigest() == artifact.headers["X-Content-SHA256"]

    path = cluster.workdir / "mlp.temper"
    path.write_bytes(body)
    module = load(path)
    assert {k["schedule"]["source"] for k in module.manifest["kernels"]} == {"record"}
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    want = ort.InferenceSession(data).run(None, {"input": x})[0]
    np.testing.assert_allclose(module.run({"input": x})["logits"], want, rtol=1e-4, atol=1e-5)

    from distributed import Client

    with Client(cluster.scheduler, timeout=30, set_as_default=False) as dask:
        executed = dask.run(lambda dask_worker: dask_worker.state.executed_count)
    assert sum(executed.values()) >= 8  # the 4 candidates were built and measured on the Dask workers

    codes = cluster.stop()
    # both shut down cleanly (uvicorn re-raises SIGTERM after its graceful shutdown: 143 in Docker)
    assert codes["worker"] == 0 and codes["api"] in (0, -signal.SIGTERM), {k: cluster.log(k) for k in codes}
    assert "Application shutdown complete" in cluster.log("api")
