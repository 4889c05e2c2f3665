"""Index arithmetic as the LLVM emitter writes it: integer terms known at emission (an unrolled
loop's index times a stride) are folded with the emitted code's own semantics (floor division,
wrap-around), identities are not emitted, and a term that every iteration of an unrolled tile
recomputes is emitted once per block. The kernels' results are checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from compiler.codegen.library import CodeLibrary
from compiler.codegen.llvm import _fold_int
from compiler.target import host_target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.ir import BinOp, Expr, PrimFunc
from compiler.tir.lower import lower
from compiler.tir.rules import root_loops
from compiler.tir.trace import Schedule
from tests.compiler.tir.kernels import run_func

I64, I32 = ir.IntType(64), ir.IntType(32)
OPS = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "//": np.floor_divide,
    "%": np.remainder,
    "min": np.minimum,
    "max": np.maximum,
}


@pytest.mark.parametrize("op", list(OPS))
def test_constants_fold_as_the_emitted_code_computes_them(op: str) -> None:
    """numpy's int64 and int32 arithmetic is LLVM's: wrapping, and floor division and modulo as
    the emitter computes them (its fix-up of truncation); operands of both signs and near the
    ends of the range."""
    rng = np.random.default_rng(7)
    for ty, dtype in ((I64, np.int64), (I32, np.int32)):
        top = np.iinfo(dtype).max
        xs = np.concatenate([rng.integers(-1000, 1000, 200), rng.integers(-top, top, 50), [top, -top - 1]])
        ys = np.concatenate([rng.integers(-50, 50, 200), rng.integers(-top, top, 50), [7, -3]])
        for x, y in zip(xs.astype(dtype), ys.astype(dtype), strict=True):
            if op in ("//", "%") and y == 0:
                assert _fold_int(op, ir.Constant(ty, int(x)), ir.Constant(ty, 0)) is None
                continue
            with np.errstate(over="ignore"):
                want = OPS[op](np.array([x]), np.array([y]))[0]
            got = _fold_int(op, ir.Constant(ty, int(x)), ir.Constant(ty, int(y)))
            assert isinstance(got, ir.Constant) and got.type == ty
            assert got.constant == int(want), (op, int(x), int(y))


def test_identities_give_the_operand_and_other_values_are_emitted() -> None:
    x = ir.Argument(ir.Function(ir.Module(), ir.FunctionType(I64, [I64]), "f"), I64)
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
    assert _fold_int("+", x, zero) is x and _fold_int("+", zero, x) is x
    assert _fold_int("-", x, zero) is x and _fold_int("*", x, one) is x and _fold_int("*", one, x) is x
    assert _fold_int("//", x, one) is x
    for op, a, b in (("*", x, zero), ("*", zero, x), ("%", x, one)):
        folded = _fold_int(op, a, b)
        assert isinstance(folded, ir.Constant) and folded.constant == 0
    assert _fold_int("-", zero, x) is None and _fold_int("+", x, one) is None
    assert _fold_int("//", x, ir.Constant(I64, 3)) is None
    # vectors, booleans and bytes are left to LLVM
    v = ir.Constant(ir.VectorType(I64, 4), [1, 2, 3, 4])
    assert _fold_int("+", v, v) is None
    assert _fold_int("+", ir.Constant(ir.IntType(8), 100), ir.Constant(ir.IntType(8), 100)) is None
    assert _fold_int("+", ir.Constant(ir.IntType(1), 1), ir.Constant(ir.IntType(1), 1)) is None


def _shared_row_kernel(rows: int, cols: int, div: int, unroll: bool) -> PrimFunc:
    """out[i, j] = a[i // div, j] * b[i // div, cols - 1 - j] + (i % div): every column of a row
    reads the same row term `i // div`; the columns unrolled (or a counted loop)."""
    with te.tensor_scope():
        a = te.placeholder((-(-rows // div), cols), "float32", "a")
        b = te.placeholder((-(-rows // div), cols), "float32", "b")

        def value(i: Expr, j: Expr) -> Expr:
            row = BinOp("//", i, te.idx(div))
            flipped = BinOp("-", te.idx(cols - 1), j)
            rest = te.cast("float32", BinOp("%", i, te.idx(div)))
            return te.add(te.mul(a[row, j], b[row, flipped]), rest)

        out = te.compute((rows, cols), value, "out", axis_names=["i", "j"])
        func = lower("shared_row", [a, b], out)
    sch = Schedule(func)
    if unroll:
        sch.unroll(root_loops(sch, "out")[1].var.name)
    return sch.func


@pytest.mark.parametrize("unroll", [True, False], ids=["unrolled", "counted"])
@pytest.mark.parametrize(("rows", "cols", "div"), [(12, 8, 3), (7, 5, 2), (9, 16, 4)])
def test_kernels_reading_shared_index_terms_match_numpy(rows: int, cols: int, div: int, unroll: bool) -> None:
    rng = np.random.default_rng(rows * cols)
    a = rng.standard_normal((-(-rows // div), cols)).astype(np.float32)
    b = rng.standard_normal((-(-rows // div), cols)).astype(np.float32)
    out = np.zeros((rows, cols), np.float32)
    run_func(_shared_row_kernel(rows, cols, div, unroll), a, b, out)
    i = np.arange(rows)
    want = a[i // div] * b[i // div][:, ::-1] + (i % div)[:, None].astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)  # a * b + r may run as one FMA


def test_an_unrolled_tile_computes_a_shared_row_term_once() -> None:
    """Eight unrolled columns each read two buffers at `(i // 3) * 8 + column`: the emitted IR (before
    LLVM's own clean-up) divides and scales the row once, and does no arithmetic on constants alone."""
    lib = CodeLibrary(host_target())
    lib.add_kernel(flatten(_shared_row_kernel(12, 8, 3, unroll=True)), "kernel")
    body = [line.strip() for line in lib.ir_text().splitlines() if " = " in line]
    assert sum(" sdiv " in line for line in body) == 1
    assert sum(" srem " in line for line in body) == 1
    # the inputs' row (i // 3) * 8 and the output's row i * 8, each once for the eight columns
    assert sum(" mul i64 " in line for line in body) == 2
    arithmetic = [line for line in body if any(f" {op} i64 " in line for op in ("add", "sub", "mul"))]
    constant_ops = [line for line in arithmetic if "%" not in line.split(" = ", 1)[1]]
    assert constant_ops == []
