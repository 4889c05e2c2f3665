"""Row reductions split into vector steps: a max or min keeps a vector of partial results across
the steps and combines its lanes once after them; every op still computes what numpy does, masked
tail lanes and infinities included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from compiler.codegen.library import CodeLibrary
from compiler.target import host_target
from compiler.tir.flatten import flatten
from compiler.tir.ir import BinOp, Block, Buffer, For, ForKind, IterVar, Load, PrimFunc, Store, Var
from compiler.tir.legality import check_legal
from compiler.tir.trace import Schedule
from tests.compiler.tir.kernels import run_func

NUMPY: dict[str, Any] = {"max": np.max, "min": np.min, "+": np.sum}


def _rows(op: str, rows: int, n: int, lanes: int) -> PrimFunc:
    """for i, r: out[i] = op(out[i], a[i, r]) with r split into vectors of `lanes` (the last one
    masked when `lanes` does not divide n); no init: the caller sets out."""
    a, out = Buffer("a", (rows, n)), Buffer("out", (rows,))
    i, r, vi, vr = Var("i"), Var("r"), Var("vi"), Var("vr")
    step = Store(out, (vi,), BinOp(op, Load(out, (vi,)), Load(a, (vi, vr))))
    block = Block("reduce", (IterVar(vi, rows), IterVar(vr, n, reduce=True)), (i, r), step)
    nest = For(i, rows, ForKind.SERIAL, For(r, n, ForKind.SERIAL, block))
    sch = Schedule(PrimFunc("reduce", (a, out), nest))
    _, inner = sch.split("r", [None, lanes])
    sch.vectorize(inner)
    check_legal(sch.func)
    return sch.func


def _llvm(func: PrimFunc) -> str:
    lib = CodeLibrary(host_target())
    lib.add_kernel(flatten(func), "kernel")
    return lib.llvm_ir()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("op", ["max", "min", "+"])
def test_row_reductions_in_vector_steps_match_numpy(op: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, n, lanes = int(rng.integers(1, 6)), int(rng.integers(1, 300)), int(rng.choice([4, 8, 16, 64]))
    a = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    if op != "+":
        a[0, rng.integers(0, n)] = np.inf if op == "max" else -np.inf
        a[-1, :] = -np.inf if op == "max" else np.inf  # a row of the op's identity only
    start = rng.standard_normal(rows).astype(np.float32)
    out = start.copy()
    run_func(_rows(op, rows, n, lanes), a, out)
    combine: Any = np.add if op == "+" else (np.maximum if op == "max" else np.minimum)
    want = combine(start, NUMPY[op](a, axis=1))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["max", "min"])
def test_a_max_or_min_over_vector_steps_combines_its_lanes_once_per_row(op: str) -> None:
    """The steps accumulate into a vector slot, combined by halving vector steps after the loop,
    not by LLVM's scalar chain of a reduction intrinsic per step."""
    ir_text = _llvm(_rows(op, 3, 200, 64))
    assert f"@llvm.{op}num.v64f32" in ir_text  # a step into the whole vector of partial results
    assert f"llvm.vector.reduce.f{op}" not in ir_text


def test_a_sum_keeps_its_reduction_per_step() -> None:
    assert "llvm.vector.reduce.fadd" in _llvm(_rows("+", 3, 200, 64))
