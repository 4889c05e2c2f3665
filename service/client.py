"""A Python client for the temper HTTP API: one method per endpoint, typed results.

    with Client("http://127.0.0.1:8000", api_key) as c:
        model = c.upload_model("model.onnx", shapes={"x": [1, 3, 224, 224]})
        job = c.wait_tuning_job(c.create_tuning_job(model.id, trials=64).id)
        comp = c.wait_compilation(c.create_compilation(model.id).id)
        c.download_artifact(comp.artifact_id, "model.temper")   # checks the sha256

Every non-2xx response raises ApiError carrying the server's error code and message.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from service.schemas import (
    CompilationOut,
    HealthOut,
    ImportOut,
    ModelOut,
    ProfileOut,
    RecordOut,
    Stage,
    TargetOut,
    TuningJobOut,
)

T = TypeVar("T")
FINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
SHA256_HEADER = "X-Content-SHA256"
_CHUNK = 1 << 20


class ApiError(Exception):
    """An error response: HTTP status, the server's error code and its message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} (HTTP {status}, {code})")
        self.status = status
        self.code = code
        self.message = message


class IntegrityError(Exception):
    """A downloaded artifact whose sha256 is not the one the server announced."""


def _raise_for(response: httpx.Response) -> None:
    if response.is_success:
        return
    response.read()
    code, message = "http_error", response.text.strip() or response.reason_phrase
    try:
        body = response.json()
        code, message = str(body["error"]["code"]), str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        pass
    raise ApiError(response.status_code, code, message)


def _shapes(shapes: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]] | None:
    return None if shapes is None else {k: [int(d) for d in v] for k, v in shapes.items()}


