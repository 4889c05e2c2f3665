"""Schedule primitives keep what a kernel computes; traces replay; misuse is a ScheduleError."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.errors import ScheduleError
from compiler.tir.ir import BinOp, Layout
from compiler.tir.printer import func_str
from compiler.tir.trace import Instruction, Schedule, Trace, replay
from tests.compiler.tir.kernels import matmul_relu, run_func

RNG = np.random.default_rng(0)


def _check(func, m, n, k, pack=None):  # type: ignore[no-untyped-def]
    a = RNG.standard_normal((m, k), dtype=np.float32)
    b = RNG.standard_normal((k, n), dtype=np.float32)
    out = np.zeros((m, n), np.float32)
    bb = b
    if pack is not None:
        from compiler.planner import pack_constant

        bb = pack_constant(b, pack)
    run_func(func, a, bb, out)
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


def _tiled(m: int, n: int, k: int, mt: int, nt: int, pack: bool) -> Schedule:
    sch = Schedule(matmul_relu(m, n, k), frozenset({"B"}))
    sch.set_scope("C", "local")
    io, ii = sch.split("C_i", [None, mt])
    jo, ji = sch.split("C_j", [None, nt])
    sch.reorder(jo, io, "C_k", ii, ji)
    outer = sch.fuse(jo, io)
    sch.parallel(outer)
    sch.unroll(ii)
    sch.vectorize(ji)
    if pack:
        sch.pack_layout("B", Layout(((1, nt),), (1, 0, 2)))
    sch.reverse_compute_at("R", outer)
    sch.decompose_reduction("C", "C_k")
    return sch


def test_naive_kernel_matches_numpy() -> None:
    _check(matmul_relu(7, 5, 3), 7, 5, 3)


@pytest.mark.parametrize(
    ("m", "n", "k", "mt", "nt", "pack"),
    [
        (64, 48, 32, 4, 16, False),
        (64, 48, 32, 4, 16, True),
        (30, 40, 17, 4, 8, False),
        (30, 40, 17, 4, 8, True),
        (5, 3, 9, 2, 2, False),
    ],
)
def test_tiled_schedule_matches_numpy(m: int, n: int, k: int, mt: int, nt: int, pack: bool) -> None:
    # non-dividing tiles (30 rows by 4, 3 columns by 2) exercise the predicates splits add
    sch = _tiled(m, n, k, mt, nt, pack)
    _check(sch.func, m, n, k, dict(sch.func.layouts).get("B"))


def test_trace_round_trips_and_replays_identically() -> None:
    sch = _tiled(64, 48, 32, 4, 16, True)
    text = sch.trace.dumps()
    again = replay(matmul_relu(64, 48, 32), Trace.from_json(text), frozenset({"B"}))
    assert func_str(again.func) == func_str(sch.func)
    assert again.trace.dumps() == text


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda s: s.split("nope", [None, 4]), "no loop named 'nope'"),
        (lambda s: s.split("C_i", [3, 3]), "does not cover"),
        (lambda s: s.split("C_i", [None, 0]), "invalid factors"),
        (lambda s: s.reorder("C_i", "R_j"), "not one perfectly nested chain"),
        (lambda s: s.compute_inline("C"), "is a reduction"),
        (lambda s: s.vectorize("C_k"), "too long"),
        (lambda s: s.pack_layout("A", Layout(((1, 4),), (1, 0, 2))), "not a constant parameter"),
        (lambda s: s.decompose_reduction("R", "R_i"), "has no init"),
    ],
)
def test_invalid_primitives_raise_schedule_error(action, message) -> None:  # type: ignore[no-untyped-def]
    sch = Schedule(matmul_relu(64, 48, 100), frozenset({"B"}))
    before = sch.trace
    with pytest.raises(ScheduleError, match=message):
        action(sch)
    assert sch.trace == before  # a failed primitive records nothing


def test_malformed_trace_is_rejected() -> None:
    with pytest.raises(ScheduleError):
        Trace.from_json("{not json")
    with pytest.raises(ScheduleError, match="version"):
        Trace.from_json({"version": 99, "instructions": []})
    with pytest.raises(ScheduleError, match="unknown schedule primitive"):
        Trace.from_json({"version": 1, "instructions": [{"prim": "explode"}]})
    with pytest.raises(ScheduleError, match="unknown schedule primitive"):  # a Trace built in Python
        replay(matmul_relu(8, 8, 8), Trace((Instruction("explode", ()),)))


def test_printer_shows_blocks_and_loop_kinds() -> None:
    text = func_str(_tiled(64, 48, 32, 4, 16, False).func)
    assert "parallel(" in text and "vectorized(16)" in text and "unrolled(4)" in text
    assert "with block('C'" in text and "scope='local'" in text


def test_predicated_vector_loop_matches_numpy() -> None:
    """A vectorized loop whose split does not divide: the last vector is masked (loads and stores)."""
    from compiler.tir import compute as te
    from compiler.tir.ir import BinOp, IntImm
    from compiler.tir.lower import lower

    with te.tensor_scope():
        x = te.placeholder((3, 37), "float32", "x")
        y = te.compute(
            (3, 37),
            lambda i, j: te.call("exp", x[i, BinOp("%", te.mul(j, IntImm(7)), IntImm(37))]),
            "y",
            axis_names=["i", "j"],
        )
        func = lower("k", [x], y)
    sch = Schedule(func)
    _, inner = sch.split("y_j", [None, 8])
    sch.vectorize(inner)
    a = RNG.standard_normal((3, 37), dtype=np.float32)
    out = np.full((3, 40), -1.0, np.float32)[:, :37].copy()
    run_func(sch.func, a, out)
    np.testing.assert_allclose(out, np.exp(a[:, (np.arange(37) * 7) % 37]), rtol=1e-6)


@pytest.mark.parametrize(("width", "vector"), [(37, 8), (30, 16), (40, 40)])
def test_vectorized_padded_copy_matches_numpy(width: int, vector: int) -> None:
    """A padded copy (select of a clamped load) vectorized along the row: whole vectors inside the
    row load at once, vectors over the border mix loaded lanes and padding, partial vectors mask."""
    from compiler.ops.conv2d import pad_tensor
    from compiler.tir import compute as te
    from compiler.tir.lower import lower

    with te.tensor_scope():
        x = te.placeholder((3, width), "float32", "x")
        y = pad_tensor(x, (1, 2), (2, 3), -7.0, "x")
        func = lower("k", [x], y)
    sch = Schedule(func)
    row = "x_pad_i1"
    if vector < width:
        _, inner = sch.split(row, [None, vector])
        sch.vectorize(inner)
    else:
        sch.vectorize(row)
    a = RNG.standard_normal((3, width), dtype=np.float32)
    out = np.zeros((6, width + 5), np.float32)
    run_func(sch.func, a, out)
    np.testing.assert_array_equal(out, np.pad(a, ((1, 2), (2, 3)), constant_values=-7.0))


def test_compute_at_reads_a_tiled_index_through_the_loops_ranges() -> None:
    """A consumer reading its producer at (o * m + i) // m, i < m (as a Winograd output transform
    reads a tile's products): under `o` the producer's region is the one element o, found with the
    inner loop's range; each iteration computes only that element."""
    from compiler.tir import compute as te
    from compiler.tir.lower import lower

    with te.tensor_scope():
        a = te.placeholder((8,), "float32", "A")
        p = te.compute((8,), lambda i: te.mul(a[i], te.f32(2.0)), "P", axis_names=["i"])
        r = te.compute(
            (16,),
            lambda y: te.add(p[BinOp("//", y, te.idx(2))], te.f32(1.0)),
            "R",
            axis_names=["y"],
            tag="elemwise",
        )
        func = lower("tiles", [a], r)
    sch = Schedule(func)
    yo, _ = sch.split("R_y", [None, 2])
    sch.compute_at("P", yo)
    text = func_str(sch.func)
    assert "for P_i in range(1)" in text, text
    x = RNG.standard_normal(8).astype(np.float32)
    out = np.zeros(16, np.float32)
    run_func(sch.func, x, out)
    np.testing.assert_allclose(out, np.repeat(x * 2 + 1, 2), rtol=1e-6)
