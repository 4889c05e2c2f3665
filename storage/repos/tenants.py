"""Tenants: the accounts that own models, jobs and artifacts, each isolated from the others."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.errors import StorageError
from storage.models import TenantRow
from storage.repos.common import _insert, _now, _require_write


class TenantExistsError(StorageError):
    def __init__(self, name: str) -> None:
        super().__init__(f"tenant {name!r} already exists")
        self.name = name


@dataclass(frozen=True, slots=True)
class Tenant:
    id: int
    name: str
    created_at: datetime


def create_tenant(s: Session, *, name: str) -> Tenant:
    """A new tenant; TenantExistsError when the name is taken."""
    _require_write(s)
    name = _tenant_name(name)
    if s.scalar(select(TenantRow.id).where(TenantRow.name == name)) is not None:
        raise TenantExistsError(name)
    row = TenantRow(name=name, created_at=_now())
    s.add(row)
    s.flush()
    return _tenant(row)


def get_or_create_tenant(s: Session, *, name: str) -> Tenant:
    """The tenant with this name, created if new (safe when two processes create it at once)."""
    _require_write(s)
    name = _tenant_name(name)
    insert = _insert(s, TenantRow).values(name=name, created_at=_now())
    s.execute(insert.on_conflict_do_nothing(index_elements=["name"]))
    row = s.scalars(select(TenantRow).where(TenantRow.name == name)).one()
    return _tenant(row)


def get_tenant(s: Session, name: str) -> Tenant | None:
    row = s.scalar(select(TenantRow).where(TenantRow.name == name))
    return None if row is None else _tenant(row)


def _tenant_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 255:
        raise ValueError("a tenant name must have 1 to 255 characters")
    return name


def _tenant(row: TenantRow) -> Tenant:
    return Tenant(row.id, row.name, row.created_at)
