"""Every bad request gets a 4xx with a JSON error naming what was wrong, and stores nothing: auth
failures, admin-only import, other tenants' ids, bad uploads, bad job requests, bad stages, bad records.

One server without a worker (jobs stay queued) serves the whole module; each test checks the blob
directory and the tables before and after the requests it expects to be refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import onnx
import pytest
from onnx import TensorProto, helper

from storage import repos as repo
from tests.models.builders import mlp
from tests.service.api.conftest import UPLOAD_LIMIT
from tests.service.api.server import LiveServer

MLP = mlp(batch=2, sizes=(64, 32, 8)).SerializeToString()
DYNAMIC_MLP = mlp(batch="N", sizes=(64, 32, 8)).SerializeToString()
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"


def unsupported_model() -> bytes:
    """Two nodes temper cannot compile (Det, Bernoulli) next to a supported one."""
    nodes = [
        helper.make_node("Det", ["x"], ["d"], name="the_det"),
        helper.make_node("Bernoulli", ["x"], ["h"], name="the_coin"),
        helper.make_node("Relu", ["x"], ["r"], name="fine_relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])],
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3, 3]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3, 3]),
        ],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    ).SerializeToString()


# --- helpers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(idle_server: LiveServer) -> dict[str, str]:
    return {
        "alice": idle_server.create_key("alice"),
        "bob": idle_server.create_key("bob"),
        "admin": idle_server.create_key("ops", admin=True),
    }


@pytest.fixture(scope="module")
def http(idle_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=idle_server.url, timeout=60) as client:
        yield client


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_error(response: httpx.Response, status: int, code: str, *words: str) -> str:
    """The response is `status` with the JSON error body, its code, and a message with `words`."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    for word in words:
        assert word in message, (word, message)
    return str(message)


@contextmanager
def nothing_stored(server: LiveServer) -> Iterator[None]:
    before = (server.row_counts(), server.blobs())
    yield
    assert (server.row_counts(), server.blobs()) == before


def upload(
    http: httpx.Client,
    key: str,
    data: bytes,
    *,
    content_type: str = "application/octet-stream",
    **form: str,
) -> httpx.Response:
    return http.post(
        "/v1/models", headers=auth(key), files={"file": ("model.onnx", data, content_type)}, data=form
    )


@pytest.fixture(scope="module")
def alice_model(http: httpx.Client, keys: dict[str, str]) -> dict[str, Any]:
    response = upload(http, keys["alice"], MLP, name="alice-mlp")
    assert response.status_code == 201, response.text
    return dict(response.json())


# --- no key needed ---------------------------------------------------------------------------------


def test_health_metrics_and_docs_are_open(http: httpx.Client) -> None:
    health = http.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    metrics = http.get("/metrics")
    assert metrics.status_code == 200 and "temper_queue_depth" in metrics.text
    assert http.get("/openapi.json").json()["info"]["title"] == "temper"
    assert http.get("/docs").status_code == 200


# --- authentication and authorization --------------------------------------------------------------

V1_ROUTES = [
    ("GET", "/v1/models"),
    ("POST", "/v1/models"),
    ("GET", f"/v1/models/{UNKNOWN_ID}"),
    ("DELETE", f"/v1/models/{UNKNOWN_ID}"),
    ("GET", f"/v1/models/{UNKNOWN_ID}/ir?stage=graph"),
    ("GET", f"/v1/models/{UNKNOWN_ID}/explain"),
    ("GET", "/v1/compilations"),
    ("POST", "/v1/compilations"),
    ("GET", f"/v1/compilations/{UNKNOWN_ID}"),
    ("POST", f"/v1/compilations/{UNKNOWN_ID}/cancel"),
    ("GET", "/v1/tuning-jobs"),
    ("POST", "/v1/tuning-jobs"),
    ("GET", f"/v1/tuning-jobs/{UNKNOWN_ID}"),
    ("POST", f"/v1/tuning-jobs/{UNKNOWN_ID}/cancel"),
    ("GET", f"/v1/artifacts/{UNKNOWN_ID}"),
    ("GET", f"/v1/artifacts/{UNKNOWN_ID}/manifest"),
    ("GET", f"/v1/artifacts/{UNKNOWN_ID}/profile"),
    ("GET", "/v1/records/export"),
    ("GET", "/v1/records"),
    ("GET", "/v1/records/targets"),
    ("POST", "/v1/records/import"),
]


