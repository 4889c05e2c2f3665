"""The tables: workloads and the tuning records measured on them.

Table and column names are contracts (the service adds its tables next to these, migrations refer
to them). Measured costs are kept twice on purpose: the raw repeats as JSON (the truth, exported
as is) and their mean/median as plain floats, so "the fastest record" is an indexed ORDER BY.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Float, ForeignKey, Index, String, Text
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


class TuningRecordRow(Base):
    """One measured candidate: a trace of one workload on one target, with its timings or its error."""

    __tablename__ = "tuning_records"
    __table_args__ = (
        # The best-record query: equality on (workload, target), then ascending median.
        Index("ix_tuning_records_best", "workload_id", "target_key", "median_secs"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id", ondelete="CASCADE"))
    target_key: Mapped[str] = mapped_column(String(255), index=True)
    trace: Mapped[dict[str, Any]] = mapped_column(JsonType)
    trace_hash: Mapped[str] = mapped_column(String(64), index=True)
    run_secs: Mapped[list[float]] = mapped_column(JsonType)
    mean_secs: Mapped[float | None] = mapped_column(Float)  # null for failures
    median_secs: Mapped[float | None] = mapped_column(Float)  # null for failures
    error_kind: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str] = mapped_column(Text, default="")
    temper_version: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=_now)

    workload: Mapped[WorkloadRow] = relationship(back_populates="records", lazy="raise")
