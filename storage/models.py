"""The tables: workloads and the tuning records measured on them; the service's tenants, models and jobs.

Table and column names are contracts (the service adds its tables next to these, migrations refer
to them). Measured costs are kept twice on purpose: the raw repeats as JSON (the truth, exported
as is) and their mean/median as plain floats, so "the fastest record" is an indexed ORDER BY.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, get_args

from sqlalchemy import BigInteger, Boolean, CheckConstraint, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from storage.base import Base, JsonType, UTCDateTime


def _now() -> datetime:
    return datetime.now(UTC)


class WorkloadRow(Base):
    """One kernel workload, identified by its content-hash key (see compiler.kernels.workload_key)."""

    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True, index=True)
    description: Mapped[dict[str, Any]] = mapped_column(JsonType)
    flops: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)

    records: Mapped[list[TuningRecordRow]] = relationship(
        back_populates="workload", cascade="all, delete-orphan", passive_deletes=True, lazy="raise"
    )


VERIFICATION_STATES = ("measured", "pending", "verified", "rejected")
VERIFICATION_CHECK = "verification IN ('measured', 'pending', 'verified', 'rejected')"
TRUSTED = ("measured", "verified")  # the records compiles and the tuner may rely on


class TuningRecordRow(Base):
    """One measured candidate: a trace of one workload on one target, with its timings or its error."""

    __tablename__ = "tuning_records"
    __table_args__ = (
        # The best-record query: equality on (workload, target), then ascending median.
        Index("ix_tuning_records_best", "workload_id", "target_key", "median_secs"),
        CheckConstraint(VERIFICATION_CHECK, name="verification"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    target_key: Mapped[str] = mapped_column(String(255), index=True)
    trace: Mapped[dict[str, Any]] = mapped_column(JsonType)
    trace_hash: Mapped[str] = mapped_column(String(64), index=True)
    run_secs: Mapped[list[float]] = mapped_column(JsonType)
    mean_secs: Mapped[float | None] = mapped_column(Float)  # null for failures
    median_secs: Mapped[float | None] = mapped_column(Float)  # null for failures
    # seconds per call inside the compiled model, from the latest in-model confirmation of this
    # workload on this target (tuner.confirm); null for records it did not time
    model_secs: Mapped[float | None] = mapped_column(Float)
    error_kind: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str] = mapped_column(Text, default="")
    temper_version: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)
    # measured (here: trusted) | pending (imported, not yet verified here) | verified | rejected;
    # compiles use only measured and verified records (see tuner.verify)
    verification: Mapped[str] = mapped_column(
        String(16), default="measured", server_default="measured", index=True
    )
    verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    verify_message: Mapped[str] = mapped_column(Text, default="", server_default="")

    workload: Mapped[WorkloadRow] = relationship(back_populates="records", lazy="raise")


# --- the service: tenants and their keys, models, jobs, artifacts ---------------------------------

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
JOB_STATES: tuple[JobState, ...] = get_args(JobState)
_STATE_CHECK = "state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')"


class TenantRow(Base):
    """A customer of the service: everything it uploads or asks for is visible to it alone."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)


class ApiKeyRow(Base):
    """An API key of a tenant; only its sha256 is stored (the key itself is shown once)."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ModelRow(Base):
    """An uploaded ONNX model: its bytes live in the blob store under `blob_key`.

    Deleting only sets `deleted_at`: jobs and artifacts made from the model keep working.
    """

    __tablename__ = "models"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    blob_key: Mapped[str] = mapped_column(String(64))
    summary: Mapped[dict[str, Any]] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class JobRow(Base):
    """What every job has: who asked for what, and the lease of the worker running it.

    A job is `queued` until a worker claims it (`running`, `worker_id`, `lease_expires_at`); the
    worker renews the lease while it works, and a running job whose lease has expired may be
    claimed by another worker (its previous worker died). `attempts` counts the claims.

    Abstract (no table of its own): each kind of job has its table with these columns, and code
    that handles either kind is typed with this class.
    """

    __abstract__ = True

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    params: Mapped[dict[str, Any]] = mapped_column(JsonType)
    state: Mapped[JobState] = mapped_column(String(16), default="queued", index=True)  # _STATE_CHECK
    error: Mapped[str | None] = mapped_column(Text)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class CompilationRow(JobRow):
    """A compile job; when it succeeds, `artifact_id` names the artifact it produced."""

    __tablename__ = "compilations"
    __table_args__ = (CheckConstraint(_STATE_CHECK, name="state"),)

    # no foreign key: artifacts point back here, and a cycle of keys buys nothing
    artifact_id: Mapped[str | None] = mapped_column(String(32))


class TuningJobRow(JobRow):
    """A tuning job; `progress` is the latest tuner progress as JSON (see service.worker)."""

    __tablename__ = "tuning_jobs"
    __table_args__ = (CheckConstraint(_STATE_CHECK, name="state"),)

    progress: Mapped[dict[str, Any] | None] = mapped_column(JsonType)


class ArtifactRow(Base):
    """A compiled artifact: its bytes live in the blob store under `blob_key` (= its sha256)."""

    __tablename__ = "artifacts"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    compilation_id: Mapped[str] = mapped_column(ForeignKey("compilations.id", ondelete="CASCADE"), index=True)
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    blob_key: Mapped[str] = mapped_column(String(64))
    manifest: Mapped[dict[str, Any]] = mapped_column(JsonType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)
