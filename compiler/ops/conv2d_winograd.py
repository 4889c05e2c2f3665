"""conv2d_winograd_nchwc: a 3x3, stride-1 convolution in NCHW{b}c by Winograd's minimal filtering.

F(m x m, 3 x 3) computes each m x m tile of output from an (m+2) x (m+2) tile of input with
(m+2)^2 multiplications per channel pair instead of 9 m^2: the input tile d and the filter g are
transformed (V = B^T d B, U = G g G^T), multiplied elementwise and summed over input channels
(for each of the (m+2)^2 positions a matrix product over channels), and transformed back
(Y = A^T M A). The filter transform runs at compile time: the op's weight is U, laid out
[alpha, alpha, OC/ob, C/ib, ib, ob] (alpha = m + 2), made by `transform_weight` from the packed
weight of conv2d_nchwc.

Input x is [N, C/ib, H, W, ib], the output [N, OC/ob, OH, OW, ob] (ib = ob = the channel block).
Attributes: pads (top, left, bottom, right), tile (m: 2, 3 or 4) and, for a dilated conv, dilations
(dh, dw; absent means (1, 1)).

A conv dilated by d is d x d independent undilated convs, one per phase of the plane (the rows
r = p mod d, the columns likewise), which share the filter: its output tiles are m x m pixels d apart,
read from (m+2) x (m+2) input pixels d apart, and the same algebra applies. So the tiles along an
axis are d phases of ceil(ceil(OH/d) / m) tiles each, tile t starting at row (t mod d) + d m (t div d)
(`tile_origin`); the transformed weights are shared by every phase, as the products of an undilated
conv share them between its tiles. The transformed outputs are then stored tile by tile and gathered
into the output by the epilogue (an undilated conv computes them straight into the output).

The transforms' coefficients are small integers and fractions (exact in float32 for the input and
output transforms), but F(4x4) amplifies rounding more than a direct sum: its results differ from
a direct convolution by a few float32 ulps of the larger terms, which the graph pass weighs when it
picks this algorithm (see compiler/graph/passes/conv_algorithm.py). Both transforms run by columns,
then rows (B^T d B as B^T (d B)): each value is a short sum of short sums, where one sum over the
whole tile chains up to 25 roundings, and once a tile's positions are unrolled the column sums are
shared between positions, so the transforms also take fewer operations.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from compiler.codegen.llvm import MAX_STACK_BUFFER_BYTES
from compiler.ops.common import FLOAT, expect_args, expect_dtype, fail, int_attr, ints_attr, non_negative
from compiler.ops.conv2d import conv_output_hw, pad_tensor
from compiler.ops.conv2d_blocked import register_tile
from compiler.ops.registry import OpDef, Pattern, register
from compiler.target import Target
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr
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

KERNEL = 3  # the filter size these transforms are for
TILES = (2, 3, 4)  # supported output tile sizes m

_Matrix = list[list[Fraction]]


def _matrix(*rows: tuple[str, ...]) -> _Matrix:
    """A transform matrix from its rows of exact fractions ("1/2")."""
    return [[Fraction(x) for x in r] for r in rows]


# (B^T, G, A^T) of F(m x m, 3 x 3) for the interpolation points 0, 1, -1 (m = 2), 0, 1, -1, -1/2
# (m = 3) and 0, 1, -1, 1/2, -2 (m = 4), and the point at infinity (the last row of each): Toom-Cook
# as in Lavin & Gray (2015). The points of F(4x4) are chosen for rounding: they lose less to float32
# than 0, +-1, +-2 (the usual); those of F(3x3) keep every coefficient of B^T and A^T within 3/2.
_MATRICES: dict[int, tuple[_Matrix, _Matrix, _Matrix]] = {
    2: (
        _matrix(("1", "0", "-1", "0"), ("0", "1", "1", "0"), ("0", "-1", "1", "0"), ("0", "1", "0", "-1")),
        _matrix(("1", "0", "0"), ("1/2", "1/2", "1/2"), ("1/2", "-1/2", "1/2"), ("0", "0", "1")),
        _matrix(("1", "1", "1", "0"), ("0", "1", "-1", "-1")),
    ),
    3: (
        _matrix(
            ("-1/2", "-1", "1/2", "1", "0"),
            ("0", "1/2", "3/2", "1", "0"),
            ("0", "-1/2", "-1/2", "1", "0"),
            ("0", "-1", "0", "1", "0"),
            ("0", "-1/2", "-1", "1/2", "1"),
        ),
        _matrix(
            ("-2", "0", "0"),
            ("1/3", "1/3", "1/3"),
            ("-1", "1", "-1"),
            ("8/3", "-4/3", "2/3"),
            ("0", "0", "1"),
        ),
        _matrix(("1", "1", "1", "1", "0"), ("0", "1", "-1", "-1/2", "0"), ("0", "1", "1", "1/4", "1")),
    ),
    4: (
        _matrix(
            ("1", "-3/2", "-2", "3/2", "1", "0"),
            ("0", "-1", "1/2", "5/2", "1", "0"),
            ("0", "1", "-5/2", "1/2", "1", "0"),
            ("0", "-2", "-1", "2", "1", "0"),
            ("0", "1/2", "-1", "-1/2", "1", "0"),
            ("0", "1", "-3/2", "-2", "3/2", "1"),
        ),
        _matrix(
            ("1", "0", "0"),
            ("1/3", "1/3", "1/3"),
            ("-1/3", "1/3", "-1/3"),
            ("-16/15", "-8/15", "-4/15"),
            ("1/15", "-2/15", "4/15"),
            ("0", "0", "1"),
        ),
        _matrix(
            ("1", "1", "1", "1", "1", "0"),
            ("0", "1", "-1", "1/2", "-2", "0"),
            ("0", "1", "1", "1/4", "4", "0"),
            ("0", "1", "-1", "1/8", "-8", "1"),
        ),
    ),
}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3) as float64 arrays."""
    if m not in _MATRICES:
        raise fail(f"Winograd tile must be one of {list(TILES)}, got {m}")
    bt, g, at = _MATRICES[m]
    return np.array(bt, dtype=np.float64), np.array(g, dtype=np.float64), np.array(at, dtype=np.float64)


