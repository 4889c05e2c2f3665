"""API keys and authentication: which tenant (and whether as an admin) a request's key speaks for."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from storage.models import ApiKeyRow, TenantRow
from storage.repos.common import _now, _require_write
from storage.repos.tenants import get_or_create_tenant

KEY_PREFIX = "tk_"


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    id: int
    tenant_id: int
    tenant_name: str
    prefix: str  # the first characters of the key: enough to recognise it, useless to use it
    is_admin: bool
    created_at: datetime
    revoked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant an API key belongs to."""

    tenant_id: int
    tenant_name: str
    is_admin: bool


def create_api_key(s: Session, *, tenant_name: str, is_admin: bool = False) -> tuple[str, ApiKeyInfo]:
    """A new key for the tenant (created if new): (the key, shown only now; what is stored about it).

    Only the key's sha256 is stored, so a leaked database does not leak usable keys.
    """
    tenant = get_or_create_tenant(s, name=tenant_name)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKeyRow(
        tenant_id=tenant.id, key_hash=hash_key(key), prefix=key[:8], is_admin=is_admin, created_at=_now()
    )
    s.add(row)
    s.flush()
    return key, _key_info(row, tenant.name)


def authenticate(s: Session, key: str) -> Principal | None:
    """The tenant a (not revoked) key belongs to; None for an unknown or revoked key."""
    if not key or len(key) > 512:
        return None
    digest = hash_key(key)
    found = s.execute(
        select(ApiKeyRow, TenantRow.name)
        .join(TenantRow, TenantRow.id == ApiKeyRow.tenant_id)
        .where(ApiKeyRow.key_hash == digest, ApiKeyRow.revoked_at.is_(None))
    ).first()
    if found is None:
        return None
    row, tenant_name = found
    if not hmac.compare_digest(row.key_hash, digest):
        return None
    return Principal(row.tenant_id, tenant_name, row.is_admin)


def list_api_keys(s: Session, tenant_name: str | None = None) -> list[ApiKeyInfo]:
    """Every key (of one tenant), oldest first, revoked ones included."""
    stmt = select(ApiKeyRow, TenantRow.name).join(TenantRow, TenantRow.id == ApiKeyRow.tenant_id)
    if tenant_name is not None:
        stmt = stmt.where(TenantRow.name == tenant_name)
    return [_key_info(row, name) for row, name in s.execute(stmt.order_by(ApiKeyRow.id))]


def revoke_api_key(s: Session, *, key_id: int) -> ApiKeyInfo | None:
    """Revoke a key by id (idempotent); None when there is no such key."""
    _require_write(s)
    found = s.execute(
        select(ApiKeyRow, TenantRow.name)
        .join(TenantRow, TenantRow.id == ApiKeyRow.tenant_id)
        .where(ApiKeyRow.id == key_id)
    ).first()
    if found is None:
        return None
    row, tenant_name = found
    if row.revoked_at is None:
        row.revoked_at = _now()
        s.flush()
    return _key_info(row, tenant_name)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _key_info(row: ApiKeyRow, tenant_name: str) -> ApiKeyInfo:
    return ApiKeyInfo(
        row.id, row.tenant_id, tenant_name, row.prefix, row.is_admin, row.created_at, row.revoked_at
    )