@pytest.mark.parametrize(("method", "path"), V1_ROUTES)
def test_every_v1_route_needs_a_valid_key(
    http: httpx.Client, idle_server: LiveServer, method: str, path: str
) -> None:
    with nothing_stored(idle_server):
        missing = http.request(method, path)
        assert_error(missing, 401, "unauthorized", "missing API key", "Bearer")
        assert missing.headers["WWW-Authenticate"] == "Bearer"
        for header in ("Bearer tk_not-a-key", "Bearer", "Basic YWxpY2U6c2VjcmV0", "tk_no_scheme"):
            assert_error(http.request(method, path, headers={"Authorization": header}), 401, "unauthorized")
            if method == "POST":  # a stranger's broken JSON is still a 401, not a JSON lesson
                broken = {"Authorization": header, "Content-Type": "application/json"}
                assert_error(http.post(path, headers=broken, content=b"{broken"), 401, "unauthorized")


def test_a_revoked_key_is_refused(http: httpx.Client, idle_server: LiveServer) -> None:
    key = idle_server.create_key("carol")
    assert http.get("/v1/models", headers=auth(key)).status_code == 200
    with idle_server.database() as db, db.write_session() as s:
        (info,) = repo.list_api_keys(s, "carol")
        repo.revoke_api_key(s, key_id=info.id)
    assert_error(http.get("/v1/models", headers=auth(key)), 401, "unauthorized", "invalid or revoked")


def test_records_import_is_for_admins(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer
) -> None:
    exported = http.get("/v1/records/export", headers=auth(keys["bob"]))
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    assert json.loads(exported.text.splitlines()[0]) == {"format": "temper-records", "version": 1}
    jsonl = {"Content-Type": "application/x-ndjson"}
    with nothing_stored(idle_server):
        refused = http.post(
            "/v1/records/import", content=exported.content, headers={**jsonl, **auth(keys["bob"])}
        )
        assert_error(refused, 403, "forbidden", "admin")
    accepted = http.post(
        "/v1/records/import", content=exported.content, headers={**jsonl, **auth(keys["admin"])}
    )
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["records_added"] == 0
    as_file = http.post(
        "/v1/records/import",
        headers=auth(keys["admin"]),
        files={"file": ("records.jsonl", exported.content, "application/x-ndjson")},
    )
    assert as_file.status_code == 200, as_file.text


# --- tenants see only their own --------------------------------------------------------------------


