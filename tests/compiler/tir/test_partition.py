"""Loop partitioning: a loop is split where its conditions settle, and the pieces compute what it did.

Each case is a flat loop nest (loads and stores, as `flatten` hands it over) built by hand, so the
conditions are exactly the ones the module docstring names: padding (`i - 1 >= 0`), a non-dividing
split's tail (`o * 8 + i < 20`). Both the original and the partitioned nest are compiled and run.
"""

from __future__ import annotations

import numpy as np

from compiler.tir.ir import (
    Allocate,
    BinOp,
    Buffer,
    Expr,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Load,
    PrimFunc,
    Select,
    Stmt,
    Store,
    Var,
    walk_expr,
    walk_stmts,
)
from compiler.tir.partition import partition_loops
from compiler.tir.printer import stmt_str
from tests.compiler.tir.kernels import run_flat


def _int(x: Expr | int) -> Expr:
    return IntImm(x) if isinstance(x, int) else x


def _op(op: str, a: Expr | int, b: Expr | int) -> BinOp:
    return BinOp(op, _int(a), _int(b))


def _padded(src: Buffer, i: Expr, lo: int) -> Expr:
    """src[i - lo] where 0 <= i - lo < len(src), else 0 (the index clamped, as lowering writes it)."""
    n = src.shape[0]
    at = _op("-", i, lo)
    inside = _op("and", _op(">=", at, 0), _op("<", at, n))
    return Select(inside, Load(src, (_op("max", _op("min", at, n - 1), 0),)), FloatImm(0.0))


def _selects(s: Stmt) -> int:
    stores = [x for x in walk_stmts(s) if isinstance(x, Store)]
    return sum(isinstance(e, Select) for x in stores for v in (x.value, *x.indices) for e in walk_expr(v))


def _loops(s: Stmt) -> list[For]:
    return [x for x in walk_stmts(s) if isinstance(x, For)]


def _run(params: tuple[Buffer, ...], body: Stmt, *arrays: np.ndarray) -> None:
    run_flat(PrimFunc("partitioned", params, body), *arrays)


def test_a_padded_copy_splits_into_head_body_and_tail(rng: np.random.Generator) -> None:
    a, b = Buffer("A", (8,)), Buffer("B", (10,))
    i = Var("i")
    loop = For(i, 10, ForKind.SERIAL, Store(b, (i,), _padded(a, i, 1)))
    parts = partition_loops(loop)
    # the body reads A straight (no select, no clamp); head and tail store the padding
    assert stmt_str(parts) == (
        "for i in range(1):\n"
        "    B[i] = 0.0\n"
        "for i_p1 in range(8):\n"
        "    B[i_p1 + 1] = A[i_p1]\n"
        "for i_p9 in range(1):\n"
        "    B[i_p9 + 9] = 0.0"
    )
    x = rng.standard_normal(8).astype(np.float32)
    for body in (loop, parts):
        out = np.full(10, np.nan, np.float32)
        _run((a, b), body, x, out)
        np.testing.assert_array_equal(out, np.pad(x, 1))


def test_a_padded_plane_is_split_in_both_loops_outermost_first(rng: np.random.Generator) -> None:
    a, b = Buffer("A", (6, 5)), Buffer("B", (8, 7))
    h, w = Var("h"), Var("w")
    rows = _op("and", _op(">=", _op("-", h, 1), 0), _op("<", _op("-", h, 1), 6))
    cols = _op("and", _op(">=", _op("-", w, 1), 0), _op("<", _op("-", w, 1), 5))
    value = Select(
        _op("and", rows, cols),
        Load(a, (_op("max", _op("min", _op("-", h, 1), 5), 0), _op("max", _op("min", _op("-", w, 1), 4), 0))),
        FloatImm(0.0),
    )
    loop = For(h, 8, ForKind.SERIAL, For(w, 7, ForKind.SERIAL, Store(b, (h, w), value)))
    parts = partition_loops(loop)
    outer = [f for f in _loops(parts) if f.var.name.startswith("h")]
    assert [f.extent for f in outer] == [1, 6, 1]
    # inside the rows' body the columns split too: the interior is one unconditional 6 x 5 nest
    (interior,) = [f for f in _loops(outer[1].body) if f.extent == 5]
    assert _selects(interior) == 0
    x = rng.standard_normal((6, 5)).astype(np.float32)
    for body in (loop, parts):
        out = np.full((8, 7), np.nan, np.float32)
        _run((a, b), body, x, out)
        np.testing.assert_array_equal(out, np.pad(x, 1))


