"""What the LLVM emitter is told about a vector loop's memory accesses (compiler.codegen.access),
checked on hand-built TIR: no code is emitted, so each classification is tested on its own.

Offsets are compared by value: the tests evaluate them for concrete loop indices rather than
matching the simplifier's spelling of them."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from compiler.codegen.access import (
    MAX_STRIDE,
    Access,
    Clamp,
    NotPadded,
    PaddedLoad,
    clamp_into,
    flat_offset,
    lane_offset,
    load_access,
    masked_load,
    padded_load,
    store_access,
    strip_clamps,
)
from compiler.errors import CodegenError
from compiler.tir.ir import BinOp, Buffer, Cast, Expr, FloatImm, IntImm, Load, Select, Var, walk_expr

LANES = 8
O_EXTENT = 4


def _value(e: Expr, env: dict[Var, int]) -> int:
    """An integer index expression's value at the loop indices `env`."""
    if isinstance(e, IntImm):
        return int(e.value)
    if isinstance(e, Var):
        return env[e]
    assert isinstance(e, BinOp), e
    a, b = _value(e.a, env), _value(e.b, env)
    ops = {
        "+": a + b,
        "-": a - b,
        "*": a * b,
        "min": min(a, b),
        "max": max(a, b),
        "//": a // b if b else 0,
        "%": a % b if b else 0,
    }
    return ops[e.op]


def _lane_var(e: Expr) -> Var:
    """The variable named v in `e` (parametrized cases build their own)."""
    return next(x for x in walk_expr(e) if isinstance(x, Var) and x.name == "v")


def _c(x: int) -> IntImm:
    return IntImm(x)


def _affine(o: Var, v: Var, outer: int, stride: int, const: int) -> Expr:
    """o * outer + v * stride + const, spelled as a kernel would spell it."""
    return BinOp("+", BinOp("+", BinOp("*", o, _c(outer)), BinOp("*", v, _c(stride))), _c(const))


def _lanes_agree(acc: Access, env: dict[Var, int]) -> None:
    """Lane k of a contiguous or strided access is at base + k * stride, as the offset says."""
    assert acc.var is not None and acc.base is not None and acc.stride is not None
    for lane in range(LANES):
        want = _value(acc.offset, {**env, acc.var: lane})
        assert _value(acc.base, env) + lane * acc.stride == want
        assert _value(lane_offset(acc.offset, acc.var, lane), env) == want


# ------------------------------------------------------------------------------ flat offsets


def test_the_flat_offset_is_row_major() -> None:
    i, j = Var("i"), Var("j")
    buf = Buffer("A", (3, 5, 7))
    off = flat_offset(buf, (_c(2), i, j), {i: 5, j: 7})
    assert _value(off, {i: 4, j: 6}) == 2 * 35 + 4 * 7 + 6


def test_a_flat_offset_with_the_wrong_number_of_indices_is_an_error() -> None:
    with pytest.raises(CodegenError, match="2 indices for rank 3"):
        flat_offset(Buffer("A", (3, 5, 7)), (_c(0), _c(0)), {})


# ------------------------------------------------------------------------------ loads


def test_outside_a_vector_loop_every_load_is_scalar() -> None:
    o = Var("o")
    acc = load_access(BinOp("*", o, _c(8)), None)
    assert (acc.kind, acc.stride, acc.base) == ("scalar", 0, None)


def test_an_offset_without_the_lane_variable_is_broadcast() -> None:
    o, v = Var("o"), Var("v")
    acc = load_access(BinOp("+", BinOp("*", o, _c(8)), _c(3)), v)
    assert (acc.kind, acc.stride, acc.base) == ("broadcast", 0, None)


def test_unit_lane_stride_is_contiguous_from_lane_zero() -> None:
    o, v = Var("o"), Var("v")
    acc = load_access(_affine(o, v, 16, 1, 5), v)
    assert (acc.kind, acc.stride) == ("contiguous", 1)
    for x in range(O_EXTENT):
        assert acc.base is not None and _value(acc.base, {o: x}) == 16 * x + 5
        _lanes_agree(acc, {o: x})


