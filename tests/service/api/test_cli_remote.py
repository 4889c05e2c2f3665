"""`temper tune|compile --server URL`: the commands run on a live server, with the same output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from compiler.runtime import load, read_artifact
from service.cli import app
from storage import SqlDatabase
from tests.models.builders import mlp
from tests.service.api.server import LiveServer, free_port


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(batch="N", sizes=(64, 32, 8)), path)
    return path


def _best_record(server: LiveServer, artifact: Path, node: str) -> int:
    """The fastest record of the workload of the kernel that holds `node`."""
    manifest, *_ = read_artifact(artifact.read_bytes())
    workload = next(k["workload_key"] for k in manifest["kernels"] if node in k["nodes"])
    with SqlDatabase(server.settings().database_url) as db:
        records = [r for r in db.iter_records() if r.ok and r.workload_key == workload]
    best = min(records, key=lambda r: r.seconds).id
    assert best is not None
    return best


def test_tune_then_compile_on_a_server(
    start_server: Callable[..., LiveServer], model_file: Path, tmp_path: Path
) -> None:
    server = start_server()
    key = server.create_key("cli")
    remote = ["--server", server.url, "--api-key", key, "--shape", "input=2,64"]
    runner = CliRunner()

    tuned = runner.invoke(app, ["tune", str(model_file), "--trials", "6", "--batch", "3", *remote])
    assert tuned.exit_code == 0, tuned.output
    assert "tuned 6 candidate(s)" in tuned.output and f"records on {server.url}" in tuned.output
    assert "fused_matmul_add_relu_0" in tuned.output and "GFLOP/s" in tuned.output  # the progress table

    artifact = tmp_path / "mlp.temper"
    compiled = runner.invoke(app, ["compile", str(model_file), "-o", str(artifact), *remote])
    assert compiled.exit_code == 0, compiled.output
    assert f"wrote {artifact}" in compiled.output and "record #" in compiled.output
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    got = load(artifact).run({"input": x})["logits"]
    want = ort.InferenceSession(model_file.read_bytes()).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    record = _best_record(server, artifact, "fc2")
    pinned = runner.invoke(
        app, ["compile", str(model_file), "-o", str(artifact), "--override", f"fc2=record:{record}", *remote]
    )
    assert pinned.exit_code == 0, pinned.output
    assert f"override #{record}" in pinned.output

    trace_file = tmp_path / "trace.json"
    trace_file.write_text(json.dumps({"version": 999}))
    bad_trace = runner.invoke(
        app, ["compile", str(model_file), "-o", str(artifact), "--override", f"fc2={trace_file}", *remote]
    )
    assert bad_trace.exit_code == 2 and "not a schedule trace" in bad_trace.output


def test_remote_failures_are_one_line(
    start_server: Callable[..., LiveServer], model_file: Path, tmp_path: Path
) -> None:
    server = start_server(TEMPER_EMBEDDED_WORKER="false")
    runner = CliRunner()
    out = ["-o", str(tmp_path / "m.temper")]

    wrong_key = runner.invoke(
        app, ["compile", str(model_file), *out, "--server", server.url, "--api-key", "tk_nope"]
    )
    assert wrong_key.exit_code == 2
    assert "error: server refused: invalid or revoked API key (unauthorized)" in wrong_key.output
    assert "Traceback" not in wrong_key.output

    key = server.create_key("cli")
    from_env = runner.invoke(
        app, ["compile", str(model_file), *out, "--server", server.url], env={"TEMPER_API_KEY": key}
    )
    unbound = runner.invoke(app, ["compile", str(model_file), *out, "--server", server.url, "--api-key", key])
    assert from_env.output == unbound.output  # the key from TEMPER_API_KEY gets as far as --api-key's
    assert unbound.exit_code == 2 and "'input'" in unbound.output and "dynamic" in unbound.output

    closed = f"http://127.0.0.1:{free_port()}"
    unreachable = runner.invoke(app, ["tune", str(model_file), "--server", closed, "--api-key", key])
    assert unreachable.exit_code == 2 and f"cannot reach {closed}" in unreachable.output

    for extra in (["--db", "sqlite:///x.sqlite"], ["--dump-ir", str(tmp_path / "ir")]):
        refused = runner.invoke(app, ["compile", str(model_file), *out, "--server", server.url, *extra])
        assert refused.exit_code == 2 and "cannot be used with --server" in refused.output
    not_url = runner.invoke(app, ["tune", str(model_file), "--server", "example.org:80"])
    assert not_url.exit_code == 2 and "http(s)://" in not_url.output
    missing = runner.invoke(
        app, ["compile", str(model_file), *out, "--server", server.url, "--override", "fc1=/nonexistent.json"]
    )
    assert missing.exit_code == 2 and "cannot read" in missing.output
