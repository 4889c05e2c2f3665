"""Imported records steer nothing until this machine has replayed, built, run and timed them; a
record that lies about its workload, its legality or its speed is rejected or corrected."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.kernels import build_kernel
from compiler.pipeline import CompileOptions, compile_model
from compiler.target import host_target
from compiler.tir.ir import Block, For, Var, walk_expr, walk_stmts
from storage import RecordFileError, SqlDatabase, import_records
from tuner.apply import DatabaseSource
from tuner.measure import LocalBuilder, LocalRunner
from tuner.task import Task, extract_tasks
from tuner.verify import verify_pending
from tuner.workloads import describe

TARGET = host_target()


def matmul_model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((32, 16)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def task() -> Task:
    (found,) = extract_tasks(matmul_model().SerializeToString(), CompileOptions())
    return found


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqlDatabase]:
    with SqlDatabase(f"sqlite:///{tmp_path / 'records.sqlite'}") as database:
        yield database


def _reduction_loop(task: Task) -> str:
    for block in (b for b in walk_stmts(task.workload.func.body) if isinstance(b, Block)):
        for iv, binding in zip(block.iter_vars, block.bindings, strict=True):
            if iv.reduce:
                (var,) = [v for v in walk_expr(binding) if isinstance(v, Var)]
                loops = [
                    f for f in walk_stmts(task.workload.func.body) if isinstance(f, For) and f.var is var
                ]
                return loops[0].var.name
    raise AssertionError("no reduction loop")


def _line(kind: str, **fields: Any) -> str:
    return json.dumps({"kind": kind, **fields}) + "\n"


def _records_file(
    task: Task, records: list[dict[str, Any]], description: dict[str, Any] | None = None
) -> str:
    desc = description or describe(task.name, task.group, task.workload.const_params, task.workload.anchor_op)
    text = '{"format": "temper-records", "version": 1}\n'
    text += _line("workload", key=task.key, description=desc, flops=task.flops)
    for k, rec in enumerate(records):
        fields = {
            "workload_key": task.key,
            "target_key": TARGET.key,
            "run_secs": [1e-12],  # a claimed speed no kernel has: verification replaces it
            "error_kind": None,
            "error_message": "",
            "temper_version": "elsewhere",
            "created": datetime(2026, 1, 1, 0, k, tzinfo=UTC).isoformat(),
        }
        text += _line("record", **(fields | rec))
    return text


def _verify_all(db: SqlDatabase) -> tuple[int, int]:
    builder = LocalBuilder(TARGET, max_workers=1)
    try:
        done = verify_pending(db, TARGET, builder, LocalRunner(), limit=100)
    finally:
        builder.close()
    return done.verified, done.rejected


def test_imported_records_are_used_only_after_verification(
    db: SqlDatabase, task: Task, tmp_path: Path
) -> None:
    good = build_kernel(task.workload, "k").trace.to_json()
    illegal = {"version": 1, "instructions": [{"prim": "parallel", "loop": _reduction_loop(task)}]}
    missing_loop = {"version": 1, "instructions": [{"prim": "unroll", "loop": "no_such_loop"}]}
    path = tmp_path / "records.jsonl"
    path.write_text(
        _records_file(
            task,
            [
                {"trace": good},
                {"trace": illegal},
                {"trace": missing_loop},
                {"trace": good, "run_secs": [], "error_kind": "crash", "error_message": "claimed"},
                {"trace": good, "target_key": "elsewhere-0123456789ab"},
            ],
        )
    )
    assert import_records(db, path).records_added == 5
    assert db.best(task.key, TARGET.key) is None
    assert DatabaseSource(db).lookup(task.key, TARGET.key) is None  # compiles use the default

    assert _verify_all(db) == (1, 3)
    best = db.best(task.key, TARGET.key)
    assert best is not None and best.verification == "verified" and best.trace == good
    assert best.seconds > 1e-9  # timed here, not the 1e-12 the file claimed
    assert sorted(r.verification for r in db.iter_records(TARGET.key)) == ["rejected"] * 3 + ["verified"]
    assert db.pending("elsewhere-0123456789ab", 10)  # another target's record cannot be run here: waits
    compiled = compile_model(matmul_model().SerializeToString(), CompileOptions(), DatabaseSource(db))
    assert compiled.manifest["kernels"][0]["schedule"]["source"] == "record"


def test_a_workload_description_must_be_of_its_key(db: SqlDatabase, task: Task, tmp_path: Path) -> None:
    other = extract_tasks(
        onnx.helper.make_model(
            helper.make_graph(
                [helper.make_node("Relu", ["x"], ["y"])],
                "relu",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        ).SerializeToString(),
        CompileOptions(),
    )[0]
    lie = describe(other.name, other.group, other.workload.const_params, other.workload.anchor_op)
    path = tmp_path / "lie.jsonl"
    path.write_text(_records_file(task, [], description=lie))
    with pytest.raises(RecordFileError, match="not of its key"):
        import_records(db, path)
    assert db.workloads() == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"trace": {"version": 7, "instructions": []}}, "version"),
        ({"trace": {"version": 1, "instructions": [{"prim": "unroll", "loop": 3}]}}, "'loop'"),
        ({"trace": {"version": 1, "instructions": [], "decisions": {"a": {"b": {}}}}}, "decision"),
        ({"temper_version": "\ud800"}, "UTF-8"),
        ({"error_message": "nul\x00byte"}, "UTF-8"),
        ({"target_key": "t" * 300}, "255"),
        ({"error_kind": {"a": 1}}, "error_kind"),
        ({"error_kind": ["crash"]}, "error_kind"),
    ],
)
def test_malformed_records_are_refused_on_import(
    db: SqlDatabase, task: Task, tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    path = tmp_path / "bad.jsonl"
    good = build_kernel(task.workload, "k").trace.to_json()
    path.write_text(_records_file(task, [{"trace": good} | change]))
    with pytest.raises(RecordFileError, match=words):
        import_records(db, path)
    assert list(db.iter_records()) == [] and db.workloads() == []