def test_lane_stride_two_is_strided() -> None:
    o, v = Var("o"), Var("v")
    acc = load_access(_affine(o, v, 32, 2, 1), v)
    assert (acc.kind, acc.stride) == ("strided", 2)
    _lanes_agree(acc, {o: 3})


@pytest.mark.parametrize("seed", range(20))
def test_random_affine_offsets_classify_by_their_lane_stride(seed: int) -> None:
    rng = random.Random(seed)
    o, v = Var("o"), Var("v")
    stride, outer, const = rng.randint(-3, 9) or 1, rng.randint(0, 64), rng.randint(0, 100)
    acc = load_access(_affine(o, v, outer, stride, const), v)
    if stride == 1:
        assert acc.kind == "contiguous"
    elif 2 <= stride <= MAX_STRIDE:
        assert acc.kind == "strided"
    else:  # too wide for a covering span, or backwards
        assert (acc.kind, acc.stride, acc.base) == ("gather", None, None)
        return
    assert acc.stride == stride
    _lanes_agree(acc, {o: rng.randrange(O_EXTENT)})


@pytest.mark.parametrize(
    "index",
    [
        BinOp("%", BinOp("*", Var("v"), Var("v")), _c(64)),  # not affine
        BinOp("+", Var("v"), BinOp("//", BinOp("+", Var("v"), Var("o")), _c(4))),  # lane in another term
        Cast("int64", Load(Buffer("idx", (8,), "int32"), (Var("v"),))),  # indirect
    ],
    ids=["square", "lane-in-quotient", "indirect"],
)
def test_offsets_that_are_not_affine_in_the_lane_are_gathered(index: Expr) -> None:
    v = _lane_var(index)
    acc = load_access(index, v)
    assert (acc.kind, acc.stride, acc.base) == ("gather", None, None)


def test_a_masked_loop_gathers_what_it_would_load_as_a_span() -> None:
    o, v = Var("o"), Var("v")
    strided = load_access(_affine(o, v, 32, 3, 0), v)
    assert masked_load(strided).kind == "gather"
    contiguous, broadcast = load_access(_affine(o, v, 8, 1, 0), v), load_access(o, v)
    assert masked_load(contiguous) is contiguous
    assert masked_load(broadcast) is broadcast


def test_a_masked_gather_keeps_every_lane_inside_the_buffer() -> None:
    v = Var("v")
    buf = Buffer("A", (10,))
    off = BinOp("-", BinOp("*", v, _c(3)), _c(4))
    got = [_value(clamp_into(lane_offset(off, v, lane), buf), {}) for lane in range(LANES)]
    assert got == [min(max(3 * k - 4, 0), 9) for k in range(LANES)]


# ------------------------------------------------------------------------------ stores


def test_store_kinds() -> None:
    o, v = Var("o"), Var("v")
    ranges = {o: O_EXTENT, v: LANES}
    assert store_access(o, None, ranges, masked=False).kind == "scalar"
    assert store_access(o, v, ranges, masked=False).kind == "broadcast"
    contiguous = store_access(_affine(o, v, 8, 1, 2), v, ranges, masked=False)
    assert contiguous.kind == "contiguous"
    _lanes_agree(contiguous, {o: 2})
    # there is no strided store
    assert store_access(_affine(o, v, 8, 2, 0), v, ranges, masked=False).kind == "gather"


def test_a_masked_store_of_one_element_goes_lane_by_lane() -> None:
    """The last lane, whose value the serial loop leaves behind, may be switched off."""
    o, v = Var("o"), Var("v")
    ranges = {o: O_EXTENT, v: LANES}
    assert store_access(o, v, ranges, masked=True).kind == "gather"
    assert store_access(_affine(o, v, 8, 1, 0), v, ranges, masked=True).kind == "contiguous"


