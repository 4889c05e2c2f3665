"""relax_predicates: a register tile's accumulation keeps only the guards it needs.

A block accumulating into a local tile under two non-dividing splits is guarded by a conjunction:
one conjunct over channel blocks whose reads stay inside a zero-padded weight (not needed), one
over columns whose reads would leave the input (needed). A conjunct goes only when its variables
appear in no other conjunct and every index they take part in stays in bounds.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compiler.tir.flatten import relax_predicates
from compiler.tir.ir import BinOp, Block, Buffer, Expr, For, ForKind, IntImm, IterVar, Load, Stmt, Store, Var

G, J, C = Var("g"), Var("j"), Var("c")  # 2 groups of 3 channel blocks (5 real), 4 columns


def _lt(a: Expr, b: int) -> BinOp:
    return BinOp("<", a, IntImm(b))


def _and(a: Expr, b: Expr) -> BinOp:
    return BinOp("and", a, b)


BLOCKS = _lt(BinOp("+", BinOp("*", G, IntImm(3)), J), 5)  # the padded last group
COLUMNS = _lt(C, 3)  # x[c + 1] leaves x at c = 3


def _tile_update(pred: Expr, weight_rows: int = 6, acc_scope: str = "local") -> Stmt:
    """for g, j, c: acc[g*3+j, c] += x[c+1] * w[g*3+j, c], guarded by `pred` (w: `weight_rows`
    rows, 6 when padded to whole groups)."""
    vb, vc = Var("vb"), Var("vc")
    acc = Buffer("acc", (5, 4), scope=acc_scope)
    x, w = Buffer("x", (4,)), Buffer("w", (weight_rows, 4))
    product = BinOp("*", Load(x, (BinOp("+", vc, IntImm(1)),)), Load(w, (vb, vc)))
    update = Store(acc, (vb, vc), BinOp("+", Load(acc, (vb, vc)), product))
    bindings = (BinOp("+", BinOp("*", G, IntImm(3)), J), C)
    block = Block("update", (IterVar(vb, 5), IterVar(vc, 4)), bindings, update, None, pred)
    return For(G, 2, ForKind.SERIAL, For(J, 3, ForKind.SERIAL, For(C, 4, ForKind.SERIAL, block)))


def _predicate(s: Stmt) -> Expr | None:
    while isinstance(s, For):
        s = s.body
    assert isinstance(s, Block)
    return s.predicate


def test_the_padded_groups_guard_goes_and_the_columns_guard_stays() -> None:
    assert _predicate(relax_predicates(_tile_update(_and(BLOCKS, COLUMNS)))) is COLUMNS
    assert _predicate(relax_predicates(_tile_update(_and(COLUMNS, BLOCKS)))) is COLUMNS


def test_a_guard_alone_whose_reads_stay_in_bounds_goes() -> None:
    assert _predicate(relax_predicates(_tile_update(BLOCKS))) is None


@pytest.mark.parametrize(
    ("case", "update"),
    [
        # the weight is not padded: its rows past 5 would be read
        ("unpadded weight", lambda: _tile_update(_and(BLOCKS, COLUMNS), weight_rows=5)),
        # the store goes to a real buffer, which the guard keeps from writes past its end
        ("global store", lambda: _tile_update(_and(BLOCKS, COLUMNS), acc_scope="global")),
        # the conjuncts share a variable: dropping one would widen the other's iterations
        ("shared variable", lambda: _tile_update(_and(BLOCKS, _lt(BinOp("+", C, G), 4)))),
    ],
)
def test_guards_stay_where_dropping_them_could_read_or_write_out_of_bounds(
    case: str, update: Callable[[], Stmt]
) -> None:
    s = update()
    assert _predicate(relax_predicates(s)) == _predicate(s), case
