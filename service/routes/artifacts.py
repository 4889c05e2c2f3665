"""/v1/artifacts: download compiled artifacts (streamed, with their sha256) and read manifests."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse

from service.deps import PrincipalDep, ServicesDep
from service.errors import NotFoundError
from service.profiling import MAX_RUNS, profile_artifact
from service.routes.common import errors, is_id, sandboxed
from service.schemas import ProfileOut
from storage import repos as repo
from storage.blobs import BlobError
from storage.repos import ArtifactInfo, Principal

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"], responses=errors(401, 404, 422))

SHA256_HEADER = "X-Content-SHA256"


def _artifact_or_404(services: ServicesDep, principal: Principal, artifact_id: str) -> ArtifactInfo:
    info = None
    if is_id(artifact_id):
        with services.db.read_session() as session:
            info = repo.get_artifact(session, principal.tenant_id, artifact_id)
    if info is None:
        raise NotFoundError.of("artifact", artifact_id)
    return info


@router.get(
    "/{artifact_id}",
    summary="Download an artifact",
    response_class=FileResponse,
    responses={
        200: {
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            "description": "The artifact file; its sha256 is in the X-Content-SHA256 header.",
            "headers": {
                SHA256_HEADER: {"description": "sha256 of the body (hex).", "schema": {"type": "string"}}
            },
        }
    },
)
def download_artifact(artifact_id: str, principal: PrincipalDep, services: ServicesDep) -> FileResponse:
    info = _artifact_or_404(services, principal, artifact_id)
    path = services.blobs.path(info.blob_key)
    if not path.is_file():
        raise NotFoundError(f"artifact {artifact_id!r} has lost its file (blob {info.blob_key})")
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=f"{artifact_id}.temper",
        headers={SHA256_HEADER: info.sha256},
    )


@router.get("/{artifact_id}/manifest", summary="An artifact's manifest (kernels, schedules, provenance)")
def artifact_manifest(artifact_id: str, principal: PrincipalDep, services: ServicesDep) -> dict[str, Any]:
    return dict(_artifact_or_404(services, principal, artifact_id).manifest)


@router.get(
    "/{artifact_id}/profile",
    summary="Run the artifact on the server: each kernel's time, beside onnxruntime's per-node profile",
    responses=errors(409),
)
def artifact_profile(
    artifact_id: str,
    principal: PrincipalDep,
    services: ServicesDep,
    runs: Annotated[int, Query(ge=1, le=MAX_RUNS, description="Runs to take the medians over.")] = 10,
) -> ProfileOut:
    info = _artifact_or_404(services, principal, artifact_id)
    path = services.blobs.path(info.blob_key)
    if not path.is_file():
        raise NotFoundError(f"artifact {artifact_id!r} has lost its file (blob {info.blob_key})")
    model = _model_bytes(services, principal, info)
    key = services.settings.artifact_key
    secret = None if key is None else key.get_secret_value().encode()
    result = sandboxed(
        services, profile_artifact, path.read_bytes(), secret, model, runs, what="the artifact's profile"
    )
    return ProfileOut.model_validate(result)


def _model_bytes(services: ServicesDep, principal: Principal, info: ArtifactInfo) -> bytes | None:
    """The ONNX model the artifact was compiled from (None when it is gone)."""
    with services.db.read_session() as session:
        job = repo.get_job(session, "compile", principal.tenant_id, info.compilation_id)
        tenant = principal.tenant_id
        model = None if job is None else repo.get_model(session, tenant, job.model_id, include_deleted=True)
    if model is None:
        return None
    try:
        return services.blobs.read_bytes(model.blob_key)
    except BlobError:
        return None