class Client:
    """The API at `base_url` with `api_key` (sent as a bearer token)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        _raise_for(response)
        return response

    def _typed(self, kind: type[T], method: str, path: str, **kwargs: Any) -> T:
        data = self._request(method, path, **kwargs).json()
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind.model_validate(data)
        return TypeAdapter(kind).validate_python(data)

    # --- health --------------------------------------------------------------------------------

    def health(self) -> HealthOut:
        return self._typed(HealthOut, "GET", "/healthz")

    def metrics(self) -> str:
        return self._request("GET", "/metrics").text

    # --- models --------------------------------------------------------------------------------

    def upload_model(
        self,
        model: str | os.PathLike[str] | bytes,
        *,
        name: str | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        filename: str | None = None,
    ) -> ModelOut:
        """Upload an ONNX file (path or bytes); `shapes` binds dynamic input dims."""
        if isinstance(model, bytes):
            content, fname = model, filename or "model.onnx"
        else:
            path = Path(model)
            content, fname = path.read_bytes(), filename or path.name
        data: dict[str, str] = {}
        if name is not None:
            data["name"] = name
        if shapes is not None:
            data["shapes"] = json.dumps(_shapes(shapes))
        files = {"file": (fname, content, "application/octet-stream")}
        return self._typed(ModelOut, "POST", "/v1/models", files=files, data=data)

    def list_models(self) -> list[ModelOut]:
        return self._typed(list[ModelOut], "GET", "/v1/models")

    def get_model(self, model_id: str) -> ModelOut:
        return self._typed(ModelOut, "GET", f"/v1/models/{model_id}")

    def delete_model(self, model_id: str) -> None:
        self._request("DELETE", f"/v1/models/{model_id}")

    def model_ir(
        self,
        model_id: str,
        stage: Stage,
        *,
        kernel: str | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        target: str = "host",
        opt_level: int = 3,
        use_tuned: bool = False,
    ) -> str:
        params: dict[str, Any] = {
            "stage": stage,
            "target": target,
            "opt_level": opt_level,
            "use_tuned": use_tuned,
        }
        if kernel is not None:
            params["kernel"] = kernel
        if shapes is not None:
            params["shapes"] = json.dumps(_shapes(shapes))
        return self._request("GET", f"/v1/models/{model_id}/ir", params=params).text

    def explain(
        self,
        model_id: str,
        *,
        node: str | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        target: str = "host",
        opt_level: int = 3,
        use_tuned: bool = True,
        profile: bool = False,
    ) -> dict[str, Any]:
        """`temper explain` for an uploaded model (compiler.explain.Explanation.to_json())."""
        params: dict[str, Any] = {
            "target": target,
            "opt_level": opt_level,
            "use_tuned": use_tuned,
            "profile": profile,
        }
        if node is not None:
            params["node"] = node
        if shapes is not None:
            params["shapes"] = json.dumps(_shapes(shapes))
        result: dict[str, Any] = self._request("GET", f"/v1/models/{model_id}/explain", params=params).json()
        return result

    # --- compilations --------------------------------------------------------------------------

    def create_compilation(
        self,
        model_id: str,
        *,
        shapes: Mapping[str, Sequence[int]] | None = None,
        target: str = "host",
        opt_level: int = 3,
        use_tuned: bool = True,
        overrides: Mapping[str, str | dict[str, Any]] | None = None,
    ) -> CompilationOut:
        """`overrides`: ONNX node name -> "record:ID" or a schedule trace (JSON object)."""
        body = {
            "model_id": model_id,
            "shapes": _shapes(shapes),
            "target": target,
            "opt_level": opt_level,
            "use_tuned": use_tuned,
            "overrides": dict(overrides or {}),
        }
        return self._typed(CompilationOut, "POST", "/v1/compilations", json=body)

    def list_compilations(self, state: str | None = None) -> list[CompilationOut]:
        params = {"state": state} if state else None
        return self._typed(list[CompilationOut], "GET", "/v1/compilations", params=params)

    def get_compilation(self, compilation_id: str) -> CompilationOut:
        return self._typed(CompilationOut, "GET", f"/v1/compilations/{compilation_id}")

    def cancel_compilation(self, compilation_id: str) -> CompilationOut:
        return self._typed(CompilationOut, "POST", f"/v1/compilations/{compilation_id}/cancel")

    def wait_compilation(
        self,
        compilation_id: str,
        *,
        timeout: float | None = None,
        poll: float = 0.5,
        on_update: Callable[[CompilationOut], None] | None = None,
    ) -> CompilationOut:
        """Poll until the compilation is succeeded, failed or cancelled (TimeoutError after `timeout`)."""
        return _wait(lambda: self.get_compilation(compilation_id), timeout, poll, on_update)

    # --- tuning jobs ---------------------------------------------------------------------------

    def create_tuning_job(
        self,
        model_id: str,
        *,
        shapes: Mapping[str, Sequence[int]] | None = None,
        target: str = "host",
        opt_level: int = 3,
        trials: int = 64,
        time_budget_s: float | None = None,
        batch: int = 8,
        seed: int = 0,
    ) -> TuningJobOut:
        body = {
            "model_id": model_id,
            "shapes": _shapes(shapes),
            "target": target,
            "opt_level": opt_level,
            "trials": trials,
            "time_budget_s": time_budget_s,
            "batch": batch,
            "seed": seed,
        }
        return self._typed(TuningJobOut, "POST", "/v1/tuning-jobs", json=body)

    def list_tuning_jobs(self, state: str | None = None) -> list[TuningJobOut]:
        params = {"state": state} if state else None
        return self._typed(list[TuningJobOut], "GET", "/v1/tuning-jobs", params=params)

    def get_tuning_job(self, job_id: str) -> TuningJobOut:
        return self._typed(TuningJobOut, "GET", f"/v1/tuning-jobs/{job_id}")

    def cancel_tuning_job(self, job_id: str) -> TuningJobOut:
        return self._typed(TuningJobOut, "POST", f"/v1/tuning-jobs/{job_id}/cancel")

    def wait_tuning_job(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        poll: float = 1.0,
        on_update: Callable[[TuningJobOut], None] | None = None,
    ) -> TuningJobOut:
        """Poll until the job is finished; `on_update` sees every poll (progress included)."""
        return _wait(lambda: self.get_tuning_job(job_id), timeout, poll, on_update)

    # --- artifacts -----------------------------------------------------------------------------

    def download_artifact(self, artifact_id: str, destination: str | os.PathLike[str]) -> str:
        """Stream the artifact to `destination` (written only once its sha256 checks out); returns it."""
        dest = Path(destination)
        tmp = dest.with_name(f".{dest.name}.part")
        digest = hashlib.sha256()
        with self._http.stream("GET", f"/v1/artifacts/{artifact_id}") as response:
            _raise_for(response)
            expected = response.headers.get(SHA256_HEADER, "")
            try:
                with open(tmp, "wb") as out:
                    for chunk in response.iter_bytes(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                if digest.hexdigest() != expected:
                    raise IntegrityError(
                        f"artifact {artifact_id}: sha256 {digest.hexdigest()} differs from "
                        f"the announced {expected!r}"
                    )
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        return digest.hexdigest()

    def artifact_manifest(self, artifact_id: str) -> dict[str, Any]:
        return self._typed(dict[str, Any], "GET", f"/v1/artifacts/{artifact_id}/manifest")

    def artifact_profile(self, artifact_id: str, runs: int = 10) -> ProfileOut:
        """The artifact run on the server: each kernel's median time, beside onnxruntime's profile."""
        return self._typed(ProfileOut, "GET", f"/v1/artifacts/{artifact_id}/profile", params={"runs": runs})

    # --- records -------------------------------------------------------------------------------

    def list_records(
        self, *, target: str | None = None, model_id: str | None = None, best: bool = False, limit: int = 200
    ) -> list[RecordOut]:
        params: dict[str, Any] = {"best": best, "limit": limit}
        if target is not None:
            params["target"] = target
        if model_id is not None:
            params["model_id"] = model_id
        return self._typed(list[RecordOut], "GET", "/v1/records", params=params)

    def list_targets(self) -> list[TargetOut]:
        return self._typed(list[TargetOut], "GET", "/v1/records/targets")

    def export_records(
        self, destination: str | os.PathLike[str] | None = None, *, target: str | None = None
    ) -> str:
        """The records file as text (also written to `destination` when given)."""
        params = {"target": target} if target else None
        text = self._request("GET", "/v1/records/export", params=params).text
        if destination is not None:
            Path(destination).write_text(text, encoding="utf-8")
        return text

    def import_records(self, records: str | os.PathLike[str] | bytes) -> ImportOut:
        """Import a records file (path or its bytes); needs an admin key."""
        content = records if isinstance(records, bytes) else Path(records).read_bytes()
        headers = {"Content-Type": "application/x-ndjson"}
        return self._typed(ImportOut, "POST", "/v1/records/import", content=content, headers=headers)


def _wait(
    get: Callable[[], T], timeout: float | None, poll: float, on_update: Callable[[T], None] | None
) -> T:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        job = get()
        if on_update is not None:
            on_update(job)
        if getattr(job, "state", None) in FINAL_STATES:
            return job
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(
                f"job {getattr(job, 'id', '?')} still {getattr(job, 'state', '?')} after {timeout} s"
            )
        time.sleep(poll)
