"""Index simplification: what makes split/fuse index arithmetic disappear."""

from compiler.tir.ir import BinOp, IntImm, Var
from compiler.tir.printer import expr_str
from compiler.tir.simplify import bounds, simplify, specialize


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


def test_a_flat_index_splits_into_the_axes_of_another_shape() -> None:
    """A channel shuffle (reshape to [2, 58, ...], transpose, reshape back) of a fused loop f = channel
    over rows r of 784 elements: (f * 784 + r) // 1568 is f // 2 and its % 1568 is (f % 2) * 784 + r,
    so the row's lane stays a unit-stride term."""
    f, r = Var("f"), Var("r")
    flat = BinOp("+", BinOp("*", f, IntImm(784)), r)
    ranges = {f: 116, r: 784}
    assert expr_str(simplify(BinOp("//", flat, IntImm(1568)), ranges)) == "f // 2"
    assert expr_str(simplify(BinOp("%", flat, IntImm(1568)), ranges)) in (
        "f % 2 * 784 + r",
        "r + f % 2 * 784",
    )
    assert expr_str(simplify(BinOp("%", BinOp("//", flat, IntImm(1568)), IntImm(58)), ranges)) == "f // 2"
    # a remainder that can reach the next multiple of the part keeps the division
    assert "1568" in expr_str(simplify(BinOp("//", flat, IntImm(1568)), {f: 116, r: 785}))
    for fv in range(0, 116, 7):  # and the rewrite agrees with integer arithmetic
        for rv in (0, 1, 500, 783):
            env = {f: fv, r: rv}
            v = fv * 784 + rv
            assert _eval(simplify(BinOp("//", flat, IntImm(1568)), ranges), env) == v // 1568
            assert _eval(simplify(BinOp("%", flat, IntImm(1568)), ranges), env) == v % 1568


def _eval(e: object, env: dict[Var, int]) -> int:
    if isinstance(e, IntImm):
        return e.value
    if isinstance(e, Var):
        return env[e]
    assert isinstance(e, BinOp)
    a, b = _eval(e.a, env), _eval(e.b, env)
    return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0, "%": a % b if b else 0}[e.op]


def test_specializing_an_unrolled_iteration_keeps_only_the_taken_branches() -> None:
    from compiler.tir.ir import Buffer, FloatImm, Load, Select, Store

    o, i, lane = Var("o"), Var("i"), Var("lane")
    src, dst = Buffer("src", (64,), "float32"), Buffer("dst", (64,), "float32")
    position = BinOp("%", BinOp("+", BinOp("*", o, IntImm(4)), i), IntImm(4))  # (4o + i) % 4
    branches = [Load(src, (BinOp("+", BinOp("*", o, IntImm(4)), IntImm(k)),)) for k in range(4)]
    chain = branches[3]
    for k in reversed(range(3)):
        chain = Select(BinOp("==", position, IntImm(k)), branches[k], chain)
    body = Store(dst, (lane,), BinOp("*", chain, FloatImm(2.0)))
    ranges = {o: 16, i: 4, lane: 8}
    for k in range(4):
        got = specialize(body, i, k, ranges)
        assert isinstance(got, Store)
        assert expr_str(got.value) == expr_str(BinOp("*", branches[k], FloatImm(2.0)))
    # a condition the value does not decide keeps its select
    kept = specialize(
        Store(dst, (lane,), Select(BinOp("<", o, IntImm(3)), branches[0], FloatImm(0.0))), i, 1, ranges
    )
    assert isinstance(kept, Store) and isinstance(kept.value, Select)
