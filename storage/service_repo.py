"""The service's queries: tenants and API keys, models, jobs and their leases, artifacts.

Plain functions over a SQLAlchemy Session that return frozen dataclasses, never ORM objects, so
callers (HTTP routes, workers) cannot trip over lazy loading or expired rows. Nothing here commits:
the caller's session block is the transaction. Functions that write must be given a write session
(`SqlDatabase.write_session()`): on SQLite its transaction holds the write lock from BEGIN
(IMMEDIATE), so a read-then-write here never fails half-way because another process wrote first.

Jobs and leases: a worker claims the oldest claimable job (queued, or running with an expired
lease: its worker died), holds it for `lease_s` seconds and renews the lease with `heartbeat` while
it works. Claiming is safe with many workers at once: on PostgreSQL the candidate row is locked
with SELECT ... FOR UPDATE SKIP LOCKED (concurrent claimers take different rows), on SQLite the
whole claim runs under the database's write lock. Every update a worker makes is conditioned on
still owning the job, so a worker that lost its lease can no longer change it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from storage.errors import StorageError
from storage.models import (
    JOB_STATES,
    ApiKeyRow,
    ArtifactRow,
    CompilationRow,
    ModelRow,
    TenantRow,
    TuningJobRow,
)
from storage.session import _WRITE_OPTION

JobKind = Literal["compile", "tune"]
JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
JOB_KINDS: tuple[JobKind, ...] = get_args(JobKind)
TERMINAL_STATES: tuple[JobState, ...] = ("succeeded", "failed", "cancelled")
MAX_ATTEMPTS = 5  # claims of one job; a job whose workers keep dying is failed, not retried forever
KEY_PREFIX = "tk_"
_TABLES: dict[str, type[CompilationRow] | type[TuningJobRow]] = {
    "compile": CompilationRow,
    "tune": TuningJobRow,
}
assert set(JOB_STATES) == set(get_args(JobState))


class NotWriteSessionError(StorageError):
    """A write function was given a read session (use SqlDatabase.write_session())."""


class TenantExistsError(StorageError):
    def __init__(self, name: str) -> None:
        super().__init__(f"tenant {name!r} already exists")
        self.name = name


class UnknownModelError(StorageError, LookupError):
    """A job names a model the tenant does not have."""

    def __init__(self, model_id: str) -> None:
        super().__init__(f"no model {model_id!r}")
        self.model_id = model_id


# --- what callers get back ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tenant:
    id: int
    name: str
    created_at: datetime


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


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: str
    kind: JobKind
    tenant_id: int
    model_id: str
    params: dict[str, Any]
    state: JobState
    error: str | None
    artifact_id: str | None  # compile jobs that succeeded
    progress: dict[str, Any] | None  # tuning jobs
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool = False
    worker_id: str | None = None
    lease_expires_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


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


# --- tenants and keys ---------------------------------------------------------------------------


def create_tenant(s: Session, name: str) -> Tenant:
    """A new tenant; TenantExistsError when the name is taken."""
    _require_write(s)
    name = _tenant_name(name)
    if s.scalar(select(TenantRow.id).where(TenantRow.name == name)) is not None:
        raise TenantExistsError(name)
    row = TenantRow(name=name, created_at=_now())
    s.add(row)
    s.flush()
    return _tenant(row)


def get_or_create_tenant(s: Session, name: str) -> Tenant:
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


def create_api_key(s: Session, tenant_name: str, is_admin: bool = False) -> tuple[str, ApiKeyInfo]:
    """A new key for the tenant (created if new): (the key, shown only now; what is stored about it).

    Only the key's sha256 is stored, so a leaked database does not leak usable keys.
    """
    tenant = get_or_create_tenant(s, tenant_name)
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


def revoke_api_key(s: Session, key_id: int) -> ApiKeyInfo | None:
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


# --- models -------------------------------------------------------------------------------------


def create_model(
    s: Session, tenant_id: int, name: str, sha256: str, size: int, blob_key: str, summary: Mapping[str, Any]
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


def delete_model(s: Session, tenant_id: int, id: str) -> bool:
    """Mark the model deleted (its jobs and artifacts stay); False when there was none to delete."""
    _require_write(s)
    row = _model_row(s, tenant_id, id, False)
    if row is None:
        return False
    row.deleted_at = _now()
    s.flush()
    return True


# --- jobs: what users ask for -------------------------------------------------------------------


def create_job(
    s: Session, kind: JobKind, tenant_id: int, model_id: str, params: Mapping[str, Any]
) -> JobInfo:
    """A queued job on one of the tenant's models; UnknownModelError when it has no such model."""
    _require_write(s)
    table = _table(kind)
    if _model_row(s, tenant_id, model_id, False) is None:
        raise UnknownModelError(model_id)
    row = table(
        id=_new_id(),
        tenant_id=tenant_id,
        model_id=model_id,
        params=dict(params),
        state="queued",
        attempts=0,
        cancel_requested=False,
        created_at=_now(),
    )
    s.add(row)
    s.flush()
    return _job(kind, row)


