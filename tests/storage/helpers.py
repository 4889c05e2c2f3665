"""Small builders for workloads and records shared by the storage tests (and the writer script)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from tuner.records import ErrorKind, TuningRecord, WorkloadEntry

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def workload(key: str = "wl-conv", flops: int = 2 * 3 * 224 * 224 * 64) -> WorkloadEntry:
    return WorkloadEntry(
        key=key,
        description={"ops": ["conv2d", "relu"], "shapes": [[1, 3, 224, 224]], "dtype": "float32"},
        flops=flops,
    )


def trace(n: int) -> dict[str, object]:
    """A trace-shaped JSON object whose content (hence hash) depends on `n`."""
    return {
        "version": 1,
        "insts": [
            {"kind": "split", "loop": "i", "factors": [n, 8]},
            {"kind": "vectorize", "loop": "i.1"},
            {"kind": "annotate", "note": "µ-kernel ✓", "ratio": 0.25},
        ],
        "decisions": [n, n % 3],
    }


def record(
    workload_key: str = "wl-conv",
    target_key: str = "znver3-abc",
    n: int = 0,
    run_secs: Sequence[float] = (2e-3, 1e-3, 3e-3),
    error_kind: ErrorKind | None = None,
    error_message: str = "",
    minutes: float = 0,
) -> TuningRecord:
    return TuningRecord(
        workload_key=workload_key,
        target_key=target_key,
        trace=trace(n),
        run_secs=tuple(run_secs),
        error_kind=error_kind,
        error_message=error_message,
        temper_version="0.1.0",
        created=T0 + timedelta(minutes=minutes),
    )


def without_id(records: Sequence[TuningRecord]) -> list[TuningRecord]:
    return [
        TuningRecord(**{**{f: getattr(r, f) for f in r.__dataclass_fields__}, "id": None}) for r in records
    ]
