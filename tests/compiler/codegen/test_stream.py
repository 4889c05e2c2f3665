"""Weight streaming (compiler/codegen/stream.py): which constant a kernel prefetches, from which loop,
and that the prefetches never change what a kernel computes."""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np
import pytest

from compiler.codegen.library import CodeLibrary
from compiler.codegen.stream import (
    STREAM_LEAD_BYTES,
    STREAM_MAX_REUSE,
    STREAM_MIN_WORK,
    stream_loop,
    stream_param,
    stream_steps,
    stream_stride,
    work,
)
from compiler.target import host_target
from compiler.tir.ir import BinOp, Buffer, For, ForKind, IntImm, Load, PrimFunc, Seq, Store, Var

LANES = 16  # the vectorized loop's extent in these kernels (any target vectorizes it, in one or more vectors)


def _matvec_rows(m: int, k: int, n: int, parallel: bool = True) -> tuple[PrimFunc, tuple[Var, Var, Var]]:
    """C[i, j] = sum_r A[i, r] * W[r, j]: for i (parallel), for jo (serial), for r (serial), for ji
    (vectorized); each jo iteration is k vector multiply-adds, the work of one register tile."""
    a, w, c = Buffer("A", (m, k)), Buffer("W", (k, n)), Buffer("C", (m, n))
    i, jo, r, ji = Var("i"), Var("jo"), Var("r"), Var("ji")
    j = BinOp("+", BinOp("*", jo, IntImm(LANES)), ji)
    step = Store(c, (i, j), BinOp("+", Load(c, (i, j)), BinOp("*", Load(a, (i, r)), Load(w, (r, j)))))
    nest = For(r, k, ForKind.SERIAL, For(ji, LANES, ForKind.VECTORIZED, step))
    body = For(
        i, m, ForKind.PARALLEL if parallel else ForKind.SERIAL, For(jo, n // LANES, ForKind.SERIAL, nest)
    )
    return PrimFunc("matvec_rows", (a, w, c), body), (i, jo, r)


def _run(func: PrimFunc, stream: str | None, *arrays: np.ndarray) -> str:
    """Compile `func` (streaming `stream`), run it on `arrays` in place; returns its LLVM IR."""
    lib = CodeLibrary(host_target())
    lib.add_kernel(func, "kernel", stream)
    text = lib.ir_text()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.so"
        path.write_bytes(lib.shared_library())
        fn = ctypes.CDLL(str(path)).kernel
        fn.restype = ctypes.c_int32
        assert fn((ctypes.c_void_p * len(arrays))(*[x.ctypes.data for x in arrays])) == 0
    return text


def test_stream_param_is_the_largest_constant_input() -> None:
    func, _ = _matvec_rows(4, STREAM_MIN_WORK, 64)
    flops = 2 * 4 * STREAM_MIN_WORK * 64
    assert stream_param(func, {"A", "W"}, flops) == "W"  # 128 x 64 floats beside 4 x 128
    assert stream_param(func, {"A"}, flops) == "A"
    assert stream_param(func, set(), flops) is None
    # the output is written, never a weight to prefetch, whatever the caller says
    assert stream_param(func, {"C"}, flops) is None
    tiny, _ = _matvec_rows(2, STREAM_MIN_WORK, 16)
    scalar = PrimFunc("scale", (Buffer("s", (4,)), *tiny.params[1:]), tiny.body)
    assert stream_param(scalar, {"s"}, 0) is None  # 16 bytes: not a line to prefetch


def test_a_weight_reused_much_or_in_large_slices_is_not_streamed() -> None:
    func, _ = _matvec_rows(4, STREAM_MIN_WORK, 64)
    size = STREAM_MIN_WORK * 64 * 4
    assert stream_param(func, {"W"}, STREAM_MAX_REUSE * size) == "W"
    assert stream_param(func, {"W"}, STREAM_MAX_REUSE * size + 1) is None  # each byte reused more
    # each of the 2 parallel iterations reuses half the weight (rows x 128 floats): up to the lead
    rows = 2 * STREAM_LEAD_BYTES // (128 * 4)
    assert stream_param(_matvec_rows(2, rows, 128)[0], {"W"}, 0) == "W"
    assert stream_param(_matvec_rows(2, rows + 1, 128)[0], {"W"}, 0) is None
    # no loop to take the steps: nothing streamed
    assert stream_param(_matvec_rows(2, 4, 32)[0], {"W"}, 0) is None


@pytest.mark.parametrize("parallel", [True, False])
def test_the_steps_are_counted_from_the_parallel_loop_down(parallel: bool) -> None:
    func, (i, jo, _) = _matvec_rows(6, 2 * STREAM_MIN_WORK, 96, parallel)
    assert stream_loop(func.body) is jo
    assert stream_steps(func.body, jo) == 6 * (96 // LANES)  # i's iterations times jo's
    assert stream_steps(func.body, i) == 6
    assert stream_steps(func.body, Var("elsewhere")) == 0
    # a serial loop around a parallel one: each parallel loop numbers its own steps from 0
    outer = For(Var("o"), 3, ForKind.SERIAL, func.body)
    assert stream_steps(outer, jo) == (6 if parallel else 18) * (96 // LANES)


@pytest.mark.parametrize("seed", range(5))
def test_the_steps_cover_the_weight_once_or_twice(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        lines, steps = (int(x) for x in rng.integers(1, 5000, 2))
        per, scale, shift = stream_stride(lines, steps)
        fetched = np.concatenate([((r * scale) >> shift) + np.arange(per) for r in range(steps)])
        assert set(range(lines)) <= set(fetched.tolist()), (lines, steps)
        assert len(fetched) <= max(2 * lines, steps) + per, (lines, steps)  # no step skipped, few twice
        assert fetched.max() < 2 * lines + per, (lines, steps)


def test_the_stride_needs_lines_and_steps() -> None:
    with pytest.raises(ValueError, match="0 lines"):
        stream_stride(0, 10)
    with pytest.raises(ValueError, match="0 steps"):
        stream_stride(10, 0)


def test_stream_loop_is_the_finest_loop_with_a_register_tiles_work() -> None:
    func, (_, jo, _) = _matvec_rows(8, STREAM_MIN_WORK, 64)
    assert work(func.body) == 8 * (64 // LANES) * STREAM_MIN_WORK
    # jo's iteration does STREAM_MIN_WORK vector steps; r's does one: too little to carry a step
    assert stream_loop(func.body) is jo


def test_stream_loop_skips_a_light_pass_and_small_kernels() -> None:
    heavy, (_, jo, _) = _matvec_rows(8, 8 * STREAM_MIN_WORK, 64)
    # a copy pass before the main nest: more iterations with a register tile's work each than the
    # main nest's jo, but a quarter of the main nest's work in all
    src, dst = Buffer("S", (64, STREAM_MIN_WORK)), Buffer("D", (64, STREAM_MIN_WORK))
    p, q = Var("p"), Var("q")
    copy = For(
        p, 64, ForKind.SERIAL, For(q, STREAM_MIN_WORK, ForKind.SERIAL, Store(dst, (p, q), Load(src, (p, q))))
    )
    assert stream_loop(copy) is p
    assert stream_loop(Seq((copy, heavy.body))) is jo
    small, _ = _matvec_rows(2, STREAM_MIN_WORK // 4, 32)  # every iteration of either loop: half a tile
    assert stream_loop(small.body) is None


@pytest.mark.parametrize("parallel", [True, False])
def test_streaming_prefetches_and_computes_the_same(parallel: bool) -> None:
    m, k, n = 6, 2 * STREAM_MIN_WORK, 96
    func, _ = _matvec_rows(m, k, n, parallel)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    plain, streamed = np.zeros((m, n), np.float32), np.zeros((m, n), np.float32)
    assert "llvm.prefetch" not in _run(func, None, a, w, plain)
    assert "llvm.prefetch" in _run(func, "W", a, w, streamed)
    assert np.array_equal(plain, streamed)
    np.testing.assert_allclose(streamed, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


def test_a_kernel_without_a_heavy_loop_streams_nothing() -> None:
    func, _ = _matvec_rows(2, 4, 32)
    a, w = np.ones((2, 4), np.float32), np.ones((4, 32), np.float32)
    out = np.zeros((2, 32), np.float32)
    assert "llvm.prefetch" not in _run(func, "W", a, w, out)
    assert np.array_equal(out, np.full((2, 32), 4.0, np.float32))
