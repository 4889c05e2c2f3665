"""conv2d_nchwc: convolution in the blocked channel layout (see compiler/ops/layout.py).

Input x is [N, C/ib, H, W, ib]; the weight is pre-packed [OC/ob, Cg/ib, KH, KW, ib, ob] (Cg = C /
groups, the channels one group reduces) and the output is [N, OC/ob, OH, OW, ob]. A depthwise conv
(groups = C = OC) has the weight [C/ob, 1, KH, KW, 1, ob]: output lane c reads input lane c.
Attributes as conv2d: strides, pads (top, left, bottom, right), dilations, groups.

Why a blocked layout: with ob the vector lanes, the inner loop of a dense conv is one broadcast
input value times one contiguous weight vector into a register tile of output pixels, and the tile
is stored as whole vectors (NCHW would scatter each channel vector across planes); a depthwise conv
reads contiguous channel vectors for every kernel size and stride.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.codegen.llvm import MAX_STACK_BUFFER_BYTES
from compiler.ops.common import FLOAT, expect_args, expect_dtype, fail, int_attr
from compiler.ops.conv2d import (
    ConvNest,
    _consumer_and_scope,
    _conv2d,
    conv_output_hw,
    pad_tensor,
    window_attrs,
)
from compiler.ops.layout import to_blocked, to_planar
from compiler.ops.registry import OpDef, Pattern, register
from compiler.target import DEFAULT_L2_BYTES, FMA_LATENCY, Target, tile_step_cycles
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Block, Buffer, Expr, IntImm, IterVar, Layout, Load, substitute, walk_expr
from compiler.tir.padding_steps import support_breaks, zero_padded
from compiler.tir.rules import (
    MIN_PARALLEL_FLOPS,
    KernelInfo,
    block_of,
    inline_injective,
    parallel_vectorize,
    root_loops,
    store_of,
)
from compiler.tir.simplify import simplify
from compiler.tir.trace import Schedule


def pack_weight(w: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW (I = channels per group) -> [O/ob, I/ib, KH, KW, ib, ob]; O and I are zero-padded up to
    whole blocks (padded input lanes then add nothing, padded output lanes compute zero)."""
    o, i, kh, kw = w.shape
    if o % out_block or i % in_block:
        o, i = -(-o // out_block) * out_block, -(-i // in_block) * in_block
        w = np.pad(w, [(0, o - w.shape[0]), (0, i - w.shape[1]), (0, 0), (0, 0)])
    packed = w.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(packed)


def unpack_weight(w: np.ndarray) -> np.ndarray:
    ocb, icb, kh, kw, ib, ob = w.shape
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(ocb * ob, icb * ib, kh, kw))


def _is_depthwise(x: TensorType, w: TensorType, groups: int) -> bool:
    """One channel in and one out per group (a dense conv of one input channel has one in per group
    too, but all its output channels in that group)."""
    return (
        groups == x.shape[1] * x.shape[4] == w.shape[0] * w.shape[5] and w.shape[1] == 1 and w.shape[4] == 1
    )


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("conv2d_nchwc", types, 2)
    x, w = types
    expect_dtype("conv2d_nchwc", x, (FLOAT,), "input")
    expect_dtype("conv2d_nchwc", w, (FLOAT,), "weight")
    window_attrs(attrs)
    groups = int_attr(attrs, "groups")
    if x.ndim != 5 or w.ndim != 6:
        raise fail(
            f"conv2d_nchwc needs a 5-D input and a 6-D weight, got {list(x.shape)} and {list(w.shape)}"
        )
    n, icb, _, _, ib = x.shape
    ocb, wicb, kh, kw, wib, ob = w.shape
    c, oc = icb * ib, ocb * ob
    if _is_depthwise(x, w, groups):
        ok = ob == ib and oc == c
    else:
        ok = (
            groups >= 1
            and wib == ib
            and wicb * ib * groups == c
            and oc % groups == 0
            and (oc // groups) % ob == 0
        )
    if not ok:
        raise fail(
            f"conv2d_nchwc with groups={groups}: input {list(x.shape)}, weight {list(w.shape)} do not match"
        )
    oh, ow = conv_output_hw("conv2d_nchwc", x, (kh, kw), attrs)
    return TensorType((n, ocb, oh, ow, ob), x.dtype)


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, w = a
    out = _conv2d([to_planar(x), unpack_weight(w)], attrs)
    return to_blocked(out, w.shape[5])


def _compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    x, w = inputs
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    dh, dw = attrs["dilations"]
    groups = attrs.get("groups", 1)
    ocb_n, wicb, kh, kw = w.shape[:4]
    xp = pad_tensor(x, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), 0.0, name)
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def at(oh: Expr, ow: Expr) -> tuple[Expr, Expr]:
        return (
            te.add(te.mul(oh, te.idx(sh)), te.mul(ry.var, te.idx(dh))),
            te.add(te.mul(ow, te.idx(sw)), te.mul(rx.var, te.idx(dw))),
        )

    if _is_depthwise(TensorType(x.shape, x.dtype), TensorType(w.shape, w.dtype), groups):

        def depthwise(n: Expr, cb: Expr, oh: Expr, ow: Expr, c: Expr) -> te.Reduce:
            h, col = at(oh, ow)
            return te.reduce_sum(
                te.mul(xp[n, cb, h, col, c], w[cb, te.idx(0), ry.var, rx.var, te.idx(0), c]), [ry, rx]
            )

        return te.compute(out.shape, depthwise, name, tag="anchor_nchwc_depthwise",
                          axis_names=["n", "cb", "oh", "ow", "c"], dtype=out.dtype)  # fmt: skip

    rcb, rci = te.reduce_axis(wicb, "rcb"), te.reduce_axis(x.shape[4], "rci")
    blocks_per_group = ocb_n // groups

    def dense(n: Expr, ocb: Expr, oh: Expr, ow: Expr, oc: Expr) -> te.Reduce:
        h, col = at(oh, ow)
        icb: Expr = rcb.var
        if groups > 1:
            icb = te.add(te.mul(BinOp("//", ocb, te.idx(blocks_per_group)), te.idx(wicb)), rcb.var)
        value = te.mul(xp[n, icb, h, col, rci.var], w[ocb, rcb.var, ry.var, rx.var, rci.var, oc])
        return te.reduce_sum(value, [rcb, ry, rx, rci])

    return te.compute(out.shape, dense, name, tag="anchor_nchwc", axis_names=["n", "ocb", "oh", "ow", "oc"],
                      dtype=out.dtype)  # fmt: skip


