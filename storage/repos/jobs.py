"""Jobs: compilations and tuning jobs, what users ask of them and how workers lease and end them.

Jobs and leases: a worker claims the oldest claimable job (queued, or running with an expired
lease: its worker died), holds it for `lease_s` seconds and renews the lease with `heartbeat` while
it works. Claiming is safe with many workers at once: on PostgreSQL the candidate row is locked
with SELECT ... FOR UPDATE SKIP LOCKED (concurrent claimers take different rows), on SQLite the
whole claim runs under the database's write lock. Every update a worker makes is conditioned on
still owning the job, so a worker that lost its lease can no longer change it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, get_args

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from storage.errors import StorageError
from storage.models import JOB_STATES, CompilationRow, JobRow, JobState, TuningJobRow
from storage.repos.common import _new_id, _now, _require_write
from storage.repos.models import _model_row

JobKind = Literal["compile", "tune"]
JOB_KINDS: tuple[JobKind, ...] = get_args(JobKind)
TERMINAL_STATES: tuple[JobState, ...] = ("succeeded", "failed", "cancelled")
MAX_ATTEMPTS = 5  # claims of one job; a job whose workers keep dying is failed, not retried forever
_TABLES: dict[str, type[JobRow]] = {
    "compile": CompilationRow,
    "tune": TuningJobRow,
}


class UnknownModelError(StorageError, LookupError):
    """A job names a model the tenant does not have."""

    def __init__(self, model_id: str) -> None:
        super().__init__(f"no model {model_id!r}")
        self.model_id = model_id


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


# --- what users ask for -------------------------------------------------------------------------


def create_job(
    s: Session, *, kind: JobKind, tenant_id: int, model_id: str, params: Mapping[str, Any]
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


def request_cancel(s: Session, *, kind: JobKind, tenant_id: int, id: str) -> JobInfo | None:
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
    counts: dict[tuple[JobKind, JobState], int] = {(k, st): 0 for k in JOB_KINDS for st in JOB_STATES}
    for kind in JOB_KINDS:
        table = _table(kind)
        for state, n in s.execute(select(table.state, func.count()).group_by(table.state)):
            counts[(kind, state)] = int(n)
    return counts


# --- what workers do ----------------------------------------------------------------------------


def claim_job(
    s: Session,
    *,
    worker_id: str,
    lease_s: float,
    kinds: Sequence[JobKind] = JOB_KINDS,
    now: datetime | None = None,
) -> JobInfo | None:
    """Take the oldest claimable job of `kinds` for `worker_id`, leased for `lease_s` seconds.

    Claimable: queued, or running with an expired lease (taken over: its worker stopped
    renewing). Abandoned jobs that were asked to cancel become cancelled here, and those whose
    workers died MAX_ATTEMPTS times become failed. Returns None when there is nothing to do.
    """
    _require_write(s)
    now = now or _now()
    _settle_abandoned(s, kinds=kinds, now=now)
    best: tuple[JobKind, JobRow] | None = None
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
    s: Session, *, kind: JobKind, id: str, worker_id: str, lease_s: float, now: datetime | None = None
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
    s: Session, *, id: str, progress: Mapping[str, Any], worker_id: str | None = None
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
    *,
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


def release_job(s: Session, *, kind: JobKind, id: str, worker_id: str) -> bool:
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


def _settle_abandoned(s: Session, *, kinds: Iterable[JobKind], now: datetime) -> None:
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


# --- helpers ------------------------------------------------------------------------------------


def _table(kind: str) -> type[JobRow]:
    try:
        return _TABLES[kind]
    except KeyError:
        raise ValueError(f"job kind must be one of {', '.join(JOB_KINDS)}, not {kind!r}") from None


def _job(kind: JobKind, row: JobRow) -> JobInfo:
    return JobInfo(
        id=row.id,
        kind=kind,
        tenant_id=row.tenant_id,
        model_id=row.model_id,
        params=dict(row.params),
        state=row.state,
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
