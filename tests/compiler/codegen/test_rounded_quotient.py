"""round(a / b) over a divisor that is one value for every vector lane (a quantization's scale):
the code generator divides by multiplying with b's reciprocal and correcting once (exact by FMA),
which must give numpy's float32 round(a / b) bit for bit: at ties, at every magnitude, for zeros,
infinities and NaN, and (by the division itself) for divisors outside the path's range."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.codegen.library import CodeLibrary
from compiler.target import host_target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.lower import lower
from compiler.tir.rules import root_loops
from compiler.tir.trace import Schedule
from tests.compiler.tir.kernels import run_func

N = 4096


def _rounded_quotient_kernel(vector: bool) -> object:
    """out[i] = round(a[i] / b[0]), its lanes vectorized at the target's width (or scalar)."""
    with te.tensor_scope():
        a = te.placeholder((N,), "float32", "a")
        b = te.placeholder((1,), "float32", "b")
        out = te.compute((N,), lambda i: te.call("round", te.div(a[i], b[te.idx(0)])), "q", axis_names=["i"])
        func = lower("q", [a, b], out)
    sch = Schedule(func)
    if vector:
        (i,) = (f.var.name for f in root_loops(sch, "q"))
        _, inner = sch.split(i, [None, host_target().lanes("float32")])
        sch.vectorize(inner)
    return sch.func


def _numerators(rng: np.random.Generator, divisor: np.float32) -> np.ndarray:
    """Ties (k + 1/2 times the divisor, where exact), their neighbours one ulp away, values over
    every magnitude of either sign, and the special values."""
    k = rng.integers(-300, 300, N // 4).astype(np.float32)
    with np.errstate(all="ignore"):  # the divisors include infinity and NaN; wide values overflow
        ties = ((k + np.float32(0.5)) * divisor).astype(np.float32)
        away = np.float32(np.inf) * np.sign(rng.standard_normal(N // 4))
        near = np.nextafter(ties, away).astype(np.float32)
        wide = (rng.standard_normal(N // 4) * 10.0 ** rng.integers(-45, 39, N // 4)).astype(np.float32)
        quotients = (rng.uniform(-1000, 1000, N // 4) * divisor).astype(np.float32)
    values = np.concatenate([ties, near, wide, quotients])
    top = np.finfo(np.float32).max
    values[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, top, -top, 1e-45]
    return values.astype(np.float32)


DIVISORS = [0.1, 3.7e-3, 1 / 3, 7.0, -0.0235, 2.0**-60, 2.0**60, 1e-30, 1e30, 0.0, np.inf, np.nan, 1e-40]


@pytest.mark.parametrize("vector", [True, False], ids=["vector", "scalar"])
@pytest.mark.parametrize("divisor", DIVISORS, ids=[f"{d:g}" for d in DIVISORS])
def test_round_of_a_quotient_is_numpys_bit_for_bit(divisor: float, vector: bool) -> None:
    rng = np.random.default_rng(3)
    b = np.array([divisor], np.float32)
    a = _numerators(rng, b[0])
    out = np.zeros(N, np.float32)
    run_func(_rounded_quotient_kernel(vector), a, b, out)  # type: ignore[arg-type]
    with np.errstate(all="ignore"):
        want = np.round(a / b[0])
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_the_vector_path_multiplies_by_the_reciprocal() -> None:
    lib = CodeLibrary(host_target())
    lib.add_kernel(flatten(_rounded_quotient_kernel(vector=True)), "kernel")  # type: ignore[arg-type]
    code = lib.llvm_ir()
    assert "llvm.fma" in code and "roundeven" in code