def test_other_tenants_ids_are_404(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer, alice_model: dict[str, Any]
) -> None:
    alice, bob = auth(keys["alice"]), auth(keys["bob"])
    model_id = alice_model["id"]
    comp = http.post("/v1/compilations", headers=alice, json={"model_id": model_id})
    tune = http.post("/v1/tuning-jobs", headers=alice, json={"model_id": model_id, "trials": 4})
    assert comp.status_code == 202 and tune.status_code == 202, (comp.text, tune.text)
    comp_id, tune_id = comp.json()["id"], tune.json()["id"]
    # an artifact of alice's, stored as a worker would store it
    artifact_bytes = b"not really an artifact, but bytes with a checksum"
    with idle_server.database() as db, db.write_session() as s:
        key = idle_server.settings().blobs_dir
        from storage.blobs import BlobStore

        blob = BlobStore(key).put_bytes(artifact_bytes)
        tenant = repo.get_tenant(s, "alice")
        assert tenant is not None
        artifact = repo.create_artifact(
            s,
            tenant_id=tenant.id,
            compilation_id=comp_id,
            sha256=blob,
            size=len(artifact_bytes),
            blob_key=blob,
            manifest={"kernels": []},
        )

    with nothing_stored(idle_server):
        for method, path in [
            ("GET", f"/v1/models/{model_id}"),
            ("DELETE", f"/v1/models/{model_id}"),
            ("GET", f"/v1/models/{model_id}/ir?stage=graph"),
            ("GET", f"/v1/models/{model_id}/explain"),
            ("GET", f"/v1/compilations/{comp_id}"),
            ("POST", f"/v1/compilations/{comp_id}/cancel"),
            ("GET", f"/v1/tuning-jobs/{tune_id}"),
            ("POST", f"/v1/tuning-jobs/{tune_id}/cancel"),
            ("GET", f"/v1/artifacts/{artifact.id}"),
            ("GET", f"/v1/artifacts/{artifact.id}/manifest"),
            ("GET", f"/v1/artifacts/{artifact.id}/profile"),
        ]:
            resource_id = path.split("/")[3]
            assert_error(http.request(method, path, headers=bob), 404, "not_found", resource_id)
        for path in ("/v1/compilations", "/v1/tuning-jobs"):
            assert_error(
                http.post(path, headers=bob, json={"model_id": model_id}), 404, "not_found", model_id
            )
        for path in ("/v1/models", "/v1/compilations", "/v1/tuning-jobs"):
            assert http.get(path, headers=bob).json() == []

    assert model_id in {m["id"] for m in http.get("/v1/models", headers=alice).json()}
    assert http.get(f"/v1/compilations/{comp_id}", headers=alice).json()["state"] == "queued"
    download = http.get(f"/v1/artifacts/{artifact.id}", headers=alice)
    assert download.status_code == 200 and download.content == artifact_bytes
    assert download.headers["X-Content-SHA256"] == hashlib.sha256(artifact_bytes).hexdigest()
    assert int(download.headers["Content-Length"]) == len(artifact_bytes)
    with nothing_stored(idle_server):  # bytes that are no artifact cannot run: a clear 409, no 500
        profile = http.get(f"/v1/artifacts/{artifact.id}/profile", headers=alice)
        assert_error(profile, 409, "cannot_run_here", "cannot run on this server")
    assert_error(
        http.get(f"/v1/artifacts/{artifact.id}/profile?runs=0", headers=alice), 422, "invalid_request", "runs"
    )
    cancelled = http.post(f"/v1/tuning-jobs/{tune_id}/cancel", headers=alice)
    assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelled"
    assert http.get("/v1/tuning-jobs?state=cancelled", headers=alice).json()[0]["id"] == tune_id


def test_deleting_a_model_keeps_its_jobs(http: httpx.Client, keys: dict[str, str]) -> None:
    headers = auth(keys["alice"])
    model = upload(http, keys["alice"], MLP, name="short-lived").json()
    job = http.post("/v1/compilations", headers=headers, json={"model_id": model["id"]}).json()
    assert http.delete(f"/v1/models/{model['id']}", headers=headers).status_code == 204
    assert_error(http.get(f"/v1/models/{model['id']}", headers=headers), 404, "not_found")
    assert_error(http.delete(f"/v1/models/{model['id']}", headers=headers), 404, "not_found")
    assert model["id"] not in {m["id"] for m in http.get("/v1/models", headers=headers).json()}
    assert http.get(f"/v1/compilations/{job['id']}", headers=headers).json()["model_id"] == model["id"]


# --- unknown ids and routes -------------------------------------------------------------------------