def get_job(s: Session, kind: JobKind, tenant_id: int, id: str) -> JobInfo | None:
    """The tenant's job; None for an unknown id or another tenant's."""
    table = _table(kind)
    row = s.scalar(select(table).where(table.id == id, table.tenant_id == tenant_id))
    return None if row is None else _job(kind, row)


def list_jobs(
    s: Session, kind: JobKind, tenant_id: int, *, state: JobState | None = None, limit: int | None = None
) -> list[JobInfo]:
    """The tenant's jobs of one kind (in one state), newest first."""
    table = _table(kind)
    stmt = select(table).where(table.tenant_id == tenant_id)
    if state is not None:
        stmt = stmt.where(table.state == state)
    stmt = stmt.order_by(table.created_at.desc(), table.id).limit(limit)
    return [_job(kind, row) for row in s.scalars(stmt)]


def request_cancel(s: Session, kind: JobKind, tenant_id: int, id: str) -> JobInfo | None:
    """Cancel a job: a queued one is cancelled at once, a running one is flagged (its worker stops
    at its next check and marks it cancelled), a finished one is left as it is. None if unknown."""
    _require_write(s)
    table = _table(kind)
    row = s.scalar(
        select(table).where(table.id == id, table.tenant_id == tenant_id).with_for_update()
    )  # waits for a worker claiming it right now, then sees it running
    if row is None:
        return None
    if row.state == "queued":
        row.state, row.finished_at, row.cancel_requested = "cancelled", _now(), True
    elif row.state == "running":
        row.cancel_requested = True
    s.flush()
    return _job(kind, row)


def count_jobs_by_state(s: Session) -> dict[tuple[JobKind, JobState], int]:
    """How many jobs of each kind are in each state (every pair present, zeros included)."""
    counts: dict[tuple[JobKind, JobState], int] = {(k, st): 0 for k in JOB_KINDS for st in JOB_STATES}  # type: ignore[misc]
    for kind in JOB_KINDS:
        table = _table(kind)
        for state, n in s.execute(select(table.state, func.count()).group_by(table.state)):
            counts[(kind, state)] = int(n)
    return counts


# --- jobs: what workers do ----------------------------------------------------------------------


def claim_job(
    s: Session,
    worker_id: str,
    lease_s: float,
    kinds: Sequence[JobKind] = JOB_KINDS,
    *,
    now: datetime | None = None,
) -> JobInfo | None:
    """Take the oldest claimable job of `kinds` for `worker_id`, leased for `lease_s` seconds.

    Claimable: queued, or running with an expired lease (taken over: its worker stopped
    renewing). Abandoned jobs that were asked to cancel become cancelled here, and those whose
    workers died MAX_ATTEMPTS times become failed. Returns None when there is nothing to do.
    """
    _require_write(s)
    now = now or _now()
    _settle_abandoned(s, kinds, now)
    best: tuple[JobKind, CompilationRow | TuningJobRow] | None = None
    for kind in kinds:
        table = _table(kind)
        claimable = and_(
            table.cancel_requested.is_(False),
            or_(
                table.state == "queued",
                and_(table.state == "running", table.lease_expires_at < now, table.attempts < MAX_ATTEMPTS),
            ),
        )
        stmt = (
            select(table)
            .where(claimable)
            .order_by(table.created_at, table.id)
            .limit(1)
            .with_for_update(skip_locked=True)  # PostgreSQL: concurrent claimers skip each other's row
        )
        row = s.scalar(stmt)
        if row is not None and (best is None or (row.created_at, row.id) < (best[1].created_at, best[1].id)):
            best = (kind, row)
    if best is None:
        return None
    kind, row = best
    row.state = "running"
    row.worker_id = worker_id
    row.lease_expires_at = now + timedelta(seconds=lease_s)
    row.attempts += 1
    row.started_at = row.started_at or now
    s.flush()
    return _job(kind, row)


def heartbeat(
    s: Session, kind: JobKind, id: str, worker_id: str, lease_s: float, *, now: datetime | None = None
) -> bool:
    """Renew the worker's lease on a running job. False when the worker should stop: the job was
    taken over by another worker (or finished), or its cancel was requested."""
    _require_write(s)
    table = _table(kind)
    now = now or _now()
    stmt = (
        update(table)
        .where(table.id == id, table.worker_id == worker_id, table.state == "running")
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
        .returning(table.cancel_requested)
    )
    cancel = s.execute(stmt).scalar_one_or_none()
    return cancel is not None and not cancel


def update_progress(
    s: Session, id: str, progress: Mapping[str, Any], *, worker_id: str | None = None
) -> bool:
    """Store a tuning job's latest progress (JSON); with `worker_id`, only while that worker owns it."""
    _require_write(s)
    cond = [TuningJobRow.id == id]
    if worker_id is not None:
        cond += [TuningJobRow.worker_id == worker_id, TuningJobRow.state == "running"]
    result = s.execute(
        update(TuningJobRow).where(*cond).values(progress=dict(progress)).returning(TuningJobRow.id)
    )
    return result.first() is not None


