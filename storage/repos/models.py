"""Models: the ONNX files tenants upload (their bytes are blobs; here, what is known about them).

Deleting a model only marks it deleted, so the jobs and artifacts made from it keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import ModelRow
from storage.repos.common import _new_id, _now, _require_write


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    tenant_id: int
    name: str
    sha256: str
    size: int
    blob_key: str
    summary: dict[str, Any]
    created_at: datetime
    deleted_at: datetime | None = None


def create_model(
    s: Session,
    *,
    tenant_id: int,
    name: str,
    sha256: str,
    size: int,
    blob_key: str,
    summary: Mapping[str, Any],
) -> ModelInfo:
    _require_write(s)
    row = ModelRow(
        id=_new_id(),
        tenant_id=tenant_id,
        name=name,
        sha256=sha256,
        size=size,
        blob_key=blob_key,
        summary=dict(summary),
        created_at=_now(),
    )
    s.add(row)
    s.flush()
    return _model(row)


def list_models(s: Session, tenant_id: int) -> list[ModelInfo]:
    """The tenant's models (not deleted), newest first."""
    stmt = (
        select(ModelRow)
        .where(ModelRow.tenant_id == tenant_id, ModelRow.deleted_at.is_(None))
        .order_by(ModelRow.created_at.desc(), ModelRow.id)
    )
    return [_model(row) for row in s.scalars(stmt)]


def get_model(s: Session, tenant_id: int, id: str, *, include_deleted: bool = False) -> ModelInfo | None:
    """The tenant's model; None for an unknown id, another tenant's, or (unless asked) a deleted one."""
    row = _model_row(s, tenant_id, id, include_deleted)
    return None if row is None else _model(row)


def delete_model(s: Session, *, tenant_id: int, id: str) -> bool:
    """Mark the model deleted (its jobs and artifacts stay); False when there was none to delete."""
    _require_write(s)
    row = _model_row(s, tenant_id, id, False)
    if row is None:
        return False
    row.deleted_at = _now()
    s.flush()
    return True


def _model_row(s: Session, tenant_id: int, id: str, include_deleted: bool) -> ModelRow | None:
    stmt = select(ModelRow).where(ModelRow.id == id, ModelRow.tenant_id == tenant_id)
    if not include_deleted:
        stmt = stmt.where(ModelRow.deleted_at.is_(None))
    return s.scalar(stmt)


def _model(row: ModelRow) -> ModelInfo:
    return ModelInfo(
        row.id,
        row.tenant_id,
        row.name,
        row.sha256,
        row.size,
        row.blob_key,
        dict(row.summary),
        row.created_at,
        row.deleted_at,
    )