@pytest.mark.parametrize("ident", [UNKNOWN_ID, "not-an-id", "x" * 200, "%00", "..%2F..%2Fetc"])
def test_unknown_ids_are_404(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer, ident: str
) -> None:
    headers = auth(keys["alice"])
    with nothing_stored(idle_server):
        for method, path in [
            ("GET", "/v1/models/{}"),
            ("DELETE", "/v1/models/{}"),
            ("GET", "/v1/models/{}/ir?stage=graph"),
            ("GET", "/v1/models/{}/explain"),
            ("GET", "/v1/compilations/{}"),
            ("POST", "/v1/compilations/{}/cancel"),
            ("GET", "/v1/tuning-jobs/{}"),
            ("POST", "/v1/tuning-jobs/{}/cancel"),
            ("GET", "/v1/artifacts/{}"),
            ("GET", "/v1/artifacts/{}/manifest"),
            ("GET", "/v1/artifacts/{}/profile"),
        ]:
            response = http.request(method, path.format(ident), headers=headers)
            assert_error(response, 404, "not_found")


def test_unknown_routes_and_methods_are_json_errors(http: httpx.Client, keys: dict[str, str]) -> None:
    assert_error(http.get("/v1/nothing-here", headers=auth(keys["alice"])), 404, "not_found")
    assert_error(http.put("/v1/models", headers=auth(keys["alice"])), 405, "method_not_allowed")


# --- uploads ----------------------------------------------------------------------------------------


