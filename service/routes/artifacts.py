"""/v1/artifacts: download compiled artifacts (streamed, with their sha256) and read manifests."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import FileResponse

from service.deps import PrincipalDep, ServicesDep
from service.errors import NotFoundError
from service.routes.common import errors, is_id
from storage import repos as repo
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
