"""What the resource routers share: documented error responses, lookups that 404, job checks."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import Request

from compiler.pipeline import CompileOptions
from compiler.target import parse_target
from service.deps import PrincipalDep, Services
from service.errors import InvalidInputError, NotFoundError, UnsupportedMediaTypeError
from service.sandbox import run_limited
from service.schemas import CompilationOut, ErrorOut, ModelOut, ProgressOut, TuningJobOut
from storage import repos as repo
from storage.repos import JobInfo, JobKind, ModelInfo, Principal
from tuner.progress import Progress
from tuner.task import extract_tasks

_ID = re.compile(r"[0-9a-f]{32}")

_DESCRIPTIONS = {
    400: "Malformed request (e.g. a body that is not JSON).",
    401: "Missing or invalid API key.",
    403: "The key may not do this (admin only).",
    404: "No such resource for this tenant.",
    413: "The upload is over the size limit.",
    409: "The resource cannot do this here (e.g. an artifact built for a CPU this server is not).",
    415: "Wrong content type.",
    422: "Invalid input; the message names what was wrong.",
    503: "The database is unavailable.",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, all with the JSON error body."""
    return {s: {"model": ErrorOut, "description": _DESCRIPTIONS[s]} for s in statuses}


def json_body(request: Request, _principal: PrincipalDep) -> None:
    """JSON routes refuse other media types with a 415 (after the key check)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaTypeError(f"send the request body as application/json, not {media}")


def is_id(value: str) -> bool:
    """Ids are uuid4 hex; anything else names nothing (and never reaches the database)."""
    return bool(_ID.fullmatch(value))


def model_or_404(services: Services, principal: Principal, model_id: str) -> ModelInfo:
    info = None
    if is_id(model_id):
        with services.db.read_session() as session:
            info = repo.get_model(session, principal.tenant_id, model_id)
    if info is None:
        raise NotFoundError.of("model", model_id)
    return info


def job_or_404(services: Services, principal: Principal, kind: JobKind, job_id: str) -> JobInfo:
    info = None
    if is_id(job_id):
        with services.db.read_session() as session:
            info = repo.get_job(session, kind, principal.tenant_id, job_id)
    if info is None:
        raise NotFoundError.of("compilation" if kind == "compile" else "tuning job", job_id)
    return info


def model_out(info: ModelInfo) -> ModelOut:
    summary = dict(info.summary or {})
    return ModelOut(
        id=info.id,
        name=info.name,
        sha256=info.sha256,
        size=info.size,
        inputs=summary.get("inputs", []),
        outputs=summary.get("outputs", []),
        op_counts=summary.get("op_counts", {}),
        shapes=summary.get("shapes", {}),
        unbound=summary.get("unbound", []),
        tasks=summary.get("tasks", []),
        flops=summary.get("flops", 0),
        created_at=info.created_at,
    )


def _job_fields(job: JobInfo) -> dict[str, Any]:
    return {
        "id": job.id,
        "state": job.state,
        "model_id": job.model_id,
        "params": dict(job.params or {}),
        "error": job.error,
        "attempts": job.attempts,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def compilation_out(job: JobInfo) -> CompilationOut:
    return CompilationOut(**_job_fields(job), artifact_id=getattr(job, "artifact_id", None))


def tuning_out(job: JobInfo) -> TuningJobOut:
    progress = getattr(job, "progress", None)
    if progress:  # read through the one definition, which also reads what older servers stored
        progress = Progress.from_json(progress).to_json()
    return TuningJobOut(
        **_job_fields(job), progress=ProgressOut.model_validate(progress) if progress else None
    )


def job_shapes(
    services: Services,
    model: ModelInfo,
    shapes: Mapping[str, Sequence[int]] | None,
    target: str,
    opt_level: int,
) -> dict[str, list[int]]:
    """The shapes a job will compile with, checked now so a bad request fails here, not in a worker.

    Shapes default to those bound at upload. The target is parsed (unknown CPU names are 422), and
    shapes other than the upload's go through the frontend, which names every problem.
    """
    parse_target(target)
    summary = dict(model.summary or {})
    stored = {k: list(v) for k, v in (summary.get("shapes") or {}).items()}
    chosen = stored if shapes is None else {k: list(v) for k, v in shapes.items()}
    if chosen == stored and not summary.get("unbound"):
        return chosen
    missing = [name for name in summary.get("unbound", []) if name not in chosen]
    if missing:
        raise InvalidInputError(
            f"input(s) {', '.join(repr(m) for m in missing)} have dynamic dims: give their shapes",
            code="invalid_shapes",
        )
    data = services.blobs.read_bytes(model.blob_key)
    options = CompileOptions(
        target=target, opt_level=opt_level, shapes={k: tuple(v) for k, v in chosen.items()}
    )
    extract_tasks(data, options)  # the frontend and lowering: ShapeError etc. name what is wrong
    return chosen


def sandboxed(services: Services, fn: Callable[..., Any], *args: Any, what: str) -> Any:
    """fn(*args) under the compile limits (service.sandbox), never in the API process itself."""
    settings = services.settings
    return run_limited(
        fn, *args, seconds=settings.compile_timeout_s, memory_bytes=settings.compile_memory_bytes, what=what
    )
