"""matmul(a, b): numpy matmul for rank >= 2 operands, batch dimensions broadcast.

The frontend reshapes 1-D ONNX operands to 2-D and back, and turns Gemm into matmul plus
transposes and scaling, so this is the one dense anchor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import NUMERIC, broadcast_shapes, expect_args, expect_dtype, expect_same_dtype, fail
from compiler.ops.registry import OpDef, Pattern, register
from compiler.target import Target, tile_step_cycles
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import Expr, Layout, Load, walk_expr
from compiler.tir.rules import (
    MIN_PARALLEL_FLOPS,
    KernelInfo,
    block_of,
    inline_injective,
    parallel_vectorize,
    root_loops,
    store_of,
)
from compiler.tir.trace import Schedule


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("matmul", types, 2)
    a, b = types
    expect_same_dtype("matmul", types)
    expect_dtype("matmul", a, NUMERIC)
    if a.ndim < 2 or b.ndim < 2:
        raise fail(f"matmul operands must have rank >= 2, got {list(a.shape)} and {list(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise fail(f"matmul inner dimensions differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType((*batch, a.shape[-2], b.shape[-1]), a.dtype)


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.matmul(a[0], a[1])
    return out


# ------------------------------------------------------------------ lowering: compute definitions
def _matmul_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    a, b = inputs
    nb = len(out.shape) - 2
    k = te.reduce_axis(a.shape[-1], "k")

    def body(*ix: Expr) -> te.Reduce:
        batch, i, j = ix[:nb], ix[nb], ix[nb + 1]
        ai = [*te.broadcast_indices(out.shape[:nb], a.shape[:-2], batch), i, k.var]
        bi = [*te.broadcast_indices(out.shape[:nb], b.shape[:-2], batch), k.var, j]
        return te.reduce_sum(te.mul(a[ai], b[bi]), [k])

    names = [f"b{d}" for d in range(nb)] + ["i", "j"]
    return te.compute(out.shape, body, name, tag="anchor", axis_names=names, dtype=out.dtype)


def register_tile(target: Target, rows: int, cols: int) -> tuple[int, int]:
    """(row tile, column tile) of a register-blocked accumulator: a column tile of 1-8 vectors, as
    many rows as the vector registers allow, both dividing the extents when possible (a single
    row, as in a dense layer at batch 1, gets a wide column tile: more independent accumulators).
    Of two tiles as good by FMAs per load and accumulators, the one with more rows: every row tile
    reads the whole right-hand panel again (from L2: a panel of a long reduction outgrows L1),
    while its own rows stay in L1, so each row more cuts the panel's bytes per FMA (on AVX-512, 6
    rows by 4 vectors rather than 4 rows by 6)."""
    lanes = target.lanes()
    regs = target.vector_registers
    best = (1, min(cols, lanes))
    best_score = -1.0
    for nvec in range(8, 0, -1):
        nt = nvec * lanes
        if nvec > 1 and nt - lanes >= cols:  # more vectors than columns
            continue
        if cols % nt and cols > nt and rows > 1:  # a column tail: only worth it for a single row
            continue
        nt = min(nt, cols)
        max_rows = max(1, (regs - nvec - 1) // nvec)
        mt = max(d for d in range(1, min(rows, max_rows) + 1) if rows % d == 0)
        if rows >= 8 * max_rows and mt < max_rows:  # a row tail costs one partial tile of many
            mt = max_rows
        # FMAs per load (mt broadcasts + nvec vector loads feed mt * nvec FMAs), then accumulators,
        # less the lanes a partial last column tile wastes
        waste = (-cols % nt) / (cols + (-cols % nt))
        score = mt * nvec / (mt + nvec) + 0.01 * mt * nvec - (0.5 if nt < lanes else 0) - waste
        if (score, mt) > (best_score, best[0]):
            best, best_score = (mt, nt), score
    if best_score < 0 and rows > 1:  # no column tile divides the width (a sequence of 197 tokens)
        return tail_tile(target, rows, cols)
    return best


def _tile_step_cycles(target: Target, rows: int, vectors: int) -> float:
    """Cycles of one reduction step of a rows x vectors tile (compiler.target.tile_step_cycles):
    an FMA per accumulator at the target's rate, a broadcast per row and a panel vector per column
    vector."""
    return tile_step_cycles(rows * vectors, rows + vectors, target.fma_per_cycle)


def tail_tile(target: Target, rows: int, cols: int) -> tuple[int, int]:
    """(row tile, column tile) where no column tile divides the width, as an odd sequence length
    makes attention's score matmul (197 x 64 by 64 x 197): the last column tile runs partly empty
    and the last row tile is a shorter one (a partitioned loop), and the tile is the one whose
    steps over the whole output take the fewest cycles (_tile_step_cycles), counting the empty
    lanes and the short tile. Its width is at most half the row, so that a right-hand operand
    computed by the model is still copied into panels (matmul's `pack`), and two registers stay
    spare (a tile filling them all spills). Of tiles as fast, the one with fewer accumulators."""
    lanes, regs = target.lanes(), target.vector_registers
    best, best_key = (1, lanes), (float("inf"), 0)
    for nvec in range(1, 9):
        nt = nvec * lanes
        if 2 * nt > cols:
            break
        tiles = -(-cols // nt)
        for mt in range(1, min(rows, (regs - nvec - 3) // nvec) + 1):
            tail = rows % mt
            steps = (rows // mt) * _tile_step_cycles(target, mt, nvec)
            steps += _tile_step_cycles(target, tail, nvec) if tail else 0.0
            key = (round(tiles * steps, 6), mt * nvec)
            if key < best_key:
                best, best_key = (mt, nt), key
    return best


# a small matmul whose constant weights outgrow L1 (a recurrent cell's step, a dense layer at batch
# 1) is bound by streaming them from L2: from this size on, each core streaming its half takes less
# time than waking the other core costs
MIN_PARALLEL_WEIGHT_BYTES = 128 << 10


def _matmul_schedule(sch: Schedule, info: KernelInfo) -> None:
    """Register-blocked GEMM: an (mt x nt) accumulator tile in vector registers, the right-hand
    matrix read from column panels (packed at compile time if constant, else copied once), the
    fused epilogue applied per tile, tiles spread over the cores.

    Decisions (tunable): mt, nt (register tile), order of the tile loops, parallel depth, k unroll,
    whether to pack the right-hand matrix.
    """
    mm = info.anchor_block
    assert mm is not None
    inline_injective(sch, info)
    blk = block_of(sch, mm)
    out_buf = store_of(blk).buffer
    consumer = info.output_block
    if consumer != mm:
        sch.set_scope(out_buf.name, "local")
    else:
        consumer = sch.cache_write(mm)
    loops = [f.var.name for f in root_loops(sch, mm)]
    *batch, li, lj, lk = loops
    M, N, K = blk.iter_vars[-3].extent, blk.iter_vars[-2].extent, blk.iter_vars[-1].extent
    lanes = info.target.lanes()
    regs = info.target.vector_registers
    mt0, nt0 = register_tile(info.target, M, N)
    nt_options = sorted({min(v * lanes, N) for v in range(1, 9)} | {nt0})
    nt = sch.decide("nt", nt_options, nt0)
    nvec = max(1, -(-nt // lanes))
    max_rows = max(1, (regs - nvec - 1) // nvec)
    mt = sch.decide("mt", list(range(1, min(M, max_rows) + 1)), mt0 if nt == nt0 else 1)
    io, ii = sch.split(li, [None, mt])
    jo, ji = sch.split(lj, [None, nt])
    jvo, jv = sch.split(ji, [None, min(lanes, nt)])
    k_unroll = sch.decide("k_unroll", [u for u in (1, 2, 4, 8) if K % u == 0], 1)
    k_loops = [lk]
    if k_unroll > 1:
        ko, ku = sch.split(lk, [None, k_unroll])
        k_loops = [ko, ku]
    tile_order = sch.decide("tile_order", ["jo_io", "io_jo"], "jo_io")
    first, second = (jo, io) if tile_order == "jo_io" else (io, jo)
    sch.reorder(*batch, first, second, *k_loops, ii, jvo, jv)
    # threads take whole tiles (default) or whole rows/columns of tiles
    batch_size = 1
    for iv in blk.iter_vars[:-3]:
        batch_size *= iv.extent
    # a dense layer at batch 1 has few FLOPs but streams its whole weight matrix: split over the
    # cores, each keeps its share in its own L2 from one call to the next
    weight_bytes = max(
        (
            math.prod(x.buffer.shape) * 4
            for x in walk_expr(store_of(blk).value)
            if isinstance(x, Load) and x.buffer.name in sch.const_params
        ),
        default=0,
    )
    small = 2 * batch_size * M * N * K < MIN_PARALLEL_FLOPS and weight_bytes < MIN_PARALLEL_WEIGHT_BYTES
    # a row tail (mt not dividing M) must sit in a serial loop so loop partitioning peels it off
    mode = sch.decide(
        "parallel", ["tiles", "outer", "none"], "none" if small else "outer" if M % mt else "tiles"
    )
    if mode == "outer":
        outer = sch.fuse(*batch, first) if batch else first
        tile_loop = second
    else:
        outer = tile_loop = sch.fuse(*batch, first, second)
    if mode != "none":
        sch.parallel(outer)
    sch.unroll(ii)
    sch.unroll(jvo)
    sch.vectorize(jv)
    if k_unroll > 1:
        sch.unroll(k_loops[1])
    # the right-hand matrix in column panels of the tile width: packed at compile time when it is a
    # constant, by a copy at the start of the kernel when its panels are reused by enough rows
    rhs = next(
        x.buffer
        for x in walk_expr(store_of(blk).value)
        if isinstance(x, Load) and x.indices[-1] is blk.iter_vars[-2].var
    )
    r = len(rhs.shape)
    panels = Layout(((r - 1, nt),), (*range(r - 2), r - 1, r - 2, r))
    if rhs.name in sch.const_params:
        if sch.decide("pack", [True, False], True):  # a partial last panel is zero-padded
            sch.pack_layout(rhs.name, panels)
    elif 2 * nt <= N and rhs.shape[-2] >= 16 and sch.decide("pack", [True, False], M >= 16):
        pack = sch.cache_read(mm, rhs.name, panels)
        parallel_vectorize(sch, pack, info.target)
    sch.reverse_compute_at(consumer, tile_loop)
    sch.decompose_reduction(mm, k_loops[0])
    inner = [f for f in root_loops(sch, consumer)][-1]
    if inner.extent % lanes == 0:
        _, v = sch.split(inner.var.name, [None, lanes])
        sch.vectorize(v)


# matmul(a, b): no attributes
register(
    OpDef("matmul", Pattern.ANCHOR, _infer, _reference, compute=_matmul_compute, schedule=_matmul_schedule)
)
