"""Index simplification: what makes split/fuse index arithmetic disappear."""

from compiler.tir.ir import BinOp, IntImm, Var
from compiler.tir.printer import expr_str
from compiler.tir.simplify import bounds, simplify


def test_split_indices_fold_back() -> None:
    o, i = Var("o"), Var("i")
    e = BinOp("+", BinOp("*", o, IntImm(16)), i)
    ranges = {o: 4, i: 16}
    assert simplify(BinOp("//", e, IntImm(16)), ranges) is o
    assert simplify(BinOp("%", e, IntImm(16)), ranges) is i


def test_linear_terms_combine_and_constants_fold() -> None:
    x = Var("x")
    e = BinOp("-", BinOp("+", BinOp("*", x, IntImm(2)), IntImm(3)), BinOp("+", x, IntImm(3)))
    assert expr_str(simplify(e)) == "x"
    assert simplify(BinOp("*", IntImm(6), IntImm(7))) == IntImm(42)


def test_comparisons_decided_by_ranges() -> None:
    x = Var("x")
    assert simplify(BinOp("<", x, IntImm(8)), {x: 8}) == IntImm(1, "bool")
    assert simplify(BinOp(">=", x, IntImm(0)), {x: 8}) == IntImm(1, "bool")
    assert isinstance(simplify(BinOp("<", x, IntImm(4)), {x: 8}), BinOp)
    assert bounds(BinOp("-", x, IntImm(1)), {x: 8}) == (-1, 6)


def test_fused_row_and_column_recombine_into_the_flat_index() -> None:
    """((c * H + p // W) * W + p % W) is c * H * W + p: a vector along the fused loop p is contiguous."""
    c, p = Var("c"), Var("p")
    e = BinOp(
        "+",
        BinOp("*", BinOp("+", BinOp("*", c, IntImm(56)), BinOp("//", p, IntImm(56))), IntImm(56)),
        BinOp("%", p, IntImm(56)),
    )
    assert expr_str(simplify(e)) in ("c * 3136 + p", "p + c * 3136")
    # a lone modulo, or a quotient with another coefficient, stays as it is
    assert "%" in expr_str(simplify(BinOp("+", BinOp("%", p, IntImm(56)), c)))
    odd = BinOp("+", BinOp("*", BinOp("//", p, IntImm(56)), IntImm(55)), BinOp("%", p, IntImm(56)))
    assert "//" in expr_str(simplify(odd))