def _bad_uploads() -> list[Any]:
    truncated = MLP[: len(MLP) // 2]
    return [
        pytest.param({"data": b"\x08\x07garbage\xff\xfe" * 10}, 422, "invalid_model", ["ONNX"], id="garbage"),
        pytest.param({"data": truncated}, 422, "invalid_model", ["truncated"], id="truncated"),
        pytest.param({"data": b""}, 422, "invalid_model", ["empty"], id="empty"),
        pytest.param(
            {"data": unsupported_model()},
            422,
            "unsupported_op",
            ["2 unsupported node(s)", "the_det", "Det", "the_coin", "Bernoulli"],
            id="unsupported-ops",
        ),
        pytest.param(
            {"data": MLP, "content_type": "text/plain"},
            415,
            "unsupported_media_type",
            ["text/plain"],
            id="text-file",
        ),
        pytest.param(
            {"data": MLP, "content_type": "image/png"},
            415,
            "unsupported_media_type",
            ["image/png"],
            id="png-file",
        ),
        pytest.param(
            {"data": b"\x00" * (UPLOAD_LIMIT + 1)},
            413,
            "payload_too_large",
            [str(UPLOAD_LIMIT)],
            id="over-limit",
        ),
        pytest.param(
            {"data": MLP, "shapes": "{not json"}, 422, "invalid_shapes", ["shapes", "JSON"], id="shapes-json"
        ),
        pytest.param(
            {"data": MLP, "shapes": '{"input": [2, -64]}'}, 422, "invalid_shapes", ["input"], id="neg-dim"
        ),
        pytest.param({"data": MLP, "shapes": "[1, 2]"}, 422, "invalid_shapes", ["shapes"], id="shapes-list"),
        pytest.param(
            {"data": MLP, "shapes": '{"nope": [2, 64]}'},
            422,
            "invalid_shapes",
            ["nope", "input"],
            id="unknown-input",
        ),
        pytest.param(
            {"data": DYNAMIC_MLP, "shapes": '{"input": [2, 65]}'},
            422,
            "invalid_shapes",
            ["input", "65"],
            id="bad-dim",
        ),
        pytest.param(
            {"data": MLP, "name": "bad\x01name"}, 422, "invalid_input", ["name"], id="control-char-name"
        ),
    ]


@pytest.mark.parametrize(("request_args", "status", "code", "words"), _bad_uploads())
def test_bad_uploads_store_nothing(
    http: httpx.Client,
    keys: dict[str, str],
    idle_server: LiveServer,
    request_args: dict[str, Any],
    status: int,
    code: str,
    words: list[str],
) -> None:
    with nothing_stored(idle_server):
        assert_error(upload(http, keys["alice"], **request_args), status, code, *words)


def test_uploads_that_are_not_multipart(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer
) -> None:
    headers = auth(keys["alice"])
    with nothing_stored(idle_server):
        as_json = http.post("/v1/models", headers=headers, json={"file": "model.onnx"})
        assert_error(as_json, 415, "unsupported_media_type", "multipart/form-data", "application/json")
        raw = http.post(
            "/v1/models", headers={**headers, "Content-Type": "application/octet-stream"}, content=MLP
        )
        assert_error(raw, 415, "unsupported_media_type", "multipart/form-data")
        no_file = http.post("/v1/models", headers=headers, files={"other": ("m.onnx", MLP)})
        assert_error(no_file, 422, "invalid_request", "file")
        text_field = http.post(
            "/v1/models", headers=headers, data={"file": "not a file"}, files={"x": ("a", b"b")}
        )
        assert_error(text_field, 422, "invalid_request", "file")


def test_bodies_over_the_limit_are_refused_before_they_are_read(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer
) -> None:
    big = b"\x00" * (UPLOAD_LIMIT + 200_000)  # over the limit with the multipart allowance
    with nothing_stored(idle_server):
        declared = upload(http, keys["alice"], big)
        assert_error(declared, 413, "payload_too_large", "limit")

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            boundary = b'--b\r\nContent-Disposition: form-data; name="file"; filename="m.onnx"\r\n\r\n'
            yield boundary
            for start in range(0, len(big), 65536):
                yield big[start : start + 65536]
            yield b"\r\n--b--\r\n"

        chunked = http.post(
            "/v1/models",
            headers={**auth(keys["alice"]), "Content-Type": "multipart/form-data; boundary=b"},
            content=chunks(),
        )
        assert_error(chunked, 413, "payload_too_large", "limit")


def test_dynamic_dims_are_listed_until_bound(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer
) -> None:
    headers = auth(keys["alice"])
    response = upload(http, keys["alice"], DYNAMIC_MLP)
    assert response.status_code == 201, response.text
    model = response.json()
    assert model["unbound"] == ["input"] and model["tasks"] == [] and model["shapes"] == {}
    assert model["inputs"] == [{"name": "input", "shape": ["N", 64], "dtype": "float32"}]
    assert model["op_counts"] == {"Gemm": 2, "Relu": 1}
    with nothing_stored(idle_server):
        refused = http.post("/v1/compilations", headers=headers, json={"model_id": model["id"]})
        assert_error(refused, 422, "invalid_shapes", "'input'", "dynamic")
    bound = http.post(
        "/v1/tuning-jobs", headers=headers, json={"model_id": model["id"], "shapes": {"input": [3, 64]}}
    )
    assert bound.status_code == 202, bound.text
    assert bound.json()["params"]["shapes"] == {"input": [3, 64]}
    ir = http.get(
        f"/v1/models/{model['id']}/ir",
        headers=headers,
        params={"stage": "tir", "shapes": '{"input": [3, 64]}'},
    )
    assert ir.status_code == 200 and "3, 64" in ir.text


# --- job requests -----------------------------------------------------------------------------------


def _bad_jobs(model_id: str) -> list[tuple[str, dict[str, Any], int, str, list[str]]]:
    """(path, request kwargs, status, code, words in the message)."""
    ok = {"model_id": model_id}
    comp, tune = "/v1/compilations", "/v1/tuning-jobs"
    json_type = {"Content-Type": "application/json"}
    return [
        (comp, {"content": b"{not json", "headers": json_type}, 400, "invalid_json", ["JSON"]),
        (tune, {"content": b'{"model_id": "', "headers": json_type}, 400, "invalid_json", ["JSON"]),
        (
            comp,
            {"content": b"model_id=x", "headers": {"Content-Type": "text/plain"}},
            415,
            "unsupported_media_type",
            ["application/json"],
        ),
        (comp, {"json": []}, 422, "invalid_request", ["body"]),
        (comp, {"json": {}}, 422, "invalid_request", ["model_id", "required"]),
        (tune, {"json": {**ok, "trails": 5}}, 422, "invalid_request", ["trails"]),
        (tune, {"json": {**ok, "trials": 0}}, 422, "invalid_request", ["trials"]),
        (tune, {"json": {**ok, "trials": "many"}}, 422, "invalid_request", ["trials"]),
        (tune, {"json": {**ok, "time_budget_s": -1}}, 422, "invalid_request", ["time_budget_s"]),
        (comp, {"json": {**ok, "opt_level": 7}}, 422, "invalid_request", ["opt_level"]),
        (comp, {"json": {"model_id": UNKNOWN_ID}}, 404, "not_found", [UNKNOWN_ID]),
        (tune, {"json": {"model_id": "../../etc/passwd"}}, 404, "not_found", ["passwd"]),
        (
            comp,
            {"json": {**ok, "target": "pentium9000"}},
            422,
            "compile_error",
            ["unknown target", "pentium9000"],
        ),
        (comp, {"json": {**ok, "target": "a b"}}, 422, "invalid_request", ["target"]),
        (
            comp,
            {"json": {**ok, "overrides": {"fc1": "record:999999"}}},
            422,
            "invalid_override",
            ["record:999999"],
        ),
        (comp, {"json": {**ok, "overrides": {"fc1": "/etc/passwd"}}}, 422, "invalid_request", ["overrides"]),
        (
            comp,
            {"json": {**ok, "overrides": {"fcX": {"version": 1, "instructions": []}}}},
            422,
            "invalid_override",
            ["'fcX'", "no ONNX node and no kernel", "closest", "fc1"],
        ),
        (
            comp,
            {"json": {**ok, "overrides": {"fc1": {"version": 99}}}},
            422,
            "invalid_override",
            ["fc1", "trace"],
        ),
        (comp, {"json": {**ok, "shapes": {"input": [0, 64]}}}, 422, "invalid_request", ["shapes"]),
        (tune, {"json": {**ok, "shapes": {"nope": [2, 64]}}}, 422, "invalid_shapes", ["nope"]),
        (comp, {"json": {**ok, "shapes": {"input": [2, 65]}}}, 422, "invalid_shapes", ["input", "65"]),
        (tune, {"json": {**ok, "shapes": {"input": [2, 64, 1]}}}, 422, "invalid_shapes", ["input", "rank"]),
    ]


def test_bad_job_requests_store_nothing(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer, alice_model: dict[str, Any]
) -> None:
    headers = auth(keys["alice"])
    with nothing_stored(idle_server):
        for path, kwargs, status, code, words in _bad_jobs(alice_model["id"]):
            kwargs = dict(kwargs)
            kwargs["headers"] = {**headers, **kwargs.get("headers", {})}
            try:
                assert_error(http.post(path, **kwargs), status, code, *words)
            except AssertionError as exc:
                raise AssertionError(f"POST {path} {kwargs}: {exc}") from None


def test_list_filters_are_checked(http: httpx.Client, keys: dict[str, str]) -> None:
    bad = http.get("/v1/compilations", params={"state": "sleeping"}, headers=auth(keys["alice"]))
    assert_error(bad, 422, "invalid_request", "state", "queued")


# --- the IR and explain endpoints -------------------------------------------------------------------


def test_explain_endpoint_and_its_errors(
    http: httpx.Client, keys: dict[str, str], alice_model: dict[str, Any]
) -> None:
    headers = auth(keys["alice"])
    path = f"/v1/models/{alice_model['id']}/explain"
    response = http.get(path, headers=headers, params={"profile": "true"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["target"]["key"] and "fuse_ops" in body["passes"]
    kernels = body["kernels"]
    assert kernels and all(k["rule"] and k["schedule"]["source"] == "default" for k in kernels)
    assert all(k["measured_s"] > 0 for k in kernels)
    node = kernels[0]["nodes"][0]["node"]
    one = http.get(path, headers=headers, params={"node": node}).json()["kernels"]
    assert [k["kernel"] for k in one] == [kernels[0]["kernel"]]
    assert_error(
        http.get(path, headers=headers, params={"node": node + "X"}),
        422,
        "unknown_node",
        "no ONNX node and no kernel",
        "closest",
    )
    assert_error(http.get(path, headers=headers, params={"target": "pentium9000"}), 422, "compile_error")


def test_ir_stages_and_their_errors(
    http: httpx.Client, keys: dict[str, str], alice_model: dict[str, Any]
) -> None:
    headers = auth(keys["alice"])
    path = f"/v1/models/{alice_model['id']}/ir"
    expected = {
        "graph": "matmul",
        "optimized": "def",
        "fused": "def",
        "tir": "for",
        "scheduled": "for",
        "llvm": "define",
        "asm": "ret",
    }
    for stage, word in expected.items():
        response = http.get(path, params={"stage": stage}, headers=headers)
        assert response.status_code == 200, (stage, response.text)
        assert response.headers["content-type"].startswith("text/plain")
        assert word in response.text, (stage, response.text[:300])
    assert_error(
        http.get(path, params={"stage": "bogus"}, headers=headers),
        422,
        "invalid_request",
        "stage",
        "graph",
        "asm",
    )
    assert_error(http.get(path, headers=headers), 422, "invalid_request", "stage", "required")
    assert_error(
        http.get(path, params={"stage": "tir", "kernel": "no_such_kernel"}, headers=headers),
        422,
        "compile_error",
        "no_such_kernel",
    )
    assert_error(
        http.get(path, params={"stage": "graph", "shapes": "{oops"}, headers=headers), 422, "invalid_shapes"
    )
    assert_error(
        http.get(path, params={"stage": "graph", "opt_level": 9}, headers=headers),
        422,
        "invalid_request",
        "opt_level",
    )


# --- records import ---------------------------------------------------------------------------------


def test_bad_records_files_store_nothing(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer
) -> None:
    headers = auth(keys["admin"])
    jsonl = {**headers, "Content-Type": "application/x-ndjson"}
    header_line = b'{"format": "temper-records", "version": 1}\n'
    with idle_server.database() as db:
        before = sum(1 for _ in db.iter_records())
    with nothing_stored(idle_server):
        assert_error(
            http.post("/v1/records/import", headers=jsonl, content=b"garbage\n"),
            422,
            "invalid_records",
            "line 1",
        )
        bad_record = header_line + b'{"kind": "record", "workload_key": "x"}\n'
        assert_error(
            http.post("/v1/records/import", headers=jsonl, content=bad_record),
            422,
            "invalid_records",
            "line 2",
        )
        assert_error(
            http.post("/v1/records/import", headers=jsonl, content=b"\xff\xfe\x00"),
            422,
            "invalid_records",
            "UTF-8",
        )
        assert_error(
            http.post("/v1/records/import", headers=jsonl, content=b""), 422, "invalid_records", "empty"
        )
        as_json = http.post("/v1/records/import", headers=headers, json={"records": []})
        assert_error(as_json, 415, "unsupported_media_type", "application/x-ndjson")
        no_file = http.post("/v1/records/import", headers=headers, files={"other": ("r.jsonl", header_line)})
        assert_error(no_file, 422, "invalid_input", "file")
    with idle_server.database() as db:
        assert sum(1 for _ in db.iter_records()) == before


def test_uploaded_models_are_content_addressed(
    http: httpx.Client, keys: dict[str, str], idle_server: LiveServer
) -> None:
    first = upload(http, keys["bob"], MLP).json()
    second = upload(http, keys["bob"], MLP, name="again").json()
    assert (
        first["id"] != second["id"] and first["sha256"] == second["sha256"] == hashlib.sha256(MLP).hexdigest()
    )
    assert hashlib.sha256(MLP).hexdigest() in idle_server.blobs()
    assert first["name"] == "model" and second["name"] == "again"
    assert onnx.load_from_string(MLP).graph.node[0].op_type in first["op_counts"]