def transform_weight(packed: np.ndarray, m: int) -> np.ndarray:
    """conv2d_nchwc's packed 3x3 weight [OC/ob, C/ib, 3, 3, ib, ob] -> U [alpha, alpha, OC/ob, C/ib,
    ib, ob], U = G g G^T for every channel pair, computed in float64."""
    kh, kw = packed.shape[2:4]
    if (kh, kw) != (KERNEL, KERNEL):
        raise fail(f"Winograd F({m}x{m}, 3x3) needs a 3x3 filter, got {kh}x{kw}")
    _, g, _ = matrices(m)
    u = np.einsum("ak,bl,oiklxy->aboixy", g, g, packed.astype(np.float64))
    return np.ascontiguousarray(u.astype(packed.dtype))


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("conv2d_winograd_nchwc", types, 2)
    x, u = types
    expect_dtype("conv2d_winograd_nchwc", x, (FLOAT,), "input")
    expect_dtype("conv2d_winograd_nchwc", u, (FLOAT,), "weight")
    pads = ints_attr(attrs, "pads", 4)
    non_negative("pads", pads)
    m = int_attr(attrs, "tile")
    if m not in TILES:
        raise fail(f"conv2d_winograd_nchwc tile must be one of {list(TILES)}, got {m}")
    if x.ndim != 5 or u.ndim != 6:
        raise fail(
            "conv2d_winograd_nchwc needs a 5-D input and a 6-D weight, "
            f"got {list(x.shape)} and {list(u.shape)}"
        )
    n, icb, _, _, ib = x.shape
    a, b, ocb, wicb, wib, ob = u.shape
    if a != m + 2 or b != m + 2 or wicb != icb or wib != ib or ob != ib:
        raise fail(
            f"conv2d_winograd_nchwc with tile {m}: input {list(x.shape)} and transformed weight "
            f"{list(u.shape)} do not match (expected [{m + 2}, {m + 2}, OC/{ib}, {icb}, {ib}, {ib}])"
        )
    dilations = _dilations(attrs)
    window = {"strides": (1, 1), "pads": tuple(pads), "dilations": dilations}  # a stride-1 3x3 conv's
    oh, ow = conv_output_hw("conv2d_winograd_nchwc", x, (KERNEL, KERNEL), window)
    return TensorType((n, ocb, oh, ow, ob), x.dtype)


