"""service.client.Client against a live server: every method, typed results, errors as ApiError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from service.client import ApiError, Client
from tests.models.builders import mlp
from tests.service.api.server import LiveServer


def test_every_client_method(start_server: Callable[..., LiveServer], tmp_path: Path) -> None:
    server = start_server(TEMPER_EMBEDDED_WORKER="false")  # jobs stay queued: cancel them
    model_path = tmp_path / "mlp.onnx"
    model_path.write_bytes(mlp(batch="N", sizes=(16, 8, 4)).SerializeToString())
    with (
        Client(server.url, server.create_key("team")) as client,
        Client(server.url, server.create_key("ops", admin=True)) as admin,
    ):
        assert client.health().status == "ok"
        assert "temper_jobs" in client.metrics()

        model = client.upload_model(model_path, name="tiny", shapes={"input": [2, 16]})
        assert (model.name, model.shapes, model.unbound) == ("tiny", {"input": [2, 16]}, [])
        assert [m.id for m in client.list_models()] == [model.id]
        assert client.get_model(model.id) == model
        assert "for " in client.model_ir(model.id, "scheduled", kernel=model.tasks[0].name)
        assert "[3, 16]" in client.model_ir(model.id, "graph", shapes={"input": [3, 16]})
        explained = client.explain(model.id, shapes={"input": [3, 16]})
        assert explained["kernels"] and all(k["schedule"]["source"] for k in explained["kernels"])

        comp = client.create_compilation(model.id, opt_level=2, use_tuned=False)
        assert comp.state == "queued" and comp.params["opt_level"] == 2 and comp.params["use_tuned"] is False
        assert [c.id for c in client.list_compilations(state="queued")] == [comp.id]
        with pytest.raises(TimeoutError, match="still queued"):
            client.wait_compilation(comp.id, timeout=0.3, poll=0.1)
        assert client.cancel_compilation(comp.id).state == "cancelled"
        assert client.wait_compilation(comp.id, timeout=5).state == "cancelled"
        assert client.list_compilations(state="queued") == []

        tune = client.create_tuning_job(model.id, trials=3, time_budget_s=60, batch=2, seed=7)
        assert tune.params == {
            "shapes": {"input": [2, 16]}, "target": "host", "opt_level": 3, "trials": 3,
            "time_budget_s": 60.0, "batch": 2, "seed": 7,
        }  # fmt: skip
        assert [t.id for t in client.list_tuning_jobs()] == [tune.id]
        assert client.get_tuning_job(tune.id).progress is None
        assert client.cancel_tuning_job(tune.id).state == "cancelled"

        exported = client.export_records(tmp_path / "records.jsonl")
        assert exported.startswith('{"format":"temper-records"')
        assert (tmp_path / "records.jsonl").read_text() == exported
        assert admin.import_records(tmp_path / "records.jsonl").records_added == 0
        with pytest.raises(ApiError) as refused:
            client.import_records(exported.encode())
        assert (refused.value.status, refused.value.code) == (403, "forbidden")

        client.delete_model(model.id)
        assert client.list_models() == []
        with pytest.raises(ApiError) as missing:
            client.get_model(model.id)
        assert missing.value.status == 404 and model.id in missing.value.message
        with pytest.raises(ApiError) as bad:
            client.upload_model(b"not onnx")
        assert (bad.value.status, bad.value.code) == (422, "invalid_model")
