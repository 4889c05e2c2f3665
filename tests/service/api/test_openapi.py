"""The served OpenAPI document is valid and describes the API; schemathesis fuzzes the live server
(bounded: a few examples per operation) and finds no 5xx and no response that breaks the schema."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from openapi_spec_validator import validate

from compiler.pipeline import CompileOptions, compile_model
from service.client import Client
from storage import repos as repo
from storage.blobs import BlobStore
from tests.models.builders import mlp
from tests.service.api.server import LiveServer

CHECKS = [
    "not_a_server_error",  # the requirement: nothing a client sends makes the server fail
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "allow_header_conformance",
]


def test_openapi_document_is_valid_and_complete(start_server: Callable[..., LiveServer]) -> None:
    server = start_server(TEMPER_EMBEDDED_WORKER="false")
    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    validate(spec)  # raises on an invalid OpenAPI 3.1 document
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    paths = spec["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            if path.startswith("/v1/"):
                assert operation.get("security") == [{"HTTPBearer": []}], where
                assert "401" in operation["responses"], where
            for status, response in operation["responses"].items():
                if status[0] in "45":  # errors are the JSON error body on every route
                    assert list(response["content"]) == ["application/json"], (where, status)
                    assert response["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    expected = {
        "/v1/models": {"get", "post"},
        "/v1/models/{model_id}": {"get", "delete"},
        "/v1/models/{model_id}/ir": {"get"},
        "/v1/compilations": {"get", "post"},
        "/v1/compilations/{compilation_id}": {"get"},
        "/v1/tuning-jobs": {"get", "post"},
        "/v1/tuning-jobs/{job_id}": {"get"},
        "/v1/tuning-jobs/{job_id}/cancel": {"post"},
        "/v1/artifacts/{artifact_id}": {"get"},
        "/v1/artifacts/{artifact_id}/manifest": {"get"},
        "/v1/records/export": {"get"},
        "/v1/records/import": {"post"},
        "/healthz": {"get"},
        "/metrics": {"get"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
    assert "text/html" in httpx.get(f"{server.url}/docs", timeout=30).headers["content-type"]


def _seed(server: LiveServer, key: str, tmp_path: Path) -> dict[str, str]:
    """A model, a queued compilation and tuning job, and a real artifact, to fuzz real ids too."""
    model = mlp(batch=2, sizes=(16, 8, 4)).SerializeToString()
    with Client(server.url, key) as client:
        uploaded = client.upload_model(model)
        comp = client.create_compilation(uploaded.id)
        tune = client.create_tuning_job(uploaded.id, trials=2)
    compiled = compile_model(model, CompileOptions())
    compiled.save(tmp_path / "a.temper")
    data = (tmp_path / "a.temper").read_bytes()
    blob = BlobStore(server.settings().blobs_dir).put_bytes(data)
    with server.database() as db, db.write_session() as s:
        tenant = repo.get_tenant(s, "fuzz")
        assert tenant is not None
        artifact = repo.create_artifact(
            s,
            tenant_id=tenant.id,
            compilation_id=comp.id,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            blob_key=blob,
            manifest=compiled.manifest,
        )
    return {"model_id": uploaded.id, "compilation_id": comp.id, "job_id": tune.id, "artifact_id": artifact.id}


def test_schemathesis_finds_no_server_errors(start_server: Callable[..., LiveServer], tmp_path: Path) -> None:
    server = start_server(TEMPER_EMBEDDED_WORKER="false")  # jobs stay queued: fuzzing measures nothing
    key = server.create_key("fuzz", admin=True)
    ids = _seed(server, key, tmp_path)
    # half of the generated ids are real ones, so fuzzing reaches past the 404s
    config = [f'[dictionaries.{name}]\nvalues = ["{value}"]\n' for name, value in ids.items()]
    config.append("[parameters]")
    config += [f'"path.{name}" = {{ dictionary = "{name}", probability = 0.5 }}' for name in ids]
    config.append('"body.model_id" = { dictionary = "model_id", probability = 0.5 }')
    (tmp_path / "schemathesis.toml").write_text("\n".join(config) + "\n")
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        f"{server.url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        "coverage,fuzzing,stateful",
        "--max-examples",
        "15",
        "--seed",
        "0",
        "--generation-database",
        "none",
        "--request-timeout",
        "30",
        "--no-color",
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:] + "\n--- server log ---\n" + server.log_tail()
    assert "passed" in output and " failed" not in output
    assert "HTTP 500" not in server.log_tail(200)
