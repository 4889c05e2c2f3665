"""Small builders for workloads and records shared by the storage tests (and the writer script)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from onnx import TensorProto, helper

from compiler.pipeline import CompileOptions
from tuner.records import ErrorKind, TuningRecord, WorkloadEntry
from tuner.task import extract_tasks
from tuner.workloads import describe

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
# Names of real workloads (an elementwise kernel each, of a different size): records files are
# checked on import, so the workloads they carry must describe what their keys say.
REAL = {"wl-conv": 3, "wl-matmul": 5, "wl-unused": 7}


@functools.cache
def _real(name: str) -> tuple[str, dict[str, Any]]:
    n = REAL[name]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (task,) = extract_tasks(model.SerializeToString(), CompileOptions())
    return task.key, describe(task.name, task.group, task.workload.const_params, task.workload.anchor_op)


def key(name: str) -> str:
    """The workload key of a REAL name (other names are keys of their own)."""
    return _real(name)[0] if name in REAL else name


def workload(name: str = "wl-conv", flops: int = 2 * 3 * 224 * 224 * 64) -> WorkloadEntry:
    if name in REAL:
        real_key, description = _real(name)
        return WorkloadEntry(key=real_key, description=description, flops=flops)
    return WorkloadEntry(
        key=name,
        description={"ops": ["conv2d", "relu"], "shapes": [[1, 3, 224, 224]], "dtype": "float32"},
        flops=flops,
    )


def trace(n: int) -> dict[str, object]:
    """A schedule trace (valid JSON of the trace schema) whose content, hence hash, depends on `n`."""
    return {
        "version": 1,
        "instructions": [
            {"prim": "split", "loop": "i", "factors": [n + 1, 8]},
            {"prim": "vectorize", "loop": "i_1"},
        ],
        "decisions": {"n": n, "note": "µ-kernel ✓", "ratio": 0.25},
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
        workload_key=key(workload_key),
        target_key=target_key,
        trace=trace(n),
        run_secs=tuple(run_secs),
        error_kind=error_kind,
        error_message=error_message,
        temper_version="0.1.0",
        created=T0 + timedelta(minutes=minutes),
    )


def without_id(records: Sequence[TuningRecord], verification: str | None = None) -> list[TuningRecord]:
    """The records without their database ids (and with `verification` in place of theirs, if given)."""
    out = []
    for r in records:
        fields = {f: getattr(r, f) for f in r.__dataclass_fields__}
        fields["id"] = None
        if verification is not None:
            fields["verification"] = verification
        out.append(TuningRecord(**fields))
    return out
