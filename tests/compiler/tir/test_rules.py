"""The generic schedule: producers inlined or computed per parallel chunk, the output's outer loops
parallel and its innermost loop vectorized, and the kernel still legal and computing the same result.

Kernels are written with the tensor expressions the op families use (each stage tagged as lowering
tags it) and compiled; sizes are stated in vector lanes and cores of this machine, so the same
branch of the rule runs everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from compiler.errors import ScheduleError
from compiler.target import host_target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.ir import Allocate, BinOp, For, ForKind, PrimFunc, walk_stmts
from compiler.tir.legality import check_legal
from compiler.tir.lower import lower, stages_of
from compiler.tir.printer import func_str
from compiler.tir.rules import (
    MIN_PARALLEL_WORK,
    MIN_SHORT_VECTOR,
    KernelInfo,
    block_of,
    generic_schedule,
    inline_injective,
    root_loops,
    transposed_axis,
    try_,
)
from compiler.tir.trace import Schedule, replay
from tests.compiler.tir.kernels import run_func

TARGET = host_target()
LANES = TARGET.lanes()


def _kernel(name: str, params: list[te.Tensor], out: te.Tensor) -> tuple[PrimFunc, KernelInfo]:
    func = lower(name, params, out)
    tags = {t.op.name: t.op.tag for t in stages_of(out) if t.op is not None}
    return func, KernelInfo(TARGET, out.buffer.name, None, tags)


def bias_relu(shape: tuple[int, ...]) -> tuple[PrimFunc, KernelInfo]:
    """R = max(X + B, 0), B broadcast along the last axis; the add is a separate broadcast stage."""
    names = ["i", "j", "k"][: len(shape)]
    with te.tensor_scope():
        x = te.placeholder(shape, "float32", "X")
        b = te.placeholder(shape[-1:], "float32", "B")
        t = te.compute(shape, lambda *ix: te.add(x[ix], b[ix[-1]]), "T", tag="broadcast", axis_names=names)
        r = te.compute(
            shape, lambda *ix: te.maximum(t[ix], te.f32(0.0)), "R", tag="elemwise", axis_names=names
        )
        return _kernel("bias_relu", [x, b], r)


def softmax_rows(rows: int, cols: int) -> tuple[PrimFunc, KernelInfo]:
    """exp (elementwise), its row sums (a reduction) and the division (the output)."""
    with te.tensor_scope():
        x = te.placeholder((rows, cols), "float32", "X")
        e = te.compute((rows, cols), lambda i, j: te.call("exp", x[i, j]), "E", tag="elemwise")
        k = te.reduce_axis(cols, "k")
        s = te.compute(
            (rows,), lambda i: te.reduce_sum(e[i, k.var], [k]), "S", tag="reduce", axis_names=["i"]
        )
        r = te.compute(
            (rows, cols), lambda i, j: te.div(e[i, j], s[i]), "R", tag="elemwise", axis_names=["i", "j"]
        )
        return _kernel("softmax", [x], r)


def softmax_columns(rows: int, cols: int) -> tuple[PrimFunc, KernelInfo]:
    """Softmax over the first axis: each output row needs the sums of every row."""
    with te.tensor_scope():
        x = te.placeholder((rows, cols), "float32", "X")
        e = te.compute((rows, cols), lambda i, j: te.call("exp", x[i, j]), "E", tag="elemwise")
        k = te.reduce_axis(rows, "k")
        s = te.compute(
            (cols,), lambda j: te.reduce_sum(e[k.var, j], [k]), "S", tag="reduce", axis_names=["j"]
        )
        r = te.compute(
            (rows, cols), lambda i, j: te.div(e[i, j], s[j]), "R", tag="elemwise", axis_names=["i", "j"]
        )
        return _kernel("softmax0", [x], r)


def to_planar(n: int, blocks: int, h: int, w: int, b: int, channels: int) -> tuple[PrimFunc, KernelInfo]:
    """NCHW{b}c -> NCHW as layout_transform computes it: out[n, c, h, w] = x[n, c // b, h, w, c % b]."""
    with te.tensor_scope():
        x = te.placeholder((n, blocks, h, w, b), "float32", "X")
        r = te.compute(
            (n, channels, h, w),
            lambda i, c, y, z: x[i, BinOp("//", c, te.idx(b)), y, z, BinOp("%", c, te.idx(b))],
            "R",
            tag="injective",
            axis_names=["n", "c", "h", "w"],
        )
        return _kernel("to_planar", [x], r)


def keys_transposed(heads: int, dim: int, tokens: int) -> tuple[PrimFunc, KernelInfo]:
    """Attention's K^T from a [tokens, heads * dim] projection, through the flat index a
    reshape-transpose-reshape chain leaves: out[h, d, t] = x[(t * heads * dim + h * dim + d) // (heads * dim),
    (t * heads * dim + h * dim + d) % (heads * dim)]."""
    width = heads * dim
    with te.tensor_scope():
        x = te.placeholder((tokens, width), "float32", "X")

        def body(h, d, t):  # type: ignore[no-untyped-def]
            flat = te.add(te.add(te.mul(t, te.idx(width)), te.mul(h, te.idx(dim))), d)
            return x[BinOp("//", flat, te.idx(width)), BinOp("%", flat, te.idx(width))]

        r = te.compute((heads, dim, tokens), body, "R", tag="injective", axis_names=["h", "d", "t"])
        return _kernel("keys_transposed", [x], r)


def _scheduled(kernel: tuple[PrimFunc, KernelInfo]) -> Schedule:
    func, info = kernel
    sch = Schedule(func)
    generic_schedule(sch, info)
    check_legal(sch.func)  # what build_kernel holds every default schedule to
    # the schedule is data: its trace replays to the same kernel
    assert func_str(replay(func, sch.trace).func) == func_str(sch.func)
    return sch


def _parallel(sch: Schedule) -> list[For]:
    """The distinct parallel loops (a loop shared by several blocks counted once)."""
    found = {id(f): f for b in sch.blocks() for f in root_loops(sch, b) if f.kind is ForKind.PARALLEL}
    return list(found.values())


def _check_bias_relu(sch: Schedule, shape: tuple[int, ...], rng: np.random.Generator) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[-1:]).astype(np.float32)
    out = np.full(shape, np.nan, np.float32)
    run_func(sch.func, x, b, out)
    np.testing.assert_array_equal(out, np.maximum(x + b, 0))


