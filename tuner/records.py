"""Tuning records and the database interface the tuner needs (storage/ implements it).

A record is one measured candidate: which workload on which target, the schedule trace that was
measured, the seconds of each timed repeat (or why there are none: the error kind and message),
and which temper version measured it. The compiler asks only for the best record of a
(workload key, target key) pair — never a record of another target.
"""

from __future__ import annotations

import enum
import hashlib
import json
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol


class ErrorKind(enum.StrEnum):
    """Why a candidate has no timing. Failures are data: they never stop a tuning run."""

    INVALID = "invalid"  # the trace does not apply to the workload (rejected before building)
    BUILD = "build_error"  # code generation / linking failed
    CRASH = "crash"  # the measuring process died (segfault, abort)
    TIMEOUT = "timeout"  # the measurement did not finish in time (hang)
    WRONG = "wrong_result"  # the output differs from the reference kernel's
    RUNTIME = "runtime_error"  # anything else raised while measuring


def trace_hash(trace: Mapping[str, Any]) -> str:
    """Stable identity of a trace (sorted-key JSON), used to never measure a trace twice."""
    text = json.dumps(trace, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class WorkloadEntry:
    """What the database keeps about a workload: its key and a description (ops, shapes, flops)."""

    key: str
    description: Mapping[str, Any]
    flops: int


@dataclass(frozen=True)
class TuningRecord:
    workload_key: str
    target_key: str
    trace: Mapping[str, Any]  # Trace.to_json()
    run_secs: tuple[float, ...] = ()  # one entry per timed repeat; empty when error_kind is set
    error_kind: ErrorKind | None = None
    error_message: str = ""
    temper_version: str = ""
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    id: int | None = None  # assigned by the database
    # seconds per call inside the compiled model (tuner.confirm), when it was timed there
    model_secs: float | None = None
    # "measured" (on this deployment) | "pending" (imported, not yet verified here) | "verified" |
    # "rejected": only measured and verified records steer compiles and the tuner (tuner.verify)
    verification: str = "measured"

    @property
    def ok(self) -> bool:
        return self.error_kind is None and bool(self.run_secs)

    @property
    def seconds(self) -> float:
        """The record's cost: median of the repeats (inf for failures)."""
        return statistics.median(self.run_secs) if self.ok else float("inf")

    @property
    def trace_hash(self) -> str:
        return trace_hash(self.trace)

    @property
    def trusted(self) -> bool:
        return self.verification in ("measured", "verified")


class Database(Protocol):
    """Where records live. Implemented over SQLAlchemy in storage/ (SQLite or PostgreSQL)."""

    def commit_workload(self, entry: WorkloadEntry) -> None:
        """Insert the workload if its key is new (idempotent)."""

    def commit_record(self, record: TuningRecord) -> int:
        """Store one record durably (committed on return); returns its id."""

    def best(self, workload_key: str, target_key: str) -> TuningRecord | None:
        """The fastest successful trusted record for exactly this workload and target: fastest in the
        model among the records timed there (model_secs), else fastest alone."""

    def set_model_secs(self, workload_key: str, target_key: str, secs: Mapping[int, float]) -> None:
        """Store in-model seconds per call for these records (by id) of the pair, and forget those of
        its other records: the pair's in-model times all come from one confirmation."""

    def records(self, workload_key: str, target_key: str) -> Sequence[TuningRecord]:
        """Every trusted record (failures included) of this workload on this target, oldest first."""

    def measured_hashes(self, workload_key: str, target_key: str) -> set[str]:
        """trace_hash of every trusted record stored for this workload and target."""

    def iter_records(self, target_key: str | None = None, *, trusted: bool = False) -> Iterator[TuningRecord]:
        """All records (of one target, or all; only trusted ones with `trusted`), oldest first:
        cost-model warm start and export."""

    def pending(self, target_key: str, limit: int) -> list[TuningRecord]:
        """Imported records of this target that wait for verification (tuner.verify)."""

    def set_verified(self, record_id: int, run_secs: Sequence[float]) -> None:
        """A pending record passed verification: trusted, with this machine's timings."""

    def set_rejected(self, record_id: int, message: str) -> None:
        """A pending record failed verification: never used."""

    def get_record(self, record_id: int) -> TuningRecord | None:
        """One record by id (per-node overrides may name a record)."""

    def workload(self, key: str) -> WorkloadEntry | None:
        """The stored description of a workload (None when unknown)."""