def test_a_store_base_is_simplified_with_the_loop_ranges() -> None:
    o, v = Var("o"), Var("v")
    off = BinOp("+", BinOp("min", o, _c(10)), v)  # min(o, 10) is o while o < 4
    acc = store_access(off, v, {o: O_EXTENT, v: LANES}, masked=False)
    assert acc.base is o


def test_a_store_whose_other_terms_involve_the_lane_is_not_contiguous() -> None:
    o, v = Var("o"), Var("v")
    off = BinOp("+", v, BinOp("//", BinOp("+", v, o), _c(4)))
    assert store_access(off, v, {o: O_EXTENT, v: LANES}, masked=False).kind == "gather"


# ------------------------------------------------------------------------------ padded loads


def _padded(index: Expr, cond: Expr, dtype: str = "float32", size: int = 64) -> Select:
    fill = FloatImm(0.0, dtype) if dtype.startswith("float") else IntImm(0, dtype)
    return Select(cond, Load(Buffer("A", (size,), dtype), (index,)), fill)


def test_a_clamped_select_is_a_padded_load_with_its_bounds() -> None:
    """A row of a convolution's input with one element of padding each side: x = o + v - 1."""
    o, v = Var("o"), Var("v")
    x = BinOp("-", BinOp("+", o, v), _c(1))
    inside = BinOp("and", BinOp(">=", x, _c(0)), BinOp("<", x, _c(6)))
    sel = _padded(BinOp("min", BinOp("max", x, _c(0)), _c(5)), inside)
    pad = padded_load(sel, v, {o: O_EXTENT, v: LANES})
    assert isinstance(pad, PaddedLoad)
    assert pad.stride == 1 and pad.cond is inside and pad.load is sel.t and pad.fill is sel.f
    (clamp,) = pad.clamps
    assert (clamp.lo, clamp.hi) == (0, 5)
    for ox in range(O_EXTENT):
        assert _value(pad.base, {o: ox}) == ox - 1  # lane 0's unclamped element, before the row
        for lane in range(LANES):
            assert _value(clamp.value, {o: ox, v: lane}) == ox + lane - 1
            assert _value(pad.offset, {o: ox, v: lane}) == ox + lane - 1


def test_a_bound_the_ranges_prove_is_not_a_clamp() -> None:
    """x = v - 2 never exceeds 5 while v < 8, so the simplifier drops the upper clamp."""
    v = Var("v")
    x = BinOp("-", v, _c(2))
    pad = padded_load(_padded(BinOp("min", BinOp("max", x, _c(0)), _c(5)), BinOp(">=", x, _c(0))), v, {v: 8})
    assert isinstance(pad, PaddedLoad)
    assert [(c.lo, c.hi) for c in pad.clamps] == [(0, None)]


@pytest.mark.parametrize("seed", range(20))
def test_random_strided_padded_loads(seed: int) -> None:
    """A copy dealt into phases (x = v * stride + o - pad), clamped into a short row."""
    rng = random.Random(seed)
    o, v = Var("o"), Var("v")
    stride, pad_, row = rng.randint(1, MAX_STRIDE), rng.randint(1, 3), rng.randint(2, 6)
    x = BinOp("-", BinOp("+", BinOp("*", v, _c(stride)), o), _c(pad_))
    sel = _padded(BinOp("min", BinOp("max", x, _c(0)), _c(row - 1)), BinOp(">=", x, _c(0)))
    pad = padded_load(sel, v, {o: O_EXTENT, v: LANES})
    assert isinstance(pad, PaddedLoad), pad
    assert pad.stride == stride
    assert [(c.lo, c.hi) for c in pad.clamps] == [(0, row - 1)]
    ox = rng.randrange(O_EXTENT)
    for lane in range(LANES):
        assert _value(pad.base, {o: ox}) + lane * stride == _value(pad.offset, {o: ox, v: lane})