def _check_softmax(sch: Schedule, shape: tuple[int, int], axis: int, rng: np.random.Generator) -> None:
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.full(shape, np.nan, np.float32)
    run_func(sch.func, x, out)
    np.testing.assert_allclose(out, np.exp(x) / np.exp(x).sum(axis, keepdims=True), rtol=1e-5)


def test_a_small_elementwise_kernel_is_inlined_and_vectorized_on_one_core(rng: np.random.Generator) -> None:
    shape = (4, 2 * LANES)
    sch = _scheduled(bias_relu(shape))
    assert sch.blocks() == ["R"]  # the broadcast add is inlined into the output
    loops = root_loops(sch, "R")
    assert loops[-1].kind is ForKind.VECTORIZED and loops[-1].extent == LANES
    assert not _parallel(sch), "below MIN_PARALLEL_WORK elements a kernel stays on one core"
    _check_bias_relu(sch, shape, rng)


def test_a_large_output_runs_its_outer_loop_in_parallel(rng: np.random.Generator) -> None:
    rows = max(256, 4 * TARGET.cores)
    shape = (rows, max(LANES, -(-MIN_PARALLEL_WORK // rows)))
    sch = _scheduled(bias_relu(shape))
    loops = root_loops(sch, "R")
    assert loops[0].kind is ForKind.PARALLEL and loops[0].extent == rows
    assert loops[-1].kind is ForKind.VECTORIZED
    _check_bias_relu(sch, shape, rng)


def test_short_leading_loops_are_fused_until_every_core_has_work(rng: np.random.Generator) -> None:
    shape = (2, 2 * TARGET.cores, MIN_PARALLEL_WORK // TARGET.cores)
    sch = _scheduled(bias_relu(shape))
    (par,) = _parallel(sch)
    assert par is root_loops(sch, "R")[0]
    assert par.extent == 4 * TARGET.cores  # the two leading loops, fused
    _check_bias_relu(sch, shape, rng)


@pytest.mark.parametrize(
    ("width", "inner"),
    [
        (MIN_SHORT_VECTOR - 1, ForKind.SERIAL),  # a few columns: left scalar
        (LANES - 1, ForKind.VECTORIZED),  # narrower than a vector: one shorter vector
        (37, ForKind.VECTORIZED),  # not a multiple of the lanes, short: one vector of 37
        (101, ForKind.VECTORIZED),  # long: split into vectors, the last one masked
    ],
)
def test_widths_that_are_not_a_multiple_of_the_vector(
    width: int, inner: ForKind, rng: np.random.Generator
) -> None:
    shape = (3, width)
    sch = _scheduled(bias_relu(shape))
    assert root_loops(sch, "R")[-1].kind is inner
    _check_bias_relu(sch, shape, rng)


def test_a_reduction_producer_is_computed_inside_each_parallel_chunk(rng: np.random.Generator) -> None:
    shape = (max(512, 4 * TARGET.cores), 64)
    sch = _scheduled(softmax_rows(*shape))
    # exp is inlined into both of its consumers; the sums' init is hoisted out of their rows
    assert sch.blocks() == ["S_init", "S", "R"]
    (par,) = _parallel(sch)
    sums = root_loops(sch, "S")
    assert sums[0] is par  # the row sums of a chunk are made right before it divides by them
    assert sums[-1].kind is ForKind.VECTORIZED  # each row summed as vectors, their lanes combined
    assert all(f.kind is ForKind.SERIAL for f in sums[1:-1])
    _check_softmax(sch, shape, 1, rng)


def test_a_reduction_is_not_repeated_for_each_chunk_of_its_row(rng: np.random.Generator) -> None:
    """Two long rows (a GroupNorm of one group per sample): the output's parallel loop splits each row
    into chunks, and a row sum computed inside it would be redone for every chunk. The sums run once
    per row, before the parallel loop."""
    shape = (2, MIN_PARALLEL_WORK)
    sch = _scheduled(softmax_rows(*shape))
    (par,) = _parallel(sch)
    assert par.extent > shape[0]  # the parallel loop covers chunks of the rows, not whole rows
    sums = root_loops(sch, "S")
    assert par not in sums
    iterations = 1
    for f in sums:
        iterations *= f.extent
    assert iterations == shape[0] * shape[1]
    _check_softmax(sch, shape, 1, rng)


def test_row_sums_computed_per_parallel_chunk_take_only_that_chunks_memory(rng: np.random.Generator) -> None:
    """The row sums allocated inside the parallel loop hold the rows of one iteration, not all rows:
    a small buffer on the stack rather than a workspace allocation of the whole per iteration."""
    shape = (max(512, 4 * TARGET.cores), 64)
    sch = _scheduled(softmax_rows(*shape))
    flat = flatten(sch.func)
    (par,) = [f for f in walk_stmts(flat.body) if isinstance(f, For) and f.kind is ForKind.PARALLEL]
    (sums,) = [a for a in walk_stmts(par.body) if isinstance(a, Allocate) and a.buffer.name == "S"]
    size = 1
    for d in sums.buffer.shape:
        size *= d
    assert size * par.extent == shape[0]  # one iteration's rows
    _check_softmax(sch, shape, 1, rng)


def test_a_small_kernel_with_a_reduction_runs_on_one_thread(rng: np.random.Generator) -> None:
    sch = _scheduled(softmax_rows(3, LANES - 1))
    assert sch.blocks() == ["S_init", "S", "R"]
    assert not _parallel(sch)
    assert root_loops(sch, "S")[-1].kind is ForKind.VECTORIZED  # its rows still summed as a vector
    _check_softmax(sch, (3, LANES - 1), 1, rng)


def test_a_reduction_across_the_parallel_axis_stays_legal(rng: np.random.Generator) -> None:
    shape = (256, 256)
    sch = _scheduled(softmax_columns(*shape))
    _check_softmax(sch, shape, 0, rng)


def test_inline_injective_keeps_the_output_the_reductions_and_what_it_is_told_to() -> None:
    func, info = softmax_rows(4, 4)
    sch = Schedule(func)
    inline_injective(sch, info, keep=("E",))
    assert sch.blocks() == ["E", "S", "R"]
    inline_injective(sch, info)
    assert sch.blocks() == ["S", "R"]


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda sch: block_of(sch, "nope"), "no block 'nope'"),
        (lambda sch: root_loops(sch, "nope"), "no block named 'nope' in softmax"),
    ],
)
def test_unknown_blocks_are_schedule_errors(action: Callable[[Schedule], object], message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        action(Schedule(softmax_rows(4, 4)[0]))


def test_try_reports_an_illegal_primitive_and_leaves_the_schedule_alone() -> None:
    sch = Schedule(softmax_rows(4, 4)[0])
    before = func_str(sch.func)
    assert not try_(sch.parallel, "S_k")  # a reduction loop: refused by the legality check
    assert func_str(sch.func) == before and not sch.trace.instructions
    assert try_(sch.parallel, "S_i")
    assert [i.prim for i in sch.trace.instructions] == ["parallel"]


@pytest.mark.parametrize("channels", [LANES, 58, 3 * LANES])
def test_a_transpose_walks_the_lines_of_its_input_once(channels: int, rng: np.random.Generator) -> None:
    """NCHW{b}c -> NCHW vectorized along w gathers each lane from its own input line. The channels
    within a block move just outside w, so each row of a block is used whole while it is in L1;
    a channel count the vector width does not divide (ShuffleNet's 58) leaves a predicated tile."""
    b = LANES
    blocks = -(-channels // b)
    shape = (1, blocks, 2 * TARGET.cores, 3 * LANES, b)
    func, info = to_planar(1, blocks, shape[2], shape[3], b, channels)
    assert transposed_axis(block_of(Schedule(func), "R")) == 1
    sch = _scheduled((func, info))
    assert sch.decisions["transpose_tile"] is True
    names = [f.var.name for f in root_loops(sch, "R")]
    assert root_loops(sch, "R")[-1].kind is ForKind.VECTORIZED
    assert names[-3].startswith("R_c"), names  # a block's channels sit just outside the row's vectors
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.full((1, channels, shape[2], shape[3]), np.nan, np.float32)
    run_func(sch.func, x, out)
    planar = x.transpose(0, 1, 4, 2, 3).reshape(1, blocks * b, shape[2], shape[3])[:, :channels]
    np.testing.assert_array_equal(out, planar)


def test_reads_along_the_output_rows_are_not_transposes() -> None:
    """An elementwise kernel and a broadcast along the rows read each input line in order: no tile."""
    for func, _ in (bias_relu((4, 2 * LANES)), softmax_rows(4, 2 * LANES)):
        sch = Schedule(func)
        for name in sch.blocks():
            assert transposed_axis(block_of(sch, name)) is None, name
    sch = _scheduled(bias_relu((4, 2 * LANES)))
    assert "transpose_tile" not in sch.decisions


def test_a_transpose_whose_row_is_long_walks_it_a_vector_at_a_time(rng: np.random.Generator) -> None:
    """K^T reads one element of each token's row per output element: the channel axis is already
    just outside the tokens, but a pass over all tokens per channel touches every row (and page)
    each time. The tokens go a vector's width at a time, the channels inside."""
    heads, dim, tokens = 3, 2 * LANES, 4 * LANES + 5
    func, info = keys_transposed(heads, dim, tokens)
    assert transposed_axis(block_of(Schedule(func), "R")) == 1  # the flat index simplifies away
    sch = _scheduled((func, info))
    assert sch.decisions["transpose_tile"] is True
    loops = root_loops(sch, "R")
    names = [f.var.name for f in loops]
    assert names[:3] == ["R_h", "R_t_0", "R_d"], names  # a vector's width of tokens, then every channel
    assert loops[1].extent == -(-tokens // LANES) and loops[-1].kind is ForKind.VECTORIZED
    x = rng.standard_normal((tokens, heads * dim)).astype(np.float32)
    out = np.full((heads, dim, tokens), np.nan, np.float32)
    run_func(sch.func, x, out)
    np.testing.assert_array_equal(out, x.reshape(tokens, heads, dim).transpose(1, 2, 0))