def _dilations(attrs: dict[str, Any]) -> tuple[int, int]:
    if "dilations" not in attrs:
        return 1, 1
    dh, dw = ints_attr(attrs, "dilations", 2)
    if dh < 1 or dw < 1:
        raise fail(f"conv2d_winograd_nchwc dilations must be positive, got {[dh, dw]}")
    return dh, dw


def axis_tiles(size: int, m: int, d: int = 1) -> int:
    """Tiles along an output axis of `size` pixels: d phases of ceil(ceil(size / d) / m) tiles."""
    per_phase = -(-size // d)
    return d * -(-per_phase // m)


def _tiles(oh: int, ow: int, m: int, dilations: tuple[int, int] = (1, 1)) -> tuple[int, int]:
    return axis_tiles(oh, m, dilations[0]), axis_tiles(ow, m, dilations[1])


def tile_origin(t: np.ndarray, m: int, d: int) -> np.ndarray:
    """The first output row (or column) of tiles t along an axis dilated by d."""
    origin: np.ndarray = t % d + d * m * (t // d)
    return origin


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The algorithm itself in numpy (float64): the oracle for the compiled kernel."""
    x, u = a
    m = attrs["tile"]
    pt, pl, pb, pr = attrs["pads"]
    dh, dw = _dilations(attrs)
    bt, _, at = matrices(m)
    n, icb, h, w, ib = x.shape
    oh, ow = h + pt + pb - 2 * dh, w + pl + pr - 2 * dw
    th, tw = _tiles(oh, ow, m, (dh, dw))
    xp = np.zeros((n, icb, m * th + 2 * dh, m * tw + 2 * dw, ib))
    xp[:, :, pt : pt + h, pl : pl + w] = x
    row0, col0 = tile_origin(np.arange(th), m, dh), tile_origin(np.arange(tw), m, dw)
    rows = row0[:, None] + dh * np.arange(m + 2)[None, :]  # [th, alpha]
    cols = col0[:, None] + dw * np.arange(m + 2)[None, :]
    tiles = xp[:, :, rows[:, :, None, None], cols[None, None, :, :]]  # [n, icb, th, alpha, tw, alpha, ib]
    v = np.einsum("ak,bl,ncikjlx->abncijx", bt, bt, tiles)
    mm = np.einsum("abncijx,abocxy->abnoijy", v, u.astype(np.float64))
    y = np.einsum("pa,qb,abnoijy->noipjqy", at, at, mm)  # [n, ocb, th, m, tw, m, ob]
    # output pixel (tile t, position i) is row tile_origin(t) + d i: every row below m * th once
    out = np.zeros((n, u.shape[2], m * th, m * tw, u.shape[5]))
    out_rows = row0[:, None] + dh * np.arange(m)[None, :]  # [th, m]
    out_cols = col0[:, None] + dw * np.arange(m)[None, :]
    out[:, :, out_rows[:, :, None, None], out_cols[None, None, :, :]] = y
    return np.ascontiguousarray(out[:, :, :oh, :ow].astype(x.dtype))


def _linear_combination(coefs: Sequence[tuple[Fraction, Expr]]) -> Expr:
    """sum(c * x) with the zero terms left out and unit coefficients as additions/subtractions."""
    total: Expr | None = None
    for c, x in coefs:
        if c == 0:
            continue
        if abs(c) == 1:
            term = x
        else:
            term = te.mul(te.f32(float(abs(c))), x)
        if total is None:
            total = term if c > 0 else te.mul(te.f32(float(c)), x)
        else:
            total = te.add(total, term) if c > 0 else te.sub(total, term)
    return total if total is not None else te.f32(0.0)


def _by_position(
    pos: tuple[Expr, Expr], extent: tuple[int, int], expr_at: Callable[[int, int], Expr]
) -> Expr:
    """select(pos == (a, b), expr_at(a, b), ...) over every position of the tile: unrolling the
    position loops leaves one branch per position, with its own coefficients as constants."""
    rows = []
    for a in range(extent[0]):
        row = expr_at(a, extent[1] - 1)
        for b in reversed(range(extent[1] - 1)):
            row = te.select(BinOp("==", pos[1], te.idx(b)), expr_at(a, b), row)
        rows.append(row)
    out = rows[-1]
    for a in reversed(range(extent[0] - 1)):
        out = te.select(BinOp("==", pos[0], te.idx(a)), rows[a], out)
    return out


def _compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    x, u = inputs
    m = attrs["tile"]
    alpha = m + 2
    bt, _, at = (_MATRICES[m][0], None, _MATRICES[m][2])
    pt, pl, _, _ = attrs["pads"]
    dh, dw = _dilations(attrs)
    n, icb, h, w, ib = x.shape
    _, ocb, oh, ow, ob = out.shape
    th, tw = _tiles(oh, ow, m, (dh, dw))
    after = (0, 0, m * th + 2 * dh - h - pt, m * tw + 2 * dw - w - pl, 0)
    xp = pad_tensor(x, (0, 0, pt, pl, 0), after, 0.0, name)

    def origin(t: Expr, d: int) -> Expr:
        if d == 1:
            return te.mul(t, te.idx(m))
        return te.add(BinOp("%", t, te.idx(d)), te.mul(BinOp("//", t, te.idx(d)), te.idx(d * m)))

    def input_transform(nn: Expr, c: Expr, ty: Expr, tx: Expr, e: Expr, nu: Expr, ci: Expr) -> Expr:
        row, col = origin(ty, dh), origin(tx, dw)

        @functools.cache  # one expression per column sum, shared by the positions that use it
        def column_sum(a: int, j: int) -> Expr:
            return _linear_combination(
                [
                    (bt[a][k], xp[nn, c, te.add(row, te.idx(k * dh)), te.add(col, te.idx(j * dw)), ci])
                    for k in range(alpha)
                ]
            )

        def at_position(a: int, b: int) -> Expr:
            return _linear_combination([(bt[b][j], column_sum(a, j)) for j in range(alpha)])

        return _by_position((e, nu), (alpha, alpha), at_position)

    v = te.compute((n, icb, th, tw, alpha, alpha, ib), input_transform, f"{name}_input",
                   tag="winograd_input", axis_names=["n", "cb", "ty", "tx", "eps", "nu", "ci"],
                   dtype=x.dtype)  # fmt: skip
    rc, rci = te.reduce_axis(icb, "rcb"), te.reduce_axis(ib, "rci")

    def product(nn: Expr, o: Expr, ty: Expr, tx: Expr, e: Expr, nu: Expr, oc: Expr) -> te.Reduce:
        value = te.mul(v[nn, rc.var, ty, tx, e, nu, rci.var], u[e, nu, o, rc.var, rci.var, oc])
        return te.reduce_sum(value, [rc, rci])

    mm = te.compute((n, ocb, th, tw, alpha, alpha, ob), product, f"{name}_product", tag="anchor_winograd",
                    axis_names=["n", "ocb", "ty", "tx", "eps", "nu", "oc"], dtype=x.dtype)  # fmt: skip
    if (dh, dw) != (1, 1):
        return _dilated_output(mm, at, m, (dh, dw), out, name)

    def output_transform(nn: Expr, o: Expr, y: Expr, xx: Expr, oc: Expr) -> Expr:
        ty, tx = BinOp("//", y, te.idx(m)), BinOp("//", xx, te.idx(m))
        position = (BinOp("%", y, te.idx(m)), BinOp("%", xx, te.idx(m)))
        return _tile_output(lambda a, b: mm[nn, o, ty, tx, te.idx(a), te.idx(b), oc], at, m, position)

    return te.compute(out.shape, output_transform, name, tag="winograd_output",
                      axis_names=["n", "ocb", "oh", "ow", "oc"], dtype=out.dtype)  # fmt: skip


def _tile_output(
    product: Callable[[int, int], Expr], at: _Matrix, m: int, position: tuple[Expr, Expr]
) -> Expr:
    """Y = A^T M A of one tile at output position `position` (product(a, b): the tile's M at (a, b)),
    by columns, then rows: each column sum is made once and shared by the positions that use it."""
    alpha = m + 2

    @functools.cache
    def column_sum(i: int, b: int) -> Expr:
        return _linear_combination([(at[i][a], product(a, b)) for a in range(alpha)])

    def at_position(i: int, j: int) -> Expr:
        return _linear_combination([(at[j][b], column_sum(i, b)) for b in range(alpha)])

    return _by_position(position, (m, m), at_position)


def _dilated_output(
    mm: te.Tensor, at: _Matrix, m: int, dilations: tuple[int, int], out: TensorType, name: str
) -> te.Tensor:
    """The output transform tile by tile (positions as loops, so unrolling them leaves constant
    coefficients), then each output pixel gathered from its tile: row y is position (y div d) mod m
    of tile ((y div d) div m) d + y mod d."""
    n, ocb, th, tw, _, _, ob = mm.shape

    def tile_transform(nn: Expr, o: Expr, ty: Expr, tx: Expr, i: Expr, j: Expr, oc: Expr) -> Expr:
        return _tile_output(lambda a, b: mm[nn, o, ty, tx, te.idx(a), te.idx(b), oc], at, m, (i, j))

    tiles = te.compute((n, ocb, th, tw, m, m, ob), tile_transform, f"{name}_tiles", tag="winograd_tiles",
                       axis_names=["n", "ocb", "ty", "tx", "i", "j", "oc"], dtype=out.dtype)  # fmt: skip

    def tile_of(y: Expr, d: int) -> tuple[Expr, Expr]:
        q = BinOp("//", y, te.idx(d))
        t = te.add(te.mul(BinOp("//", q, te.idx(m)), te.idx(d)), BinOp("%", y, te.idx(d)))
        return t, BinOp("%", q, te.idx(m))

    def gather(nn: Expr, o: Expr, y: Expr, xx: Expr, oc: Expr) -> Expr:
        (ty, i), (tx, j) = tile_of(y, dilations[0]), tile_of(xx, dilations[1])
        return tiles[nn, o, ty, tx, i, j, oc]

    return te.compute(out.shape, gather, name, tag="winograd_output",
                      axis_names=["n", "ocb", "oh", "ow", "oc"], dtype=out.dtype)  # fmt: skip


# A chunk's transformed tiles and products live on the stack of the thread running it: its default
# size keeps them within this many bytes (in cache between the three steps), and no chunk the tuner
# may pick exceeds MAX_CHUNK_BYTES.
CHUNK_BYTES = 128 << 10
MAX_CHUNK_BYTES = MAX_STACK_BUFFER_BYTES // 2
MAX_CHUNK_TILES = 32
# chunks by default for F(4x4) tiles only in a batch: their chunked code (36 positions in, 16 out, per
# chunk and per remainder) compiles to several times the three passes' size
CHUNK_MAX_ALPHA = 5


def _tile_bytes(c: int, oc: int, alpha: int) -> int:
    """Bytes of one tile's transformed input and products in a chunk's buffers."""
    return alpha * alpha * (c + oc) * 4


def chunk_options(c: int, oc: int, tw: int, alpha: int) -> list[int]:
    """Tiles of one tile row per chunk the schedule may take; 0 is the three passes over the plane."""
    per_tile = _tile_bytes(c, oc, alpha)
    return [0, *(q for q in range(1, min(tw, MAX_CHUNK_TILES) + 1) if q * per_tile <= MAX_CHUNK_BYTES)]


def chunk_default(n: int, c: int, oc: int, th: int, tw: int, alpha: int) -> int:
    """0 (three passes) when the transformed weights outweigh the transformed tiles of all `n` images:
    a pass per step then reads each weight once, where chunks would read them all once per chunk.
    Otherwise (large planes, few channels, or a batch: three passes carry every image's tiles through
    memory at once, so a batch of two costs several times one image) chunks:
    - F(4x4) tiles (past CHUNK_MAX_ALPHA) only for a batch, and then a whole tile row (or its largest
      divisor that fits MAX_CHUNK_BYTES): at one image their chunks measured no steady gain for code
      several times the passes' size;
    - smaller tiles about as many as fit CHUNK_BYTES, taken as a divisor of the tile row (a narrower
      last chunk is a second copy of the whole chunk's code): the largest divisor below that size
      when it is at least half of it, else the smallest above it that stays within MAX_CHUNK_BYTES,
      else that size with a remainder."""
    per_tile = _tile_bytes(c, oc, alpha)
    if n * th * tw * per_tile <= alpha * alpha * c * oc * 4:
        return 0
    options = [q for q in chunk_options(c, oc, tw, alpha) if q]
    if alpha > CHUNK_MAX_ALPHA:
        return max((q for q in options if tw % q == 0), default=0) if n > 1 else 0
    fits = [q for q in options if q * per_tile <= CHUNK_BYTES]
    if not fits:
        return 0
    size = max(fits)
    below = [q for q in fits if tw % q == 0 and 2 * q >= size]
    if below:
        return max(below)
    above = [q for q in options if tw % q == 0 and q > size]
    return min(above) if above else size


def _schedule(sch: Schedule, info: KernelInfo) -> None:
    """Three steps: the input transform (one tile of every channel vector at a time, its positions
    unrolled so each keeps only its own nonzero coefficients), the (alpha x alpha) matrix products
    over channels with the register tile of a pointwise conv (channel blocks x tiles), and the
    output transform computed straight into the kernel's output with the fused epilogue.

    Either each step is a pass over the whole plane (the default when the transformed weights are
    the larger data: each is read once), or the plane is cut into chunks of tiles along a tile row
    and all three steps run per chunk (the `chunk` decision: large planes with few channels, whose
    transformed tiles would otherwise make a round trip through memory)."""
    base = info.anchor_block  # the op's own stage: the output transform
    assert base is not None
    product = f"{base}_product"
    inp, pad = f"{base}_input", f"{base}_pad"
    out = info.output_block
    # the output transform is an injective read of the products: inline it into the epilogue
    keep = (inp, pad) if pad in sch.blocks() else (inp,)
    inline_injective(sch, info, keep=keep)
    if base in sch.blocks() and base != out:
        sch.compute_inline(base)
    blk = block_of(sch, product)
    ext = [iv.extent for iv in blk.iter_vars]  # n, ocb, th, tw, alpha, alpha, ob, rcb, rci
    n, n_ocb, th, tw, alpha, ob = ext[0], ext[1], ext[2], ext[3], ext[4], ext[6]
    c, oc = ext[7] * ext[8], n_ocb * ob
    m = alpha - 2
    threads = sch.decide("parallel", [True, False], 2 * math.prod(ext) >= MIN_PARALLEL_FLOPS)
    tiles = f"{base}_tiles"
    if tiles in sch.blocks():  # dilated: whole passes, the outputs stored by tile, then gathered
        _three_passes(sch, info, product, inp, tiles, threads, m)
        parallel_vectorize(sch, out, info.target)
        if pad in sch.blocks():
            parallel_vectorize(sch, pad, info.target)
        return
    chunk = sch.decide("chunk", chunk_options(c, oc, tw, alpha), chunk_default(n, c, oc, th, tw, alpha))
    if chunk:
        _chunked(sch, info, product, inp, out, threads, m, chunk)
    else:
        _three_passes(sch, info, product, inp, out, threads, m)
    if pad in sch.blocks():
        parallel_vectorize(sch, pad, info.target)


def _input_nest(sch: Schedule, inp: str, outer: list[str]) -> list[str]:
    """The input transform's loops below `outer`: channel lanes vectorized around the unrolled
    positions. Returns the loops (n, cb, ty, tx) left outside the lanes, outermost first."""
    loops = [f.var.name for f in root_loops(sch, inp)]
    ln, lcb, lty, ltx, le, lnu, lci = loops[len(outer) :]
    sch.reorder(ln, lcb, lty, ltx, lci, le, lnu)
    sch.vectorize(lci)
    sch.unroll(le)
    sch.unroll(lnu)
    return [ln, lcb, lty, ltx]


def _three_passes(
    sch: Schedule, info: KernelInfo, product: str, inp: str, out: str, threads: bool, m: int
) -> None:
    outer = sch.fuse(*_input_nest(sch, inp, []))
    if threads:
        sch.parallel(outer)

    ln, locb, lty, ltx, le, lnu, loc, lrc, lrci = [f.var.name for f in root_loops(sch, product)]
    ext = [iv.extent for iv in block_of(sch, product).iter_vars]
    lp = sch.fuse(lty, ltx)
    tiles = ext[2] * ext[3]
    _register_tile(sch, info, product, [ln, locb, lp, le, lnu, loc, lrc, lrci], ext[1], ext[6], tiles)
    outer = sch.fuse(*[f.var.name for f in root_loops(sch, product)][:4])  # n, eps, nu, channel tiles
    if threads:
        sch.parallel(outer)

    loops = [f.var.name for f in root_loops(sch, out)]
    if len(loops) == 7:  # a dilated conv's tiles: (n, ocb, ty, tx, i, j, oc)
        ln, locb, oho, owo, ohi, owi, loc = loops
    else:
        ln, locb, loh, low, loc = loops
        oho, ohi = sch.split(loh, [None, m])
        owo, owi = sch.split(low, [None, m])
    sch.reorder(ln, locb, oho, owo, loc, ohi, owi)
    outer = sch.fuse(ln, locb, oho)
    if threads:
        sch.parallel(outer)
    sch.vectorize(loc)
    sch.unroll(ohi)
    sch.unroll(owi)


def _chunked(
    sch: Schedule, info: KernelInfo, product: str, inp: str, out: str, threads: bool, m: int, chunk: int
) -> None:
    """Per chunk of `chunk` tiles of one tile row: its input tiles transformed, their products for
    every output channel, the output transform of the chunk; the chunks' buffers are local (sized
    to one chunk). Tile rows run in parallel, a row's chunks in order."""
    ln, locb, loh, low, loc = [f.var.name for f in root_loops(sch, out)]
    oho, ohi = sch.split(loh, [None, m])
    owo, owi = sch.split(low, [None, m])
    owc, owq = sch.split(owo, [None, chunk])
    sch.reorder(ln, oho, owc, locb, owq, ohi, owi, loc)
    rows = sch.fuse(ln, oho)
    if threads:
        sch.parallel(rows)
    sch.vectorize(loc)
    sch.unroll(ohi)
    sch.unroll(owi)
    sch.compute_at(product, owc)
    sch.compute_at(inp, owc)
    for block in (product, inp):
        sch.set_scope(store_of(block_of(sch, block)).buffer.name, "local")
    _input_nest(sch, inp, [rows, owc])
    loops = [f.var.name for f in root_loops(sch, product)][2:]
    ln, locb, lty, ltx, le, lnu, loc, lrc, lrci = loops
    ext = [iv.extent for iv in block_of(sch, product).iter_vars]
    lp = sch.fuse(lty, ltx)
    _register_tile(sch, info, product, [ln, locb, lp, le, lnu, loc, lrc, lrci], ext[1], ext[6], chunk)


def product_tile(target: Target, blocks: int, block: int, tiles: int) -> tuple[int, int]:
    """(channel blocks, tiles) of the products' register tile: the direct conv's (register_tile), or
    one tile wider when that divides the tiles and its accumulators and weight vectors still fit the
    registers (AVX-512's FMAs broadcast their input from memory, so no register holds it): the
    narrower last tile it saves measured slower here than in the direct conv, whose reduction over
    the kernel window and input channels is longer than the products' over input channels alone."""
    nb, pt = register_tile(target, blocks, block, tiles)
    per_col = nb * max(1, -(-block // target.lanes()))
    wider = pt + 1
    if tiles % pt and tiles % wider == 0 and (wider + 1) * per_col <= target.vector_registers:
        return nb, wider
    return nb, pt


def _register_tile(
    sch: Schedule, info: KernelInfo, product: str, loops: list[str], blocks: int, block: int, tiles: int
) -> None:
    """Per position, a pointwise conv over the tiles: the register tile of a blocked conv (channel
    blocks x tiles) accumulating over the input channels. `loops`: the product's loops (n, ocb,
    tiles, eps, nu, oc, rcb, rci), outermost first."""
    ln, locb, lp, le, lnu, loc, lrc, lrci = loops
    nb0, pt0 = product_tile(info.target, blocks, block, tiles)
    nb = sch.decide("nb", [d for d in (1, 2, 3, 4) if blocks % d == 0], nb0)
    pt = sch.decide("pt", list(range(1, min(tiles, 28) + 1)), pt0 if nb == nb0 else 1)
    ocbo, ocbi = sch.split(locb, [None, nb])
    po, pi = sch.split(lp, [None, pt])
    sch.reorder(ln, le, lnu, ocbo, po, lrc, lrci, pi, ocbi, loc)
    sch.unroll(ocbi)
    sch.unroll(pi)
    sch.vectorize(loc)
    sch.decompose_reduction(product, lrc)


# conv2d_winograd_nchwc(x, transformed_weight), attrs: pads (top, left, bottom, right), tile
register(
    OpDef(
        "conv2d_winograd_nchwc",
        Pattern.ANCHOR,
        _infer,
        _reference,
        compute=_compute,
        schedule=_schedule,
        version=2,  # 2: tiles indexed by (row, column), the `chunk` decision
    )
)
