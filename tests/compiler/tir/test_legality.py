"""No trace, whoever wrote it, yields a kernel that computes something else: the trace schema refuses
malformed instructions and the legality check refuses racing or exploding loop annotations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    BinOp,
    Block,
    Buffer,
    Expr,
    For,
    ForKind,
    IntImm,
    IterVar,
    Load,
    PrimFunc,
    Store,
    Var,
)
from compiler.tir.legality import MAX_UNROLL_PRODUCT, check_legal
from compiler.tir.trace import Schedule, Trace, replay
from tests.compiler.tir.kernels import matmul_relu, run_func


def _trace(*instructions: dict[str, Any]) -> Trace:
    return Trace.from_json({"version": 1, "instructions": list(instructions)})


def test_a_parallel_reduction_loop_is_refused() -> None:
    trace = _trace({"prim": "parallel", "loop": "C_k"})
    with pytest.raises(ScheduleError, match="reduction"):
        replay(matmul_relu(8, 8, 8), trace)


def test_a_vectorized_reduction_loop_with_its_init_inside_is_refused() -> None:
    trace = _trace({"prim": "vectorize", "loop": "C_k"})
    with pytest.raises(ScheduleError, match="reduction"):
        replay(matmul_relu(8, 8, 8), trace)


def test_a_vectorized_sum_with_its_init_hoisted_combines_its_lanes() -> None:
    """The reduced loop split into vectors, the last one partly masked: each vector's lanes are
    summed into the accumulator."""
    sch = Schedule(matmul_relu(5, 6, 19))
    sch.decompose_reduction("C", "C_k")
    _, lanes = sch.split("C_k", [None, 8])
    sch.vectorize(lanes)
    check_legal(sch.func)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 19)).astype(np.float32), rng.standard_normal((19, 6)).astype(np.float32)
    out = np.zeros((5, 6), np.float32)
    run_func(sch.func, a, b, out)
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


def _row_reduction(op: str) -> PrimFunc:
    """for r in 0..13 (vectorized): out[0] = op(out[0], a[r]), no init (the caller sets out)."""
    a, out = Buffer("a", (13,)), Buffer("out", (1,))
    r, vr = Var("r"), Var("vr")
    step = Store(out, (IntImm(0),), BinOp(op, Load(out, (IntImm(0),)), Load(a, (vr,))))
    block = Block("reduce", (IterVar(vr, 13, reduce=True),), (r,), step)
    return PrimFunc("reduce", (a, out), For(r, 13, ForKind.VECTORIZED, block))


@pytest.mark.parametrize(
    ("op", "start", "want"), [("+", 1.0, np.sum), ("max", -5.0, np.max), ("min", 5.0, np.min)]
)
def test_vectorized_row_reductions_by_associative_ops_run(op: str, start: float, want: Any) -> None:
    func = _row_reduction(op)
    check_legal(func)
    a = np.random.default_rng(1).standard_normal(13).astype(np.float32) * 3
    out = np.array([start], np.float32)
    run_func(func, a, out)
    expected = start + want(a) if op == "+" else want([start, want(a)])
    np.testing.assert_allclose(out[0], expected, rtol=1e-5)


def test_a_vectorized_product_reduction_is_refused() -> None:
    """Only +, max and min combine lanes; a product's lanes would race like any other reduction."""
    with pytest.raises(ScheduleError, match="reduction"):
        check_legal(_row_reduction("*"))


def test_a_reduction_fused_into_a_parallel_loop_is_refused() -> None:
    trace = _trace(
        {"prim": "reorder", "loops": ["C_i", "C_k", "C_j"]},
        {"prim": "fuse", "loops": ["C_i", "C_k"]},
        {"prim": "parallel", "loop": "C_i_C_k_f"},
    )
    with pytest.raises(ScheduleError, match="reduction"):
        replay(matmul_relu(8, 8, 8), trace)


def _one_loop(kind: ForKind, index: Callable[[Var], Expr]) -> PrimFunc:
    """for i in 0..8 (kind): out[index(vi)] = a[vi]"""
    a, out = Buffer("a", (8,)), Buffer("out", (8,))
    i, vi = Var("i"), Var("vi")
    block = Block("copy", (IterVar(vi, 8),), (i,), Store(out, (index(vi),), Load(a, (vi,))))
    return PrimFunc("copy", (a, out), For(i, 8, kind, block))