def finish_job(
    s: Session,
    kind: JobKind,
    id: str,
    worker_id: str,
    state: JobState,
    error: str | None = None,
    result: Any = None,
) -> bool:
    """End a running job the worker owns: `state` is succeeded, failed or cancelled; `result` is
    the artifact id of a compile job or the final progress of a tuning job. False (and nothing
    changed) when the worker no longer owns the job."""
    _require_write(s)
    if state not in TERMINAL_STATES:
        raise ValueError(f"a job finishes as one of {', '.join(TERMINAL_STATES)}, not {state!r}")
    table = _table(kind)
    values: dict[str, Any] = {"state": state, "error": error, "finished_at": _now(), "lease_expires_at": None}
    if result is not None:
        values["artifact_id" if kind == "compile" else "progress"] = (
            str(result) if kind == "compile" else dict(result)
        )
    stmt = (
        update(table)
        .where(table.id == id, table.worker_id == worker_id, table.state == "running")
        .values(**values)
        .returning(table.id)
    )
    return s.execute(stmt).first() is not None


def release_job(s: Session, kind: JobKind, id: str, worker_id: str) -> bool:
    """Give a running job back to the queue (a worker shutting down cleanly) so another worker
    takes it at once instead of after the lease; a job asked to cancel becomes cancelled instead."""
    _require_write(s)
    table = _table(kind)
    owned = (table.id == id, table.worker_id == worker_id, table.state == "running")
    cancelled = s.execute(
        update(table)
        .where(*owned, table.cancel_requested.is_(True))
        .values(state="cancelled", finished_at=_now(), lease_expires_at=None)
        .returning(table.id)
    ).first()
    if cancelled is not None:
        return True
    requeued = s.execute(
        update(table)
        .where(*owned)
        .values(state="queued", worker_id=None, lease_expires_at=None)
        .returning(table.id)
    ).first()
    return requeued is not None


def get_job_for_worker(s: Session, kind: JobKind, id: str) -> JobInfo | None:
    """A job by id whatever its tenant (workers act for every tenant)."""
    table = _table(kind)
    row = s.get(table, id)
    return None if row is None else _job(kind, row)


def _settle_abandoned(s: Session, kinds: Iterable[JobKind], now: datetime) -> None:
    for kind in kinds:
        table = _table(kind)
        expired = (table.state == "running", table.lease_expires_at < now)
        s.execute(
            update(table)
            .where(*expired, table.cancel_requested.is_(True))
            .values(state="cancelled", finished_at=now, lease_expires_at=None)
        )
        s.execute(
            update(table)
            .where(*expired, table.attempts >= MAX_ATTEMPTS)
            .values(
                state="failed",
                finished_at=now,
                lease_expires_at=None,
                error=f"abandoned: the worker running it stopped responding {MAX_ATTEMPTS} times",
            )
        )


# --- artifacts ----------------------------------------------------------------------------------


def create_artifact(
    s: Session,
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


# --- helpers ------------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return uuid.uuid4().hex


def _table(kind: str) -> type[CompilationRow] | type[TuningJobRow]:
    try:
        return _TABLES[kind]
    except KeyError:
        raise ValueError(f"job kind must be one of {', '.join(JOB_KINDS)}, not {kind!r}") from None


def _tenant_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 255:
        raise ValueError("a tenant name must have 1 to 255 characters")
    return name


def _require_write(s: Session) -> None:
    bind = s.get_bind()
    if bind.dialect.name == "sqlite" and not bind.get_execution_options().get(_WRITE_OPTION):
        raise NotWriteSessionError(
            "this write needs a write session (SqlDatabase.write_session()): on SQLite a read "
            "transaction that starts writing can fail when another process wrote meanwhile"
        )


def _insert(s: Session, table: type[TenantRow]) -> Any:
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise StorageError(f"unsupported database {dialect!r} (temper uses SQLite or PostgreSQL)")


def _model_row(s: Session, tenant_id: int, id: str, include_deleted: bool) -> ModelRow | None:
    stmt = select(ModelRow).where(ModelRow.id == id, ModelRow.tenant_id == tenant_id)
    if not include_deleted:
        stmt = stmt.where(ModelRow.deleted_at.is_(None))
    return s.scalar(stmt)


def _tenant(row: TenantRow) -> Tenant:
    return Tenant(row.id, row.name, row.created_at)


def _key_info(row: ApiKeyRow, tenant_name: str) -> ApiKeyInfo:
    return ApiKeyInfo(
        row.id, row.tenant_id, tenant_name, row.prefix, row.is_admin, row.created_at, row.revoked_at
    )


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


def _job(kind: JobKind, row: CompilationRow | TuningJobRow) -> JobInfo:
    return JobInfo(
        id=row.id,
        kind=kind,
        tenant_id=row.tenant_id,
        model_id=row.model_id,
        params=dict(row.params),
        state=row.state,  # type: ignore[arg-type]
        error=row.error,
        artifact_id=row.artifact_id if isinstance(row, CompilationRow) else None,
        progress=dict(row.progress) if isinstance(row, TuningJobRow) and row.progress is not None else None,
        attempts=row.attempts,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        cancel_requested=row.cancel_requested,
        worker_id=row.worker_id,
        lease_expires_at=row.lease_expires_at,
    )


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