def test_a_clamp_the_lane_does_not_move_stays_in_the_offset() -> None:
    """The row of a 2-d padded copy is the same for every lane: its clamp is ordinary arithmetic
    of the base address, not something the mask has to check."""
    h, v = Var("h"), Var("v")
    y, x = BinOp("-", h, _c(1)), BinOp("-", v, _c(1))
    row = BinOp("min", BinOp("max", y, _c(0)), _c(5))
    load = Load(Buffer("A", (6, 6)), (row, BinOp("max", x, _c(0))))
    pad = padded_load(Select(BinOp(">=", x, _c(0)), load, FloatImm(0.0)), v, {h: 8, v: LANES})
    assert isinstance(pad, PaddedLoad)
    assert [(c.lo, c.hi) for c in pad.clamps] == [(0, None)]
    for hx in range(8):
        assert _value(pad.base, {h: hx}) == min(max(hx - 1, 0), 5) * 6 - 1


def test_strip_clamps_lists_the_innermost_clamp_first() -> None:
    v = Var("v")
    inner = BinOp("max", v, _c(1))
    e = BinOp("min", BinOp("max", BinOp("+", inner, _c(2)), _c(0)), _c(9))
    stripped, clamps = strip_clamps(e, v)
    assert _value(stripped, {v: 5}) == 7
    assert clamps == (Clamp(v, 1, None), Clamp(BinOp("+", v, _c(2)), 0, 9))


def test_strip_clamps_lists_clamps_left_to_right() -> None:
    v, w = Var("v"), Var("w")
    e = BinOp("+", BinOp("max", v, _c(0)), BinOp("*", BinOp("min", v, _c(3)), _c(2)))
    stripped, clamps = strip_clamps(e, v)
    assert clamps == (Clamp(v, 0, None), Clamp(v, None, 3))
    assert _value(stripped, {v: 5}) == 15
    # a clamp of something else is left alone
    assert strip_clamps(BinOp("max", w, _c(0)), v) == (BinOp("max", w, _c(0)), ())


@pytest.mark.parametrize(
    ("sel", "reason"),
    [
        (
            Select(BinOp(">=", Var("v"), _c(1)), Load(Buffer("A", (8,)), (Var("v"),)), Var("v")),
            "not a select between a load and a constant",
        ),
        (
            _padded(BinOp("max", BinOp("-", Var("v"), _c(1)), _c(0)), BinOp(">=", Var("v"), _c(1)), "int8"),
            "int8 elements",
        ),
        (_padded(BinOp("-", Var("v"), _c(1)), BinOp(">=", Var("v"), _c(1))), "no clamp"),
        (
            _padded(BinOp("max", BinOp("*", Var("v"), _c(5)), _c(3)), BinOp(">=", Var("v"), _c(1))),
            "lane stride 5 outside 1..4",
        ),
        (
            _padded(BinOp("max", BinOp("%", Var("v"), _c(3)), _c(1)), BinOp(">=", Var("v"), _c(1))),
            "no term of the lane variable alone",
        ),
    ],
    ids=["fill-not-constant", "narrow-type", "unclamped", "stride-5", "lane-in-modulo"],
)
def test_selects_that_are_not_padded_loads_say_why(sel: Select, reason: str) -> None:
    v = _lane_var(sel)
    got = padded_load(sel, v, {v: LANES})
    assert isinstance(got, NotPadded)
    assert reason in got.reason


def test_the_lane_in_a_nonaffine_term_of_a_padded_offset_is_refused() -> None:
    o, v = Var("o"), Var("v")
    x = BinOp("-", BinOp("+", v, BinOp("*", BinOp("//", BinOp("+", v, o), _c(4)), _c(2))), _c(1))
    got = padded_load(_padded(BinOp("max", x, _c(0)), BinOp(">=", x, _c(0))), v, {o: 64, v: LANES})
    assert isinstance(got, NotPadded)
    assert "non-affine" in got.reason


def test_the_decisions_need_no_llvm() -> None:
    """The access analysis is importable (and testable) without llvmlite."""
    code = "import sys, compiler.codegen.access; assert 'llvmlite' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
