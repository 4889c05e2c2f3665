"""Artifacts: the compiled libraries compile jobs produce (their bytes are blobs; here, their
manifest and whose they are)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import ArtifactRow
from storage.repos.common import _new_id, _now, _require_write


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    id: str
    tenant_id: int
    compilation_id: str
    sha256: str
    size: int
    blob_key: str
    manifest: dict[str, Any]
    created_at: datetime


def create_artifact(
    s: Session,
    *,
    tenant_id: int,
    compilation_id: str,
    sha256: str,
    size: int,
    blob_key: str,
    manifest: Mapping[str, Any],
) -> ArtifactInfo:
    _require_write(s)
    row = ArtifactRow(
        id=_new_id(),
        tenant_id=tenant_id,
        compilation_id=compilation_id,
        sha256=sha256,
        size=size,
        blob_key=blob_key,
        manifest=dict(manifest),
        created_at=_now(),
    )
    s.add(row)
    s.flush()
    return _artifact(row)


def get_artifact(s: Session, tenant_id: int, id: str) -> ArtifactInfo | None:
    """The tenant's artifact; None for an unknown id or another tenant's."""
    row = s.scalar(select(ArtifactRow).where(ArtifactRow.id == id, ArtifactRow.tenant_id == tenant_id))
    return None if row is None else _artifact(row)


def _artifact(row: ArtifactRow) -> ArtifactInfo:
    return ArtifactInfo(
        row.id,
        row.tenant_id,
        row.compilation_id,
        row.sha256,
        row.size,
        row.blob_key,
        dict(row.manifest),
        row.created_at,
    )
