"""HTTP load benchmark: concurrent clients uploading models, querying jobs and downloading artifacts.

    python -m bench.load [--clients 20] [--duration 60] [--json OUT] [--markdown]
    python -m bench.load --url http://host:8000 --api-key KEY      # an already running server

Without --url, a `temper serve` process is started on a free loopback port with a fresh data
directory (SQLite, embedded worker), keys are created for four tenants, and one compilation and one
small tuning job are run first so there are jobs to query and an artifact to download. Then every
client (one asyncio task with its own connection pool) loops for --duration seconds over a fixed mix
of requests. Reported: requests/s, p50/p99 latency and errors, overall and per request kind. An error
is a transport failure, a status other than the expected one, or a download whose sha256 is not the
one in its X-Content-SHA256 header.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
TENANTS = 4

# (request kind, weight): the mix each client draws from
MIX: tuple[tuple[str, int], ...] = (
    ("upload_model", 10),
    ("list_models", 15),
    ("get_model", 15),
    ("list_jobs", 10),
    ("get_compilation", 10),
    ("get_tuning_job", 10),
    ("download_artifact", 20),
    ("artifact_manifest", 10),
)


@dataclass
class Fixture:
    """What the clients of one tenant query: its key, a model, jobs and an artifact."""

    key: str
    model_id: str
    compilation_id: str
    tuning_job_id: str
    artifact_id: str


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    examples: list[str] = field(default_factory=list)

    def error(self, kind: str, what: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < 10:
            self.examples.append(f"{kind}: {what}")


def _model_bytes() -> bytes:
    sys.path.insert(0, str(REPO))
    from tests.models.builders import mlp

    return mlp(batch=1, sizes=(64, 32, 8)).SerializeToString()


# --- the server -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalServer:
    """`temper serve` in a child process (its own session, so its helpers stop with it)."""

    def __init__(self, data_dir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPER_")}
        self.env.update({"TEMPER_DATA_DIR": str(data_dir), "TEMPER_JOB_POLL_S": "0.2"})
        self.log = open(data_dir.parent / "server.log", "ab")  # noqa: SIM115  (closed in stop)
        command = [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        self.proc = subprocess.Popen(
            command, cwd=REPO, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not start in 60 s")

    def create_keys(self, n: int) -> list[str]:
        code = (
            "import sys\n"
            "from service.config import get_settings\n"
            "from storage import SqlDatabase, repos as repo\n"
            "with SqlDatabase(get_settings().database_url) as db, db.write_session() as s:\n"
            f"    print(' '.join(repo.create_api_key(s, tenant_name=f'load-{{i}}')[0] for i in range({n})))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=self.env, capture_output=True, text=True
        )
        if out.returncode != 0:
            raise RuntimeError(f"cannot create keys: {out.stderr.strip()}")
        return out.stdout.split()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # stray helper processes
        self.log.close()


# --- setup: data to query -----------------------------------------------------------------------------


def _prepare(url: str, key: str, model: bytes) -> Fixture:
    """Upload, tune briefly, compile: the jobs and the artifact the clients will query."""
    sys.path.insert(0, str(REPO))
    from service.client import Client

    with Client(url, key, timeout=600) as client:
        uploaded = client.upload_model(model, name="load")
        tune = client.wait_tuning_job(
            client.create_tuning_job(uploaded.id, trials=2, batch=2).id, timeout=600
        )
        comp = client.wait_compilation(client.create_compilation(uploaded.id).id, timeout=600)
        if comp.artifact_id is None:
            raise RuntimeError(f"setup compilation {comp.state}: {comp.error}")
        return Fixture(key, uploaded.id, comp.id, tune.id, comp.artifact_id)


# --- the load -----------------------------------------------------------------------------------------


def _call(
    http: httpx.AsyncClient, kind: str, fixture: Fixture, model: bytes, rng: random.Random
) -> tuple[Awaitable[httpx.Response], int]:
    """The request of one kind (not sent until awaited) and the status it must answer with."""
    if kind == "upload_model":
        return http.post("/v1/models", files={"file": ("load.onnx", model, "application/octet-stream")}), 201
    path = {
        "list_models": "/v1/models",
        "get_model": f"/v1/models/{fixture.model_id}",
        "list_jobs": rng.choice(("/v1/compilations", "/v1/tuning-jobs")),
        "get_compilation": f"/v1/compilations/{fixture.compilation_id}",
        "get_tuning_job": f"/v1/tuning-jobs/{fixture.tuning_job_id}",
        "download_artifact": f"/v1/artifacts/{fixture.artifact_id}",
        "artifact_manifest": f"/v1/artifacts/{fixture.artifact_id}/manifest",
    }[kind]
    return http.get(path), 200


async def _client(url: str, fixture: Fixture, model: bytes, stop_at: float, stats: Stats, seed: int) -> None:
    rng = random.Random(seed)
    kinds, weights = zip(*MIX, strict=True)
    headers = {"Authorization": f"Bearer {fixture.key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
        while time.monotonic() < stop_at:
            kind = rng.choices(kinds, weights)[0]
            request, expect = _call(http, kind, fixture, model, rng)
            start = time.perf_counter()
            try:
                response = await request
            except httpx.HTTPError as exc:
                stats.error(kind, f"{type(exc).__name__}: {exc}")
                continue
            stats.latencies[kind].append(time.perf_counter() - start)
            if response.status_code != expect:
                stats.error(kind, f"HTTP {response.status_code}: {response.text[:200]}")
            elif kind == "download_artifact" and (
                hashlib.sha256(response.content).hexdigest() != response.headers.get("X-Content-SHA256")
            ):
                stats.error(kind, "sha256 mismatch")


async def _run(
    url: str, fixtures: list[Fixture], model: bytes, clients: int, duration: float
) -> tuple[Stats, float]:
    stats = Stats()
    start = time.monotonic()
    stop_at = start + duration
    await asyncio.gather(
        *(_client(url, fixtures[i % len(fixtures)], model, stop_at, stats, seed=i) for i in range(clients))
    )
    return stats, time.monotonic() - start


# --- the report ---------------------------------------------------------------------------------------


def _summary(samples: list[float], errors: int, elapsed: float) -> dict[str, Any]:
    ordered = sorted(samples)

    def pct(p: float) -> float | None:
        if not ordered:
            return None
        return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1e3, 2)

    return {
        "requests": len(samples) + errors,
        "requests_per_s": round((len(samples) + errors) / elapsed, 1),
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "mean_ms": round(statistics.fmean(ordered) * 1e3, 2) if ordered else None,
        "errors": errors,
    }


def report(stats: Stats, elapsed: float, args: argparse.Namespace, server: str) -> dict[str, Any]:
    every = [s for samples in stats.latencies.values() for s in samples]
    result = {
        "benchmark": "load",
        "server": server,
        "clients": args.clients,
        "duration_s": round(elapsed, 2),
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "overall": _summary(every, sum(stats.errors.values()), elapsed),
        "by_kind": {
            kind: _summary(stats.latencies.get(kind, []), stats.errors.get(kind, 0), elapsed)
            for kind, _ in MIX
        },
        "error_examples": stats.examples,
    }
    return result


def print_table(result: dict[str, Any], markdown: bool) -> None:
    rows = [("all", result["overall"]), *result["by_kind"].items()]
    columns = ("requests", "requests_per_s", "p50_ms", "p99_ms", "errors")
    if markdown:
        print("| kind | " + " | ".join(columns) + " |")
        print("|---" * (len(columns) + 1) + "|")
        for name, row in rows:
            print(f"| {name} | " + " | ".join(str(row[c]) for c in columns) + " |")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("kind", *columns, title=f"{result['clients']} clients, {result['duration_s']} s")
    for name, row in rows:
        table.add_row(name, *("-" if row[c] is None else str(row[c]) for c in columns))
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="an already running server (default: start one here)")
    parser.add_argument("--api-key", help="key for --url (one tenant)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    if args.url and not args.api_key:
        parser.error("--url needs --api-key")

    model = _model_bytes()
    server: LocalServer | None = None
    tmp = tempfile.TemporaryDirectory(prefix="temper-load-")
    try:
        if args.url:
            url, keys = args.url.rstrip("/"), [args.api_key]
        else:
            data_dir = Path(tmp.name) / "data"
            server = LocalServer(data_dir)
            url, keys = server.url, server.create_keys(TENANTS)
        print(f"preparing jobs and artifacts on {url} ...", file=sys.stderr)
        fixtures = [_prepare(url, key, model) for key in keys]
        print(f"{args.clients} clients for {args.duration:.0f} s ...", file=sys.stderr)
        stats, elapsed = asyncio.run(_run(url, fixtures, model, args.clients, args.duration))
    finally:
        if server is not None:
            server.stop()
        tmp.cleanup()
    result = report(stats, elapsed, args, "local (started by the benchmark)" if server else url)
    print(json.dumps(result, indent=2))
    print_table(result, args.markdown)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