def test_a_non_dividing_split_keeps_its_guard_only_in_the_tail(rng: np.random.Generator) -> None:
    """20 elements in tiles of 8: tiles 0 and 1 are whole; in tile 2 only the first 4 exist."""
    x_buf, y_buf = Buffer("X", (20,)), Buffer("Y", (20,))
    o, i = Var("o"), Var("i")
    at = _op("+", _op("*", o, 8), i)
    guarded = IfThenElse(_op("<", at, 20), Store(y_buf, (at,), _op("*", Load(x_buf, (at,)), FloatImm(2.0))))
    loop = For(o, 3, ForKind.SERIAL, For(i, 8, ForKind.SERIAL, guarded))
    parts = partition_loops(loop)
    assert not any(isinstance(s, IfThenElse) for s in walk_stmts(parts))
    assert [(f.var.name, f.extent) for f in _loops(parts)] == [
        ("o", 2),
        ("i", 8),
        ("o_p2", 1),
        ("i", 4),
        ("i_p4", 4),
    ]
    x = rng.standard_normal(20).astype(np.float32)
    for body in (loop, parts):
        out = np.full(24, -1.0, np.float32)  # 4 elements past the buffer: nothing may write them
        _run((x_buf, y_buf), body, x, out)
        np.testing.assert_array_equal(out[:20], 2 * x)
        np.testing.assert_array_equal(out[20:], -1.0)


def test_a_parallel_loop_is_not_split_but_the_serial_loop_inside_is() -> None:
    x_buf, y_buf = Buffer("X", (20,)), Buffer("Y", (20,))
    o, i = Var("o"), Var("i")
    at = _op("+", _op("*", o, 8), i)
    guarded = IfThenElse(_op("<", at, 20), Store(y_buf, (at,), Load(x_buf, (at,))))
    parts = partition_loops(For(o, 3, ForKind.PARALLEL, For(i, 8, ForKind.SERIAL, guarded)))
    assert isinstance(parts, For) and parts.kind is ForKind.PARALLEL and parts.extent == 3
    # i < 4 stays inside 20 for every o; i >= 4 depends on o and keeps its guard
    first, second = _loops(parts)[1:]
    assert (first.extent, second.extent) == (4, 4)
    assert not any(isinstance(s, IfThenElse) for s in walk_stmts(first))
    assert any(isinstance(s, IfThenElse) for s in walk_stmts(second))


def test_a_condition_that_holds_everywhere_is_simplified_away() -> None:
    x_buf, y_buf = Buffer("X", (20,)), Buffer("Y", (20,))
    j = Var("j")
    loop = For(
        j, 20, ForKind.SERIAL, Store(y_buf, (j,), Select(_op("<", j, 100), Load(x_buf, (j,)), FloatImm(0.0)))
    )
    assert stmt_str(partition_loops(loop)) == "for j in range(20):\n    Y[j] = X[j]"


def test_conditions_it_cannot_decide_leave_the_loop_as_it_is() -> None:
    x_buf, y_buf = Buffer("X", (20,)), Buffer("Y", (20,))
    j = Var("j")
    every_third = Select(_op("==", _op("%", j, 3), 0), Load(x_buf, (j,)), FloatImm(0.0))
    loop = For(j, 20, ForKind.SERIAL, Store(y_buf, (j,), every_third))
    assert stmt_str(partition_loops(loop)) == stmt_str(loop)


def test_a_run_shorter_than_two_iterations_is_not_split_off() -> None:
    x_buf, y_buf = Buffer("X", (3,)), Buffer("Y", (3,))
    j = Var("j")

    def loop(extent: int) -> For:
        value = Select(_op(">=", j, 1), Load(x_buf, (j,)), FloatImm(0.0))
        return For(j, extent, ForKind.SERIAL, Store(y_buf, (j,), value))

    assert stmt_str(partition_loops(loop(2))) == stmt_str(loop(2))  # runs of 1 and 1
    assert [f.extent for f in _loops(partition_loops(loop(3)))] == [1, 2]


def test_loops_inside_allocations_and_ifs_are_partitioned() -> None:
    a, b = Buffer("A", (8,)), Buffer("B", (10,))
    tmp = Buffer("T", (1,), scope="local")
    i, flag = Var("i"), Var("flag")
    loop = For(i, 10, ForKind.SERIAL, Store(b, (i,), _padded(a, i, 1)))
    nest = For(flag, 2, ForKind.SERIAL, Allocate(tmp, IfThenElse(_op("==", flag, 0), loop)))
    parts = partition_loops(nest)
    assert [f.extent for f in _loops(parts)] == [2, 1, 8, 1]
    assert stmt_str(partition_loops(Store(b, (IntImm(0),), FloatImm(1.0)))) == "B[0] = 1.0"
