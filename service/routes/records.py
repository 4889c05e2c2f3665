"""/v1/records: tuning records as JSON lines, the same versioned format as `temper records`.

Records are shared by every tenant (a schedule's speed does not depend on who measured it), so any
key may export them; only an admin key may import, since imported records steer everyone's builds.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask
from starlette.datastructures import UploadFile

from compiler.target import describe_key, target_key
from service.deps import AdminDep, PrincipalDep, ServicesDep
from service.errors import InvalidInputError, UnsupportedMediaTypeError
from service.routes.common import errors, model_or_404
from service.schemas import ImportOut, RecordOut, TargetOut
from storage import export_records, import_records

router = APIRouter(prefix="/v1/records", tags=["records"], responses=errors(401, 422))

JSONL = "application/x-ndjson"
# Raw bodies accepted as a records file; multipart/form-data with a `file` part works too.
RAW_MEDIA_TYPES = frozenset(
    {JSONL, "application/jsonl", "application/json-lines", "application/jsonlines", "text/plain",
     "application/octet-stream"}
)  # fmt: skip


@router.get(
    "",
    summary="List tuning records (ids for NODE=record:ID overrides, times, dates)",
    responses=errors(404),
)
def list_records(
    principal: PrincipalDep,
    services: ServicesDep,
    target: Annotated[
        str | None, Query(max_length=255, description="'host', an LLVM CPU name or a target key.")
    ] = None,
    model_id: Annotated[str | None, Query(description="Only the records of this model's kernels.")] = None,
    best: Annotated[bool, Query(description="Only the record compiles use per kernel and target.")] = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 200,
) -> list[RecordOut]:
    """Fastest first per kernel and target; a model's kernels are those of its upload's shapes."""
    keys = None
    if model_id is not None:
        model = model_or_404(services, principal, model_id)
        keys = [t["key"] for t in (model.summary or {}).get("tasks", [])]
    key = target_key(target) if target is not None else None
    rows = services.db.listing(key, keys, best=best, limit=limit)
    return [RecordOut.model_validate(r.to_json()) for r in rows]


@router.get("/targets", summary="The targets with tuning records, in words")
def list_targets(_principal: PrincipalDep, services: ServicesDep) -> list[TargetOut]:
    counts = services.db.target_counts()
    return [TargetOut(key=k, records=n, description=describe_key(k)) for k, n in sorted(counts.items())]


@router.get(
    "/export",
    summary="Export tuning records (JSON lines)",
    response_class=FileResponse,
    responses={200: {"content": {JSONL: {"schema": {"type": "string"}}}, "description": "The records file."}},
)
def export(
    _principal: PrincipalDep,
    services: ServicesDep,
    target: Annotated[
        str | None, Query(max_length=255, description="Only the records of this target key.")
    ] = None,
) -> FileResponse:
    """Written to a temporary file first: one consistent snapshot, and a Content-Length."""
    tmp_dir = services.settings.data_dir / "tmp"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=tmp_dir, prefix="export-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            summary = export_records(services.db, out, target_key=target)
    except BaseException:
        os.unlink(name)
        raise
    return FileResponse(
        name,
        media_type=JSONL,
        filename="records.jsonl",
        headers={"X-Workloads": str(summary.workloads), "X-Records": str(summary.records)},
        background=BackgroundTask(os.unlink, name),
    )


async def _records_bytes(request: Request) -> bytes:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media == "multipart/form-data":
        form = await request.form()
        part = form.get("file")
        if not isinstance(part, UploadFile):
            raise InvalidInputError("multipart body has no 'file' part holding the records file")
        return await part.read()
    if media in RAW_MEDIA_TYPES:
        return await request.body()
    raise UnsupportedMediaTypeError(
        f"send the records as {JSONL} (or multipart/form-data with a 'file' part), "
        f"not {media or 'no content type'}"
    )


@router.post(
    "/import",
    summary="Import tuning records (admin; all lines or none)",
    responses=errors(400, 403, 413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                JSONL: {"schema": {"type": "string"}},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {"file": {"type": "string", "format": "binary"}},
                        "required": ["file"],
                    }
                },
            },
        }
    },
)
async def import_(request: Request, _admin: AdminDep, services: ServicesDep) -> ImportOut:
    data = await _records_bytes(request)
    try:
        text = io.StringIO(data.decode("utf-8"), newline=None)
    except UnicodeDecodeError as e:
        raise InvalidInputError(
            f"records file is not UTF-8 text ({e.reason} at byte {e.start})", code="invalid_records"
        ) from None
    summary = await run_in_threadpool(import_records, services.db, text)
    return ImportOut(
        workloads_added=summary.workloads_added,
        records_added=summary.records_added,
        records_skipped=summary.records_skipped,
    )