def test_parallel_iterations_writing_the_same_elements_are_refused() -> None:
    with pytest.raises(ScheduleError, match="same elements of 'out'"):
        check_legal(_one_loop(ForKind.PARALLEL, lambda vi: IntImm(0)))
    check_legal(_one_loop(ForKind.PARALLEL, lambda vi: vi))
    check_legal(_one_loop(ForKind.SERIAL, lambda vi: IntImm(0)))


def test_a_private_accumulator_inside_the_parallel_loop_is_fine() -> None:
    sch = Schedule(matmul_relu(8, 8, 8))
    sch.set_scope("C", "local")
    sch.parallel("C_i")
    check_legal(sch.func)


def test_every_unroll_nest_is_bounded() -> None:
    func = matmul_relu(64, 64, 64)
    fine = _trace({"prim": "unroll", "loop": "C_j"}, {"prim": "unroll", "loop": "C_k"})
    replay(func, fine)  # 64 * 64 = 4096 copies: at the limit
    assert MAX_UNROLL_PRODUCT == 64 * 64
    bomb = _trace(*({"prim": "unroll", "loop": loop} for loop in ("C_i", "C_j", "C_k")))
    with pytest.raises(ScheduleError, match="expands"):
        replay(func, bomb)


def test_legal_parallel_schedule_still_computes_the_same() -> None:
    trace = _trace(
        {"prim": "split", "loop": "C_i", "factors": [None, 4]},
        {"prim": "parallel", "loop": "C_i_0"},
        {"prim": "vectorize", "loop": "C_j"},
    )
    func = replay(matmul_relu(16, 8, 5), trace).func
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 5), dtype=np.float32)
    b = rng.standard_normal((5, 8), dtype=np.float32)
    out = np.zeros((16, 8), np.float32)
    run_func(func, a, b, out)
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


# ---- the trace schema ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"version": 2, "instructions": []}, "version"),
        ({"version": True, "instructions": []}, "version"),
        ({"version": "1", "instructions": []}, "version"),
        ([], "object"),
        ({"version": 1, "instructions": {}}, "list"),
        ({"version": 1, "instructions": [], "extra": 1}, "unknown field"),
        ({"version": 1, "instructions": [{"prim": "explode", "loop": "x"}]}, "unknown schedule primitive"),
        ({"version": 1, "instructions": [{"loop": "x"}]}, "'prim'"),
        ({"version": 1, "instructions": [{"prim": "split", "loop": "x"}]}, "wrong arguments"),
        ({"version": 1, "instructions": [{"prim": "unroll", "loop": "x", "why": 1}]}, "wrong arguments"),
        ({"version": 1, "instructions": [{"prim": "unroll", "loop": 7}]}, "bad 'loop'"),
        ({"version": 1, "instructions": [{"prim": "unroll", "loop": ""}]}, "bad 'loop'"),
        ({"version": 1, "instructions": [{"prim": "split", "loop": "x", "factors": [0, 4]}]}, "factors"),
        ({"version": 1, "instructions": [{"prim": "split", "loop": "x", "factors": [True, 4]}]}, "factors"),
        ({"version": 1, "instructions": [{"prim": "split", "loop": "x", "factors": [[4], 4]}]}, "factors"),
        ({"version": 1, "instructions": [{"prim": "set_scope", "buffer": "b", "scope": "shared"}]}, "scope"),
        ({"version": 1, "instructions": [{"prim": "reorder", "loops": []}]}, "loops"),
        ({"version": 1, "instructions": [{"prim": "unroll", "loop": "x"}] * 600}, "at most"),
        ({"version": 1, "instructions": [], "decisions": {"a": {"b": 1}}}, "decision"),
        ({"version": 1, "instructions": [], "decisions": []}, "decisions"),
        ({"version": 1, "instructions": [], "decisions": {"a": [[1]]}}, "decision"),
        ("[" * 100_000 + "]" * 100_000, "JSON"),
        ("{not json", "JSON"),
    ],
)
def test_malformed_traces_are_refused(data: Any, words: str) -> None:
    with pytest.raises(ScheduleError, match=words):
        Trace.from_json(data)


def test_every_trace_temper_writes_round_trips() -> None:
    sch = Schedule(matmul_relu(16, 16, 8), frozenset({"B"}))
    sch.set_scope("C", "local")
    io, ii = sch.split("C_i", [None, 4])
    sch.parallel(io)
    sch.unroll(ii)
    sch.decide("tile", [4, 8], 4)
    trace = sch.trace
    again = Trace.from_json(trace.dumps())
    assert again == trace
    assert replay(matmul_relu(16, 16, 8), again, frozenset({"B"})).trace == trace
