"""Chaos: tuning jobs run to completion while the API server and the workers are killed with SIGKILL
over and over, mid-search and mid-confirmation.

    python -m bench.chaos [--kills 10] [--jobs 4] [--trials 192] [--json OUT]

One API server (no embedded worker) and two `temper worker` processes share a SQLite database. Every
few seconds one of them is killed with SIGKILL (server and workers in turn, `--kills` times each) and
started again. Afterwards it reports: jobs completed, records lost (every record id ever seen must
still be there), traces measured twice (the same trace of the same workload and target recorded
more than once), the phase each worker kill hit, and processes left behind by the killed ones (each
runs in a session of its own, counted a few seconds after its kill). Exit status 0 when nothing was
lost, re-measured or left behind and every job succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.service.api.server import REPO, LiveServer
from tests.service.test_process_cleanup import wait_until_empty


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _models(count: int) -> list[bytes]:
    """`count` models with no workload in common (two jobs tuning one workload at once would both
    measure its candidates: that is concurrency between jobs, not what a kill costs)."""
    from tests.models import builders

    models = [builders.small_conv_model(), builders.mobilenet_v2(image=32, classes=10)]
    models += [builders.mlp(batch=1, sizes=(256 + 16 * k, 128 + 8 * k, 10 + k)) for k in range(count)]
    return [m.SerializeToString() for m in models[:count]]


def run(kills: int, jobs: int, trials: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="temper-chaos-") as tmp:
        data = Path(tmp) / "data"
        temper_env = {
            "TEMPER_DATA_DIR": str(data),
            "TEMPER_EMBEDDED_WORKER": "false",
            "TEMPER_WORKER_LEASE_S": "4",
            "TEMPER_JOB_POLL_S": "0.2",
        }
        env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPER_")} | temper_env
        server = LiveServer(data, temper_env).start()
        key = server.create_key("chaos")
        logs = Path(tmp)
        workers = [_worker(env, logs / f"worker{k}.log") for k in range(2)]
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        job_ids = []
        for k, model in enumerate(_models(jobs)):
            uploaded = http.post(
                "/v1/models", files={"file": (f"m{k}.onnx", model, "application/octet-stream")}
            )
            uploaded.raise_for_status()
            job = http.post(
                "/v1/tuning-jobs", json={"model_id": uploaded.json()["id"], "trials": trials, "batch": 4}
            )
            job.raise_for_status()
            job_ids.append(job.json()["id"])

        seen: dict[int, tuple[str, str, str]] = {}
        leftovers: list[str] = []
        phases: Counter[str] = Counter()
        plan = ["server", "worker"] * kills
        started = time.monotonic()

        def states() -> dict[str, dict[str, Any]]:
            out = {}
            for job_id in job_ids:
                try:
                    out[job_id] = http.get(f"/v1/tuning-jobs/{job_id}").json()
                except httpx.TransportError:
                    out[job_id] = {"state": "unknown"}
            return out

        def snapshot() -> None:
            with server.database() as db:
                for r in db.iter_records():
                    assert r.id is not None
                    seen[r.id] = (r.workload_key, r.target_key, r.trace_hash)

        while plan or any(
            s.get("state") not in ("succeeded", "failed", "cancelled") for s in states().values()
        ):
            if time.monotonic() - started > 3600:
                break
            time.sleep(rng.uniform(3.0, 9.0))
            snapshot()
            if not plan:
                continue
            victim = plan.pop(0)
            if victim == "server":
                assert server.proc is not None
                sid = server.proc.pid
                os.kill(sid, signal.SIGKILL)
                server.proc.wait(10)
                server.proc = None
                leftovers += wait_until_empty(sid, 10)
                server.start()
            else:
                current = list(states().values())
                running = [s for s in current if s.get("state") == "running"]
                if not running:  # a worker kill is only worth something while a job runs
                    if all(s.get("state") in ("succeeded", "failed", "cancelled") for s in current):
                        plan = [v for v in plan if v != "worker"]
                    else:
                        plan.insert(0, victim)
                    continue
                phases[(running[0].get("progress") or {}).get("phase", "starting")] += 1
                k = rng.randrange(len(workers))
                sid = workers[k].pid
                os.kill(sid, signal.SIGKILL)
                workers[k].wait(10)
                leftovers += wait_until_empty(sid, 10)
                workers[k] = _worker(env, logs / f"worker{k}.log")
        snapshot()
        final = states()
        with server.database() as db:
            now = {r.id: (r.workload_key, r.target_key, r.trace_hash) for r in db.iter_records()}
        duplicates = sum(n - 1 for n in Counter(now.values()).values() if n > 1)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.stop()
        http.close()
    return {
        "kills": {"server": kills, "worker": sum(phases.values())},
        "worker_kills_by_phase": dict(phases),
        "jobs": len(job_ids),
        "jobs_succeeded": sum(s.get("state") == "succeeded" for s in final.values()),
        "job_states": {k: s.get("state") for k, s in final.items()},
        "job_attempts": {k: s.get("attempts") for k, s in final.items()},
        "job_errors": {k: s.get("error") for k, s in final.items() if s.get("error")},
        "records": len(now),
        "records_lost": len(set(seen) - set(now)),
        "traces_measured_twice": duplicates,
        "leftover_processes": leftovers,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of the server and of workers, each")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--trials", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args(argv)
    result = run(args.kills, args.jobs, args.trials, args.seed)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    ok = (
        result["jobs_succeeded"] == result["jobs"]
        and result["records_lost"] == 0
        and result["traces_measured_twice"] == 0
        and not result["leftover_processes"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
