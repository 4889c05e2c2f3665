"""A real server against an attacker with an ordinary key: models that name the server's files,
hostile bodies and records. Every one is a 4xx naming what is wrong, and nothing is stored or broken."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from storage import repos as repo
from tests.service.api.server import REPO, LiveServer
from tests.service.api.test_errors import assert_error, auth, nothing_stored, upload

RELU = helper.make_model(
    helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
    ),
    opset_imports=[helper.make_opsetid("", 17)],
    ir_version=8,
).SerializeToString()


def reader_model(location: str, length: int = 64) -> bytes:
    """A model whose Constant claims its bytes live in `location` on the server."""
    t = TensorProto(name="stolen", data_type=TensorProto.UINT8, dims=[length])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    nodes = [
        helper.make_node("Constant", [], ["c"], value=t, name="steal"),
        helper.make_node("Cast", ["c"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["f", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "reader",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [length])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8
    ).SerializeToString()


@pytest.fixture
def server(start_server) -> LiveServer:  # type: ignore[no-untyped-def]
    return start_server(TEMPER_EMBEDDED_WORKER="false")


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def test_no_model_reads_the_servers_files_and_the_database_survives(
    server: LiveServer, http: httpx.Client
) -> None:
    alice, mallory = server.create_key("alice"), server.create_key("mallory")
    assert upload(http, alice, RELU, name="alice-model").status_code == 201
    db_file = Path(server.settings().database_url.removeprefix("sqlite:///"))
    assert db_file.is_file()
    targets = [
        str(db_file),
        os.path.relpath(db_file, REPO),  # relative to the server's working directory
        "pyproject.toml",
        f"{db_file}-wal",
        "no-such-file.bin",
    ]
    messages = set()
    with nothing_stored(server):
        for location in targets:
            response = upload(http, mallory, reader_model(location), name="reader")
            message = assert_error(response, 422, "invalid_model", "external file")
            messages.add(message.replace(location, "<location>"))
    assert len(messages) == 1  # the same answer whether the file exists or not: no oracle
    assert http.get("/v1/models", headers=auth(mallory)).json() == []

    # the database still works as a database: a revoked key stays revoked, writes persist
    with server.database() as db, db.write_session() as s:
        (info,) = repo.list_api_keys(s, "mallory")
        repo.revoke_api_key(s, key_id=info.id)
    for path in ("/v1/models", "/v1/compilations", "/v1/tuning-jobs"):
        assert_error(http.get(path, headers=auth(mallory)), 401, "unauthorized")
    assert upload(http, alice, RELU, name="after").status_code == 201
    server.stop()
    server.start()
    names = sorted(m["name"] for m in http.get("/v1/models", headers=auth(alice)).json())
    assert names == ["after", "alice-model"]
    assert_error(http.get("/v1/models", headers=auth(mallory)), 401, "unauthorized")


def test_hostile_bodies_are_4xx(server: LiveServer, http: httpx.Client) -> None:
    key = server.create_key("alice")
    model = upload(http, key, RELU).json()
    with nothing_stored(server):
        deep = '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"
        assert_error(upload(http, key, RELU, shapes=deep), 422, "invalid_shapes", "nested")
        for bad in ("64", True, 64.0, None):
            response = http.post(
                "/v1/tuning-jobs", headers=auth(key), json={"model_id": model["id"], "trials": bad}
            )
            assert_error(response, 422, "invalid_request", "trials")
        deep_override = '{"v":' * 5000 + "1" + "}" * 5000
        nested = f'{{"model_id": "{model["id"]}", "overrides": {{"a": {deep_override}}}}}'
        response = http.post(
            "/v1/compilations",
            headers={**auth(key), "Content-Type": "application/json"},
            content=nested.encode(),
        )
        assert 400 <= response.status_code < 500, response.text
        negative = numpy_helper.from_array(np.zeros(16, np.float32), "w")
        negative.dims[:] = [-4, -4]
        bad_model = onnx.ModelProto()
        bad_model.ParseFromString(RELU)
        bad_model.graph.initializer.append(negative)
        response = upload(http, key, bad_model.SerializeToString())
        assert_error(response, 422, "invalid_shapes", "negative")
        huge = helper.make_model(
            helper.make_graph(
                [helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill")],
                "huge",
                [],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
                [numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "s")],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
            ir_version=8,
        )
        assert_error(upload(http, key, huge.SerializeToString()), 422, "invalid_shapes", "fill")


def test_405_names_the_allowed_methods(server: LiveServer, http: httpx.Client) -> None:
    key = server.create_key("alice")
    response = http.put("/v1/models", headers=auth(key))
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) == {"GET", "POST"}
    response = http.post("/v1/models/0123456789abcdef0123456789abcdef", headers=auth(key))
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["allow"].split(", ")) == {"DELETE", "GET"}


def test_hostile_records_are_refused_whole(server: LiveServer, http: httpx.Client) -> None:
    admin = server.create_key("ops", admin=True)
    headers = {**auth(admin), "Content-Type": "application/x-ndjson"}
    head = '{"format": "temper-records", "version": 1}\n'

    def record(**change: object) -> str:
        fields = {
            "kind": "record",
            "workload_key": "k",
            "target_key": "t",
            "trace": {"version": 1, "instructions": []},
            "run_secs": [1e-3],
            "error_kind": None,
            "error_message": "",
            "temper_version": "x",
            "created": "2026-01-01T00:00:00+00:00",
        }
        return json.dumps(fields | change) + "\n"

    cases = [
        record(temper_version="\ud800"),
        record(trace={"version": 99}),
        record(trace={"version": 1, "instructions": [{"prim": "parallel", "loop": {"x": 1}}]}),
        '{"kind": "record", "trace": ' + "[" * 50_000 + "]" * 50_000 + "}\n",
        json.dumps({"kind": "workload", "key": "k", "description": {"body": "x"}, "flops": 1}) + "\n",
    ]
    with server.database() as db:
        before = list(db.iter_records())
    for line in cases:
        response = http.post("/v1/records/import", headers=headers, content=(head + line).encode())
        assert_error(response, 422, "invalid_records", "line 2")
    with server.database() as db:
        assert list(db.iter_records()) == before and db.workloads() == []