# independent FMAs needed to hide the FMA latency on a core starting two FMAs a cycle
_FMA_IN_FLIGHT = 2 * FMA_LATENCY


def _step_cycles(cols: int, per_col: int) -> float:
    """Cycles of one reduction step of a tile of `cols` columns by `per_col` vectors
    (compiler.target.tile_step_cycles): an FMA per accumulator, two a cycle (a core starting one
    512-bit FMA a cycle takes block_register_tile's tiles instead), a weight vector per vector of
    a column and an input broadcast per column."""
    return tile_step_cycles(cols * per_col, per_col + cols, 2)


def tile_cycles(width: int, owt: int, per_col: int) -> float:
    """Cycles of one reduction step over a run of `width` columns in tiles of `owt` (the last one
    narrower where `owt` does not divide it)."""
    tail = width % owt
    return (width // owt) * _step_cycles(owt, per_col) + (_step_cycles(tail, per_col) if tail else 0.0)


def register_tile(
    target: Target, blocks: int, block: int, ow: int, *, whole_rows: bool = False, sizes: Sequence[int] = ()
) -> tuple[int, int]:
    """(channel blocks, output columns) of a register tile.

    Accumulators, one register per weight vector and one for the broadcast input value must fit the
    registers with two to spare (a tile filling them all spills in the compiled loop). Among the
    tiles that fit, the one with the fewest cycles per FMA over a whole row of `ow` columns, counting
    two FMAs and two loads (weight vectors and input broadcasts) per cycle and enough accumulators
    to cover the FMA latency (_FMA_IN_FLIGHT). The tile need not divide the row: a last, narrower
    tile runs the remainder (the loop is partitioned, see compiler/tir/partition.py), so a prime
    width such as 17 or 71 still gets a wide tile. Ties go to the tile loading the fewest bytes per
    FMA (a weight vector per column of the tile, an input value per channel block of it: the inputs
    and weights of a deep reduction come from L2), then to a tile without a tail, then to the larger
    tile (less loop and store overhead). With `whole_rows`, a tile without a tail comes before the
    bytes: the tail's run reloads the tile's weight vectors for a few columns (see
    block_register_tile for where that is chosen). `sizes` limits the tile's channel blocks to
    those counts, which need not divide `blocks` (padded_tile)."""
    regs = target.vector_registers
    vecs = max(1, -(-block // target.lanes()))
    best = (1, 1)
    best_key: tuple[float, ...] = (float("inf"),)
    for nb in sizes or (1, 2, 3, 4):
        if blocks % nb and not sizes:
            continue
        per_col = nb * vecs
        max_w = (regs - per_col - 3) // per_col
        for owt in range(1, min(ow, max_w) + 1):
            tail = ow % owt
            acc = owt * per_col
            traffic = 1 / owt + 1 / per_col
            per_fma, moved = round(tile_cycles(ow, owt, per_col) / (ow * per_col), 9), round(traffic, 9)
            key = (per_fma, tail > 0, moved, -acc) if whole_rows else (per_fma, moved, tail > 0, -acc)
            if key < best_key:
                best, best_key = (nb, owt), key
    return best


def depthwise_tile(ow: int, vecs: int) -> int:
    """Output columns per run of a depthwise conv: up to _FMA_IN_FLIGHT channel vectors in flight
    (more only spills), the row's remainder run as a narrower last run when no divisor is as good
    (the fewest cycles over the row, two FMAs per cycle, each run at least the FMA latency)."""
    cap = max(1, min(ow, max(_FMA_IN_FLIGHT, vecs) // vecs))

    def cycles(cols: int) -> float:
        return max(cols * vecs / 2, FMA_LATENCY)

    def key(d: int) -> tuple[float, bool, int]:
        tail = ow % d
        return ((ow // d) * cycles(d) + (cycles(tail) if tail else 0.0), tail > 0, -d)

    return min(range(1, cap + 1), key=key)


# a padded input at least this large is made row by row where it is read (the pad_at decision),
# not as a pass of its own: a depthwise conv does too little arithmetic to hide a round trip of the
# whole padded copy through memory
MIN_ROW_PAD_BYTES = 256 << 10


def depthwise_columns(sch: Schedule, info: KernelInfo, nest: ConvNest) -> bool:
    """Depthwise convs: a run of output columns, each one channel vector, accumulates over the
    kernel window (its column taps unrolled when short).

    In the blocked layout the channel lanes are the innermost axis of input, weight and output
    alike, so every tap is a contiguous vector load whatever the kernel size and stride; the run
    of columns gives independent accumulators to hide the FMA latency. A large padded input is
    made per output row, the window's rows of one channel block in a local buffer (decision pad_at:
    "row", or "kernel" for a pass of its own). True when the pad was placed so."""
    ln, lcb, loh, low, lc, lry, lrx = nest.loops
    extents = [iv.extent for iv in nest.blk.iter_vars]
    ow = extents[3]
    regs = info.target.vector_registers
    vecs = max(1, -(-extents[4] // info.target.lanes()))
    options = [d for d in range(1, ow + 1) if d * vecs <= regs - 4]
    owt = sch.decide("owt", options, depthwise_tile(ow, vecs))
    owo, owi = sch.split(low, [None, owt])
    sch.reorder(ln, lcb, loh, owo, lry, lrx, owi, lc)
    outer = sch.fuse(ln, lcb, loh)
    if nest.threads:
        sch.parallel(outer)
    sch.unroll(owi)
    sch.vectorize(lc)
    if sch.decide("unroll_kw", [True, False], extents[6] <= 7):
        sch.unroll(lrx)
    sch.reverse_compute_at(nest.consumer, owo)
    sch.decompose_reduction(nest.conv, lry)
    return nest.pad is not None and pad_per_row(sch, nest.pad, outer, info.target)


def pad_per_row(sch: Schedule, pad: str, row_loop: str, target: Target) -> bool:
    """The `pad_at` decision of a blocked window op (depthwise conv, pool) that reads a padded copy
    of its input: "row" makes the padded rows one output row reads in a local buffer inside
    `row_loop` (the default for a copy of MIN_ROW_PAD_BYTES or more), "kernel" leaves the copy a
    pass of its own for the caller to schedule. True when placed per row."""
    big = 4 * math.prod(store_of(block_of(sch, pad)).buffer.shape) >= MIN_ROW_PAD_BYTES
    if sch.decide("pad_at", ["row", "kernel"], "row" if big else "kernel") != "row":
        return False
    sch.set_scope(store_of(block_of(sch, pad)).buffer.name, "local")
    sch.compute_at(pad, row_loop)
    lanes = root_loops(sch, pad)[-1]
    _, vec = sch.split(lanes.var.name, [None, min(lanes.extent, target.lanes())])
    sch.vectorize(vec)
    return True


# the private cache an operand re-read by every tile must fit to be re-read from it, where a rule
# does not ask the target for its own: the smallest L2 of the x86 cores targeted. ic_chunk keeps it
# on every core: with a 2 MiB L2 in its place, FCN-ResNet50's 2048 -> 512 conv on 28x28 lost its
# chunks and ran slower (the chunks pay for keeping weights in L1, whatever L2 holds)
L2_BYTES = DEFAULT_L2_BYTES


def _operands(blk: Block) -> tuple[Buffer, Buffer]:
    """A dense conv block's (input, weight) buffers: the weight is indexed by the output block first."""
    oc_var = blk.iter_vars[1].var
    loads = [x for x in walk_expr(store_of(blk).value) if isinstance(x, Load)]
    weight = next(x.buffer for x in loads if x.indices and x.indices[0] is oc_var)
    return next(x.buffer for x in loads if x.buffer is not weight), weight


_LINE_BYTES = 64  # a cache line: what a read from beyond the private caches moves


def _touched(index: Expr, out: IterVar, tap: IterVar, item_bytes: int = 0) -> int | None:
    """How many distinct values an input index `out * stride + tap * dilation + base` takes over its
    output and kernel ranges (with `item_bytes`, the distinct cache lines of items of that size); None
    when the index is not that affine form."""

    def at(o: int, t: int) -> int | None:
        value = simplify(substitute(index, {out.var: IntImm(o), tap.var: IntImm(t)}))
        return value.value if isinstance(value, IntImm) else None

    base, step, dilation = at(0, 0), at(1, 0), at(0, 1)
    if base is None or step is None or dilation is None:
        return None
    places = {
        base + (step - base) * o + (dilation - base) * t for o in range(out.extent) for t in range(tap.extent)
    }
    return len({p * item_bytes // _LINE_BYTES for p in places}) if item_bytes else len(places)


def is_dense(blk: Block) -> bool:
    """Whether the conv reduces over all of its input's channel blocks (a grouped conv reduces over
    its group's only)."""
    return _operands(blk)[0].shape[1] == blk.iter_vars[5].extent


def input_footprint(blk: Block) -> int:
    """Bytes of one image of a dense conv's input that its windows read, in whole cache lines: a
    strided conv with a kernel narrower than its stride skips rows and pixels (a 1x1 stride-2
    downsampling conv reads a quarter of its input); the whole image where the indices say nothing."""
    data, _ = _operands(blk)
    itemsize = np.dtype(data.dtype).itemsize
    whole = data.size * itemsize // max(1, data.shape[0])  # one image: n is outermost
    load = next(x for x in walk_expr(store_of(blk).value) if isinstance(x, Load) and x.buffer is data)
    if len(load.indices) != 5 or len(blk.iter_vars) != 9:
        return whole
    _, _, oh, ow, _, _, ry, rx, _ = blk.iter_vars
    rows = _touched(load.indices[2], oh, ry)
    lines = _touched(load.indices[3], ow, rx, data.shape[4] * itemsize)
    if rows is None or lines is None:
        return whole
    return min(whole, data.shape[1] * rows * lines * _LINE_BYTES)


def tile_order(target: Target, blk: Block, groups: int, threads: int) -> str:
    """The register tiles' order that moves fewer bytes from beyond the private caches.

    "oc_oh_ow" sweeps the whole input once per group of output channel blocks (a thread takes a
    share of the groups) and reads each weight once; "oh_oc_ow" reads each input row once and all
    the weights per output row (a thread takes a share of the rows). The input counts the lines
    its windows read (input_footprint). An operand that fits the target's L2 (Target.l2_bytes) is
    read from memory once per thread, whatever the order; a larger one once per sweep. Ties (one
    group, or both operands small) go to "oc_oh_ow"."""
    _, weight = _operands(blk)
    x_bytes = input_footprint(blk)
    w_bytes = weight.size * np.dtype(weight.dtype).itemsize
    rows = blk.iter_vars[2].extent
    l2 = target.l2_bytes
    by_groups = w_bytes + x_bytes * (groups if x_bytes > l2 else min(groups, threads))
    by_rows = x_bytes + w_bytes * (rows if w_bytes > l2 else min(rows, threads))
    return "oh_oc_ow" if by_rows < by_groups else "oc_oh_ow"


# an input chunk's weights for one group of output channel blocks, kept in L1 while every register
# tile of the group's plane reads them
CHUNK_WEIGHT_BYTES = 16 << 10
L1_BYTES = 32 << 10  # the smallest L1 data cache of the x86 cores temper targets
# a group's plane must have at least this many register tiles to reuse a chunk's weights from L1
MIN_CHUNK_TILES = 16
# partial sums beyond L1 are still worth a pass per chunk when the group's weights, streamed from L2
# by every tile otherwise, are at least this many times their bytes (a long reduction on a small
# plane: 1024 input channels on 14x14)
MIN_WEIGHTS_PER_SUM = 4


def ic_chunk(target: Target, blk: Block, nb: int, owt: int) -> int:
    """Input channel blocks per chunk of the reduction (0: none), the `ic_chunk` decision's default.

    A register tile's step multiplies one weight vector per channel block of the tile by a few
    broadcast inputs; a group's weights over a long reduction (1024 input channels by 32 output
    channels are 128 KiB) do not stay in L1, so every tile streams all of them from L2: on a core
    starting two 512-bit FMAs per cycle that is more bytes per cycle than L2 delivers. Cut into
    chunks of input channels small enough for L1, the reduction runs chunk by chunk over the whole
    plane of the group, its partial sums kept in the group's accumulator tile (local) and the
    epilogue applied once after the last chunk. Only where the plane has enough tiles to reuse each
    chunk, the weights would not fit L1 anyway, and the group's partial sums stay in L1 (or the
    weights outgrow L2, where streaming them costs more than a pass over the sums); dense convs on
    such cores (on one-FMA or 256-bit cores the stream per cycle is half as wide). Partial sums
    beyond L1 pass when the weights are several times their size (MIN_WEIGHTS_PER_SUM) and one
    input block's weights fit the chunk budget (a reduction long in channels, not in taps): the
    re-read sums are then a small part of what the unchunked tiles stream, and the plane's input is
    small next to its weights; on wider planes (512 input channels on 28x28) the chunks measured
    slower, each group re-reading an input that no longer stays in L2."""
    _, _, oh, ow, ob, icb, kh, kw, ib = (iv.extent for iv in blk.iter_vars)
    dense = is_dense(blk)
    if target.vector_bits < 512 or target.fma_per_cycle < 2 or not dense:
        return 0
    per_block = nb * ob * ib * kh * kw * 4  # one input block's weights for the group
    weights, plane = per_block * icb, oh * ow * nb * ob * 4
    if oh * -(-ow // owt) < MIN_CHUNK_TILES or weights <= L1_BYTES or icb < 2:
        return 0
    # each chunk reads and writes the group's partial sums, and the epilogue becomes a pass over
    # them: cheap while they stay in L1; beyond it, worth it when the group's weights outgrow L2, or
    # for a reduction long in channels whose chunks fit the L1 budget (Inception's 1x7 convs on
    # 17x17 ran slower in chunks of one 7-tap block)
    if plane > MAX_STACK_BUFFER_BYTES // 2:
        return 0
    long_in_channels = weights >= MIN_WEIGHTS_PER_SUM * plane and per_block <= CHUNK_WEIGHT_BYTES
    if plane > L1_BYTES and weights < L2_BYTES and not long_in_channels:
        return 0
    return _chunk_for_l1(icb, per_block)


def plane_chunk(target: Target, blk: Block, nb: int) -> int:
    """Input channel blocks per chunk of a plane-tiled reduction (0: none), the `ic_chunk`
    decision's default under plane tiles.

    Every register tile of a group's plane reads all of the group's weights: they are re-read from
    the private L2 once per tile only while they stay there beside the input the tiles also sweep.
    A long reduction over a large input outgrows it (ResNet-50's strided 3x3 conv of layer4: 288
    KiB of weights per group of 16 output channels beside a padded 16x16 input of 512 KiB, on a
    Zen 3 core's 512 KiB L2, Target.l2_bytes), and then every tile streams both from the shared
    cache. Cut into chunks of input blocks whose weights fit CHUNK_WEIGHT_BYTES, each chunk's
    weights and input stay in L1 while every tile of the plane reads them, the plane's partial sums
    staying in L1 too (plane tiles are only chosen where they do). Where the group's weights and
    input fit L2, one pass measured as fast or faster (the stride-1 twin of that conv, a 1x1
    downsampling conv of 1024 input channels)."""
    _, _, _, _, ob, icb, kh, kw, ib = (iv.extent for iv in blk.iter_vars)
    dense = is_dense(blk)
    per_block = nb * ob * ib * kh * kw * 4
    if not dense or icb < 2 or per_block * icb + input_footprint(blk) <= target.l2_bytes:
        return 0
    return _chunk_for_l1(icb, per_block)


def _chunk_for_l1(icb: int, per_block: int) -> int:
    """The most input blocks (a divisor of `icb`, below it) whose weights, `per_block` bytes each,
    fit CHUNK_WEIGHT_BYTES; 1 when even one block's do not."""
    fits = [d for d in range(1, icb) if icb % d == 0 and d * per_block <= CHUNK_WEIGHT_BYTES]
    return max(fits, default=1)


# the group's partial sums over the whole plane stay in a local buffer until the epilogue runs over
# them (plane tiles): at most this many bytes, so they stay in L1 between the tiles that write them
MAX_PLANE_SUM_BYTES = L1_BYTES
# plane tiles must save at least this share of the row tiles' cycles (they add a pass over the sums)
MIN_PLANE_GAIN = 0.05


def _balance(items: int, threads: int) -> float:
    """How much longer than an even split the busiest thread runs over `items` equal iterations."""
    return -(-items // threads) * threads / items


def plane_tile(
    target: Target, blocks: int, block: int, oh: int, ow: int, row_tile: tuple[int, int], threads: int
) -> tuple[int, int] | None:
    """(channel blocks, columns) of a register tile running over the output plane with its rows back
    to back, where that beats `row_tile` on a row (None: keep the rows).

    A row whose width the tile does not divide ends in a narrower tile, too narrow to keep enough
    FMAs in flight: a 7-wide row in tiles of 4 runs a 3-column tile per row. Flattened, only the
    plane's last tile is narrower (49 columns: nine tiles of 5 and one of 4), at the price of the
    group's partial sums kept over the whole plane (in L1: MAX_PLANE_SUM_BYTES) and the epilogue run
    over them once the group is done. The parallel loop then runs over groups only, not over their
    rows, so the comparison counts each order's balance over the threads."""
    if oh < 2 or one_block_tiles(target, block):
        return None
    vecs = max(1, -(-block // target.lanes()))
    nb, owt = row_tile
    groups = -(-blocks // nb)  # a padded_tile's last group computes missing blocks too
    rows = oh * tile_cycles(ow, owt, nb * vecs) * _balance(groups * oh, threads) * groups / blocks
    pnb, powt = register_tile(target, blocks, block, oh * ow)
    if pnb * block * oh * ow * 4 > MAX_PLANE_SUM_BYTES:
        return None
    plane = tile_cycles(oh * ow, powt, pnb * vecs) * _balance(blocks // pnb, threads) / pnb
    return (pnb, powt) if plane <= (1 - MIN_PLANE_GAIN) * rows else None


def one_block_tiles(target: Target, block: int) -> bool:
    """Whether a dense blocked conv's register tile is one block of output channels by a run of
    columns (see block_register_tile): on AVX-512 cores that start one 512-bit FMA per cycle."""
    return target.vector_bits >= 512 and block == target.lanes() and target.fma_per_cycle == 1


def block_register_tile(target: Target, blocks: int, block: int, ow: int) -> tuple[int, int]:
    """(channel blocks, output columns) of a dense blocked conv's register tile.

    On AVX-512 an FMA can read its broadcast operand from memory itself (an embedded broadcast).
    A tile of one block of output channels uses each input value in exactly one FMA, which then
    loads it as it multiplies; a tile of several blocks broadcasts each value into a register first
    and shares it, one more instruction per value on the vector pipes. On a core that starts one
    512-bit FMA per cycle (Zen 4) that instruction costs FMA slots, so there the tile is one block
    by a run of columns enough to cover the FMA latency (one_block_run), measured faster than the
    wider tiles on Zen 4 alone, with cold caches and inside models. A core that starts two (Zen 5,
    Intel's server cores) outruns that tile: it loads an operand for every FMA, and its runs keep
    too few accumulators in flight for two pipes. There the tile is register_tile's, sharing each
    broadcast between blocks, as on AVX2 (which has no embedded broadcast); tuning picked such
    tiles for every dense conv of ResNet-50 on Zen 5. With AVX-512's 32 registers many tiles tie
    on cycles, and the tiles covering a row without a narrower last run were measured faster
    there (whole_rows): 2 blocks by 7 columns for a 7-wide row, not 4 by 5 and a run of 2."""
    if one_block_tiles(target, block):
        return 1, one_block_run(ow)
    return register_tile(target, blocks, block, ow, whole_rows=target.vector_bits >= 512)


def one_block_run(ow: int) -> int:
    """Output columns per run of a one-block tile: a step of a run of c columns issues c FMAs, one
    per accumulator, and takes max(c, FMA_LATENCY) cycles (an AVX-512 FMA per cycle, as Zen 4
    issues them; a core issuing two is latency-bound on the short runs alike), so the run length
    up to _FMA_IN_FLIGHT that covers the row in the fewest cycles: a 17-column row takes runs of
    6 (6 + 6 + 5), not 8 + 8 and a latency-bound last column. Ties go to a row without a shorter
    last run, then to the longer run."""

    def key(c: int) -> tuple[int, bool, int]:
        tail = ow % c
        return ((ow // c) * max(c, FMA_LATENCY) + (max(tail, FMA_LATENCY) if tail else 0), tail > 0, -c)

    return min(range(1, min(ow, _FMA_IN_FLIGHT) + 1), key=key)


def padded_sizes(blocks: int) -> tuple[int, ...]:
    """Channel blocks per tile that a tile over padded blocks may take: 2-4 for a block count that
    none of them divides (5, 7, 13 blocks), none for the others."""
    return (2, 3, 4) if blocks > 1 and all(blocks % nb for nb in (2, 3, 4)) else ()


def padded_tile(
    target: Target, blocks: int, block: int, oh: int, ow: int, threads: int
) -> tuple[int, int] | None:
    """(channel blocks, columns) of a register tile of several blocks over a block count none of
    2-4 divides (80, 112 or 208 channels in 16-lane blocks, 40 or 1000 in 8-lane ones); None for
    other counts and where one-block tiles are the rule (one_block_tiles).

    register_tile gives such a count one-block tiles: each FMA then loads its own input operand,
    and those tiles measured slower than the multi-block tiles of the next larger count (672 -> 112
    channels ran longer than 672 -> 128). Instead the tile spans nb blocks and the conv runs
    ceil(blocks / nb) groups, the last group's missing blocks multiplying zeros: the packed weight
    is padded to whole groups, and a tile's accumulators are registers whose split guard is dropped
    (compiler/tir/flatten.py, relax_predicates), so only the epilogue's stores stay guarded. Of
    nb = 2-4, the fewest cycles over the padded groups' rows, as the threads share them."""
    sizes = padded_sizes(blocks)
    if not sizes or one_block_tiles(target, block):
        return None
    vecs = max(1, -(-block // target.lanes()))
    best: tuple[int, int] | None = None
    best_cost = math.inf
    for nb in sizes:
        groups = -(-blocks // nb)
        _, owt = register_tile(
            target, groups * nb, block, ow, whole_rows=target.vector_bits >= 512, sizes=(nb,)
        )
        cost = groups * oh * tile_cycles(ow, owt, nb * vecs) * _balance(groups * oh, threads)
        if cost < best_cost:
            best, best_cost = (nb, owt), cost
    return best


def skip_aligned_tile(
    sch: Schedule, target: Target, nest: ConvNest, blocks: int, block: int, ow: int
) -> tuple[int, int] | None:
    """(channel blocks, columns) of a register tile whose column tiles start wherever a tap's reads
    enter or leave the input, for a conv whose padded input is mostly padding (a dilated conv over
    a small plane: DeepLab's rate-12 3x3 over 14x14 reads input at the plane's two edges only for
    its outer taps). The steps of a tap that reads only padding are skipped per tile
    (compiler/tir/padding_steps.py); a tile straddling such an edge runs all its columns for the
    few that read input. The tile is register_tile's over a row as wide as the largest width
    dividing every edge and the row. None where the input is not mostly padding, no tap has an
    edge inside the row, or the row tile already divides every edge."""
    if nest.pad is None:
        return None
    breaks = support_breaks(nest.blk, zero_padded(sch.func.body), axis=3)
    if not breaks:
        return None
    width = math.gcd(ow, *breaks)
    if width % block_register_tile(target, blocks, block, ow)[1] == 0:
        return None
    nb, owt = register_tile(target, blocks, block, width, whole_rows=True)
    return nb, max(d for d in range(1, owt + 1) if width % d == 0)


def block_tile(sch: Schedule, info: KernelInfo, nest: ConvNest) -> None:
    """Dense and grouped convs: a register tile of (channel blocks x output columns) accumulates
    over (input blocks, kh, kw, input lanes), one broadcast input value times one weight vector
    per step (see block_register_tile for the tile's size).

    The output block is the vector: the tile is stored as whole vectors by the fused epilogue, and
    the weights of one step are a contiguous vector of the packed weight."""
    ln, locb, loh, low, loc, lrcb, lry, lrx, lrci = nest.loops
    extents = [iv.extent for iv in nest.blk.iter_vars]
    oh, ow = extents[2], extents[3]
    threads = info.target.cores if nest.threads else 1
    # a grouped conv's missing blocks would read input channels past its input: dense convs only
    padded = padded_sizes(extents[1]) if is_dense(nest.blk) else ()
    tile = padded_tile(info.target, extents[1], extents[4], oh, ow, threads) if padded else None
    aligned = skip_aligned_tile(sch, info.target, nest, extents[1], extents[4], ow)
    row_tile = aligned or tile or block_register_tile(info.target, extents[1], extents[4], ow)
    plane0 = None if aligned else plane_tile(info.target, extents[1], extents[4], oh, ow, row_tile, threads)
    sums = extents[4] * oh * ow * 4  # the plane's partial sums per channel block
    planes = [False, True] if oh > 1 and sums <= MAX_PLANE_SUM_BYTES else [False]
    plane = sch.decide("plane_tile", planes, plane0 is not None)
    nb0, owt0 = plane0 if plane and plane0 else row_tile
    width = oh * ow if plane else ow
    sizes = [d for d in (1, 2, 3, 4) if extents[1] % d == 0 or d in padded]
    nb = sch.decide("nb", sizes, nb0)
    owt = sch.decide("owt", list(range(1, min(width, 28) + 1)), owt0 if nb == nb0 else 1)
    ocbo, ocbi = sch.split(locb, [None, nb])
    icb = extents[5]
    chunks = [0, *(d for d in range(1, icb) if icb % d == 0)]
    if plane:
        chunk = sch.decide("ic_chunk", chunks, plane_chunk(info.target, nest.blk, nb))
        _plane_tiles(sch, nest, [ocbo, ocbi], nb, owt, chunk)
        return
    owo, owi = sch.split(low, [None, owt])
    order0 = tile_order(info.target, nest.blk, -(-extents[1] // nb), info.target.cores if nest.threads else 1)
    chunk0 = ic_chunk(info.target, nest.blk, nb, owt)
    chunk = sch.decide("ic_chunk", chunks, chunk0)
    if chunk:
        _chunked_reduction(sch, nest, [ocbo, ocbi, loh, owo, owi, lrcb], chunk, nb)
        return
    tiles = (
        [ocbo, loh, owo]
        if sch.decide("tile_order", ["oc_oh_ow", "oh_oc_ow"], order0) == "oc_oh_ow"
        else [loh, ocbo, owo]
    )
    sch.reorder(ln, *tiles, lrcb, lry, lrx, lrci, owi, ocbi, loc)
    outer = sch.fuse(ln, tiles[0], tiles[1])
    if nest.threads:
        sch.parallel(outer)
    sch.unroll(ocbi)
    sch.unroll(owi)
    sch.vectorize(loc)
    # a one-block tile's step is short: unrolled over the input lanes, its loads take constant offsets;
    # but inside a two-column window loop LLVM's strength reduction then keeps a pointer per unrolled
    # load, spilled and reloaded around every FMA (ConvNeXt's 2x2 downsampling convs ran 2.5x slower)
    one_block = one_block_tiles(info.target, extents[4]) and (nb, owt) == (nb0, owt0)
    if sch.decide("unroll_ci", [True, False], one_block and extents[7] != 2):
        sch.unroll(lrci)
    _pack_tile_weights(sch, nest, nb)
    sch.reverse_compute_at(nest.consumer, owo)
    sch.decompose_reduction(nest.conv, lrcb)


def _pack_tile_weights(sch: Schedule, nest: ConvNest, nb: int) -> None:
    """[OCB, CB, KH, KW, ib, ob] -> [OCB/nb, CB, KH, KW, ib, nb, ob] for a tile of nb > 1 channel
    blocks: one tile's weight vectors of a step are adjacent, so the tile reads one stream of
    weights, not nb."""
    weight = _operands(nest.blk)[1].name
    if nb > 1 and weight in sch.const_params:
        sch.pack_layout(weight, Layout(((0, nb),), (0, 2, 3, 4, 5, 1, 6)))


def _chunked_reduction(sch: Schedule, nest: ConvNest, loops: list[str], chunk: int, nb: int) -> None:
    """block_tile with the reduction in chunks of `chunk` input blocks (see ic_chunk): per group of
    output channel blocks (the parallel loop), per chunk, every register tile of the plane; the
    epilogue after the group's last chunk."""
    ln, _, _, _, loc, _, lry, lrx, lrci = nest.loops
    ocbo, ocbi, loh, owo, owi, lrcb = loops
    rcbo, rcbi = sch.split(lrcb, [None, chunk])
    sch.reorder(ln, ocbo, rcbo, loh, owo, rcbi, lry, lrx, lrci, owi, ocbi, loc)
    _per_group(sch, nest, [ocbo, ocbi, owi], nb, rcbo)


def _plane_tiles(sch: Schedule, nest: ConvNest, loops: list[str], nb: int, owt: int, chunk: int = 0) -> None:
    """block_tile with the register tiles running over the output plane, rows back to back (see
    plane_tile): per group of output channel blocks (the parallel loop), every tile of the fused
    plane, with the reduction in chunks of `chunk` input blocks when not 0 (see plane_chunk);
    the epilogue after the group's last tile."""
    ln, _, loh, low, loc, lrcb, lry, lrx, lrci = nest.loops
    ocbo, ocbi = loops
    sch.reorder(ln, ocbo, loh, low, ocbi)
    po, pi = sch.split(sch.fuse(loh, low), [None, owt])
    if not chunk:
        sch.reorder(ln, ocbo, po, lrcb, lry, lrx, lrci, pi, ocbi, loc)
        _per_group(sch, nest, [ocbo, ocbi, pi], nb, lrcb)
        return
    rcbo, rcbi = sch.split(lrcb, [None, chunk])
    sch.reorder(ln, ocbo, rcbo, po, rcbi, lry, lrx, lrci, pi, ocbi, loc)
    _per_group(sch, nest, [ocbo, ocbi, pi], nb, rcbo)


def _per_group(sch: Schedule, nest: ConvNest, loops: list[str], nb: int, init_at: str) -> None:
    """The common end of the schedules whose tiles cover a group's whole plane before its epilogue
    (_chunked_reduction, _plane_tiles): images and groups of output channel blocks fused into the
    parallel loop, the tile's blocks and columns (`loops`: group, block, column) unrolled, the
    epilogue after the group, the accumulators zeroed before `init_at`."""
    ocbo, ocbi, cols = loops
    outer = sch.fuse(nest.loops[0], ocbo)
    if nest.threads:
        sch.parallel(outer)
    sch.unroll(ocbi)
    sch.unroll(cols)
    sch.vectorize(nest.loops[4])
    _pack_tile_weights(sch, nest, nb)
    sch.reverse_compute_at(nest.consumer, outer)
    sch.decompose_reduction(nest.conv, init_at)


def _schedule(sch: Schedule, info: KernelInfo) -> None:
    """Blocked convolution: the shared preamble (inline injective producers keeping the padded
    input, the block storing the result, the `parallel` decision), then depthwise_columns for
    depthwise convs and block_tile for the others; the epilogue's inner loop is vectorized and the
    padded input gets its own parallel, vectorized nest."""
    conv = info.anchor_block
    assert conv is not None
    pad = f"{conv}_pad"
    keep = (pad,) if pad in sch.blocks() else ()
    inline_injective(sch, info, keep=keep)
    blk = block_of(sch, conv)
    consumer = _consumer_and_scope(sch, info, conv)
    work = 2 * math.prod(iv.extent for iv in blk.iter_vars)
    threads = sch.decide("parallel", [True, False], work >= MIN_PARALLEL_FLOPS)
    loops = tuple(f.var.name for f in root_loops(sch, conv))
    nest = ConvNest(conv, blk, consumer, loops, threads, pad if keep else None)
    placed = False
    if info.tags.get(conv) == "anchor_nchwc_depthwise":
        placed = depthwise_columns(sch, info, nest)
    else:
        block_tile(sch, info, nest)
    inner = root_loops(sch, consumer)[-1]
    sch.vectorize(inner.var.name)
    if keep and not placed:
        parallel_vectorize(sch, pad, info.target)


# conv2d_nchwc(x, packed_weight), attrs: strides, pads (top, left, bottom, right), dilations, groups
register(OpDef("conv2d_nchwc", Pattern.ANCHOR, _infer, _reference, compute=_compute, schedule=_schedule))
