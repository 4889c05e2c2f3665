"""conv2d: NCHW input, OIHW weight, explicit pads, no bias (the frontend adds it as a separate `add`).

Attributes: strides=(sh, sw), pads=(top, left, bottom, right), dilations=(dh, dw), groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.ops.common import (
    FLOAT,
    conv_out_size,
    expect_args,
    expect_dtype,
    fail,
    int_attr,
    ints_attr,
    non_negative,
    positive,
)
from compiler.ops.registry import OpDef, Pattern, register
from compiler.target import Target
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Block, Expr, FloatImm, IntImm, Layout, Load, walk_expr
from compiler.tir.rules import (
    MIN_PARALLEL_FLOPS,
    KernelInfo,
    block_of,
    inline_injective,
    parallel_vectorize,
    plane_rows,
    root_loops,
    store_of,
)
from compiler.tir.trace import Schedule


def window_attrs(attrs: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int, int, int], tuple[int, int]]:
    """Validated (strides, pads, dilations) of a 2-D sliding-window op."""
    strides = ints_attr(attrs, "strides", 2)
    pads = ints_attr(attrs, "pads", 4)
    dilations = ints_attr(attrs, "dilations", 2)
    positive("strides", strides)
    positive("dilations", dilations)
    non_negative("pads", pads)
    return (strides[0], strides[1]), (pads[0], pads[1], pads[2], pads[3]), (dilations[0], dilations[1])


def conv_output_hw(op: str, x: TensorType, kernel: Sequence[int], attrs: dict[str, Any]) -> tuple[int, int]:
    """(OH, OW) of a convolution over axes 2 and 3 of x; an empty output is a ShapeError."""
    strides, pads, dilations = window_attrs(attrs)
    h, wd = x.shape[2], x.shape[3]
    oh = conv_out_size(h, kernel[0], strides[0], pads[0], pads[2], dilations[0])
    ow = conv_out_size(wd, kernel[1], strides[1], pads[1], pads[3], dilations[1])
    if oh < 1 or ow < 1:
        raise fail(f"{op} output would be empty ({oh}x{ow}) for input {list(x.shape)}")
    return oh, ow


def _conv2d_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("conv2d", types, 2)
    x, w = types
    expect_dtype("conv2d", x, (FLOAT,), "input")
    expect_dtype("conv2d", w, (FLOAT,), "weight")
    window_attrs(attrs)
    groups = int_attr(attrs, "groups")
    if x.ndim != 4 or w.ndim != 4:
        raise fail(f"conv2d needs a 4-D input and weight, got {list(x.shape)} and {list(w.shape)}")
    n, c = x.shape[:2]
    m, cg, kh, kw = w.shape
    if groups < 1 or c % groups or m % groups or cg * groups != c:
        raise fail(f"conv2d with groups={groups}: input channels {c} and weight {list(w.shape)} do not match")
    oh, ow = conv_output_hw("conv2d", x, (kh, kw), attrs)
    return TensorType((n, m, oh, ow), x.dtype)


def padded(x: np.ndarray, pads: Sequence[int], value: float = 0.0) -> np.ndarray:
    """Pad the two trailing axes by (top, left, bottom, right)."""
    top, left, bottom, right = pads
    if not any(pads):
        return x
    width = [(0, 0)] * (x.ndim - 2) + [(top, bottom), (left, right)]
    return np.pad(x, width, constant_values=value)


def _conv2d(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Sum over kernel taps of a (batched, grouped) matmul: fast enough to be an oracle on real models."""
    x, w = a
    (sh, sw), pads, (dh, dw) = window_attrs(attrs)
    groups = attrs["groups"]
    n = x.shape[0]
    m, cg, kh, kw = w.shape
    out_t = _conv2d_infer([TensorType(x.shape, str(x.dtype)), TensorType(w.shape, str(w.dtype))], attrs)
    oh, ow = out_t.shape[2:]
    xp = padded(x, pads)
    # taps first and contiguous: numpy only hands contiguous operands to BLAS
    taps = np.ascontiguousarray(w.reshape(groups, m // groups, cg, kh, kw).transpose(3, 4, 0, 1, 2))
    out = np.zeros((n, groups, m // groups, oh * ow), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
            tap = tap.reshape(n, groups, cg, oh * ow)
            out += np.matmul(taps[i, j][None], tap)
    return out.reshape(n, m, oh, ow)


# ------------------------------------------------------------------ lowering: compute definitions
def pad_tensor(
    x: te.Tensor,
    pads_before: Sequence[int],
    pads_after: Sequence[int],
    value: float,
    name: str,
    *,
    phases: int = 1,
) -> te.Tensor:
    """Zero (or `value`) padded copy of x; loads are clamped so no lane reads out of bounds.

    With `phases` > 1, the last axis is dealt into that many phases: element [..., p, q] is padded
    column q * phases + p, so a window strided by `phases` reads each phase contiguously (a
    stride-2 depthwise conv reads its input rows as two contiguous half rows, not as every other
    element of the row, which needs a shuffle per vector and per tap)."""
    if phases == 1 and not any(pads_before) and not any(pads_after):
        return x
    shape = [d + b + a for d, b, a in zip(x.shape, pads_before, pads_after, strict=True)]
    out_shape = shape if phases == 1 else [*shape[:-1], phases, -(-shape[-1] // phases)]
    last = len(shape) - 1

    def body(*ix: Expr) -> Expr:
        if phases > 1:
            *lead, p, q = ix
            ix = (*lead, te.add(te.mul(q, te.idx(phases)), p))
        conds = []
        src = []
        for axis, (i, d, b) in enumerate(zip(ix, x.shape, pads_before, strict=True)):
            if b == 0 and shape[axis] == d and not (phases > 1 and axis == last):
                src.append(i)
                continue
            j = te.sub(i, te.idx(b))
            conds += [BinOp(">=", j, te.idx(0)), BinOp("<", j, te.idx(d))]
            src.append(te.minimum(te.maximum(j, te.idx(0)), te.idx(d - 1)))
        cond = te.all_of(conds)
        v = x[src]
        integer = not x.dtype.startswith("float") and math.isfinite(value)
        fill = IntImm(int(value), x.dtype) if integer else FloatImm(float(value), x.dtype)
        return v if cond is None else te.select(cond, v, fill)

    return te.compute(out_shape, body, f"{name}_pad", tag="pad", dtype=x.dtype)


def _conv2d_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    x, w = inputs
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    dh, dw = attrs["dilations"]
    groups = attrs.get("groups", 1)
    oc_total, icg, kh, kw = w.shape
    ocg = oc_total // groups
    depthwise = icg == 1 and ocg == 1
    # a depthwise conv vectorizes along output columns: with a column stride, its padded input is
    # dealt into phases so that every tap reads contiguous columns
    phases = sw if depthwise and sw > 1 else 1
    xp = pad_tensor(x, (0, 0, pt, pl), (0, 0, pb, pr), 0.0, name, phases=phases)
    rc, ry, rx = te.reduce_axis(icg, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def body(n: Expr, oc: Expr, oh: Expr, ow: Expr) -> te.Reduce:
        ic = rc.var if groups == 1 else te.add(te.mul(BinOp("//", oc, te.idx(ocg)), te.idx(icg)), rc.var)
        h = te.add(te.mul(oh, te.idx(sh)), te.mul(ry.var, te.idx(dh)))
        if phases > 1:  # column ow * sw + rx * dw is phase (rx * dw) % sw, column ow + (rx * dw) // sw
            tap = te.mul(rx.var, te.idx(dw))
            col = te.add(ow, BinOp("//", tap, te.idx(phases)))
            x_at = xp[n, ic, h, BinOp("%", tap, te.idx(phases)), col]
        else:
            x_at = xp[n, ic, h, te.add(te.mul(ow, te.idx(sw)), te.mul(rx.var, te.idx(dw)))]
        return te.reduce_sum(te.mul(x_at, w[oc, rc.var, ry.var, rx.var]), [rc, ry, rx])

    kind = "anchor" if groups == 1 else "anchor_depthwise" if depthwise else "anchor_grouped"
    return te.compute(out.shape, body, name, tag=kind, axis_names=["n", "oc", "oh", "ow"], dtype=out.dtype)


def conv_tile(target: Target, oc: int, ow: int) -> tuple[int, int]:
    """(oc tile = vector lanes x 1|2, ow tile) with as many accumulators as registers allow."""
    lanes = target.lanes()
    regs = target.vector_registers
    best, best_score = (min(oc, lanes), 1), -1.0
    for nvec in (2, 1):
        nt = nvec * lanes
        if oc % nt:
            continue
        max_w = max(1, (regs - 2 * nvec - 2) // nvec)
        owt = max(d for d in range(1, min(ow, max_w) + 1) if ow % d == 0)
        score = owt * nvec
        if score > best_score:
            best, best_score = (nt, owt), score
    return best


def _consumer_and_scope(sch: Schedule, info: KernelInfo, anchor: str) -> str:
    blk = block_of(sch, anchor)
    if info.output_block != anchor:
        sch.set_scope(store_of(blk).buffer.name, "local")
        return info.output_block
    return sch.cache_write(anchor)


def _default_axis(info: KernelInfo, blk: Block) -> str:
    """Vectorize along output channels, unless they do not fill vectors or the reduction is so short
    (a pointwise conv of few channels) that storing channel-major tiles into NCHW rows would cost
    more than the arithmetic -- then along output columns, when rows are several vectors long."""
    lanes = info.target.lanes()
    oc, ow = blk.iter_vars[1].extent, blk.iter_vars[3].extent
    k = math.prod(iv.extent for iv in blk.iter_vars[4:])
    if oc % lanes or (k <= 64 and ow >= 3 * lanes):
        return "ow"
    return "oc"


def _groups(blk: Block) -> int:
    """A conv block's channel groups: its input's channels over the channels one group reduces."""
    oc_var = blk.iter_vars[1].var
    data = next(
        x
        for x in walk_expr(store_of(blk).value)
        if isinstance(x, Load) and not (x.indices and x.indices[0] is oc_var)
    )
    return int(data.buffer.shape[1]) // int(blk.iter_vars[4].extent)


@dataclass(frozen=True)
class ConvNest:
    """The direct conv's loop nest as the dispatcher hands it to a rule (after the shared preamble)."""

    conv: str  # the conv's block
    blk: Block  # its definition: iteration extents and loads
    consumer: str  # the block storing the result: the fused epilogue, or the cache write-back
    loops: tuple[str, ...]  # its root loops, outermost first (conv2d: n, oc, oh, ow, rc, ry, rx)
    threads: bool  # the `parallel` decision
    pad: str | None  # the padded input's block, when it is materialized as a nest of its own


def depthwise_rows(sch: Schedule, info: KernelInfo, nest: ConvNest) -> bool:
    """Depthwise convs: one channel plane per parallel iteration, a vector along each output row
    and a few rows per tile (see plane_rows), the padded plane made right before it is read.

    A depthwise conv has no channel reduction whose input values a tile of channels could share,
    and a vector of channels would gather from and scatter to as many NCHW planes; a row is
    contiguous in both. True when the padded input was placed per plane (it then needs no nest of
    its own)."""
    ln, loc, loh, low, lrc, lry, lrx = nest.loops
    lanes = info.target.lanes()
    ow, oh = nest.blk.iter_vars[3].extent, nest.blk.iter_vars[2].extent
    # one vector of up to 64 lanes along the row (LLVM splits it into registers), and enough
    # rows that the unrolled tile keeps ~8 independent accumulators (FMA latency x throughput)
    vw0 = ow if ow <= 64 else max(d for d in range(1, 65) if ow % d == 0)
    # half vectors too: a row of 56 is 7 of them, where a 56-lane vector is 3.5 registers,
    # which LLVM splits clumsily (worst with stride-2 reads, shuffled per register)
    half = max(1, lanes // 2)
    widths = sorted({vw0} | {d for d in range(half, 65, half) if ow % d == 0})
    vw = sch.decide("vector_width", widths, vw0)
    nv = -(-vw // lanes)
    row_options = [d for d in range(1, oh + 1) if oh % d == 0 and d * nv <= 24]
    rows0 = next((d for d in row_options if d * nv >= 8), row_options[-1])
    rows = sch.decide("rows", row_options, rows0 if vw == vw0 else 1)
    # pad one channel plane right before its convolution (it stays in cache)
    return plane_rows(
        sch, nest.conv, nest.consumer, (ln, loc, loh, low), [lrc, lry, lrx], vw, rows, nest.threads,
        nest.pad, info.target,
    )  # fmt: skip


def columns_tile(sch: Schedule, info: KernelInfo, nest: ConvNest) -> None:
    """Grouped convs, and convs whose output channels do not fill vectors (or whose reduction is
    short and rows long, see _default_axis): a vector along output columns times a register tile of
    output channels, the weights broadcast.

    Channels can't be the vector axis there: too few of them, or a vector of them would span
    groups, which read different input channels. The channel tile stays within one group, so it
    shares its input rows."""
    ln, loc, loh, low, lrc, lry, lrx = nest.loops
    lanes = info.target.lanes()
    regs = info.target.vector_registers
    oc = nest.blk.iter_vars[1].extent
    per_group = oc // _groups(nest.blk) if info.tags.get(nest.conv) == "anchor_grouped" else oc
    max_oc = max(1, regs - 3)
    options = [d for d in range(1, min(per_group, max_oc) + 1) if per_group % d == 0]
    oct = sch.decide("oct", options, max(options))
    owo, owv = sch.split(low, [None, lanes])
    oco, oci = sch.split(loc, [None, oct])
    sch.reorder(ln, oco, loh, owo, lrc, lry, lrx, oci, owv)
    outer = sch.fuse(ln, oco, loh)
    if nest.threads:
        sch.parallel(outer)
    sch.unroll(oci)
    sch.vectorize(owv)
    sch.reverse_compute_at(nest.consumer, owo)
    sch.decompose_reduction(nest.conv, lrc)
    inner = root_loops(sch, nest.consumer)[-1]
    sch.vectorize(inner.var.name)


def channel_tile(sch: Schedule, info: KernelInfo, nest: ConvNest) -> None:
    """Dense convs with whole vectors of output channels: a register tile of up to 4 channel vectors
    by a run of output columns accumulates over (ic, kh, kw), one weight vector times a broadcast
    input value per step; constant weights are packed so one tile's weights are contiguous.

    The default where channels fill vectors: every input value loaded feeds a whole tile of FMAs,
    and the fused epilogue runs per tile while it is still in registers."""
    ln, loc, loh, low, lrc, lry, lrx = nest.loops
    lanes = info.target.lanes()
    oc_iv, ow_iv = nest.blk.iter_vars[1], nest.blk.iter_vars[3]
    nt0, owt0 = conv_tile(info.target, oc_iv.extent, ow_iv.extent)
    regs = info.target.vector_registers
    oc = oc_iv.extent
    nt = sch.decide("nt", sorted({v * lanes for v in (1, 2, 3, 4) if oc % (v * lanes) == 0} | {nt0}), nt0)
    nvec = max(1, -(-nt // lanes))
    # accumulators + one register per weight vector; the broadcast input can be an FMA's
    # memory operand, so a tile may fill every register (the default leaves some spare)
    max_w = max(1, (regs - nvec) // nvec)
    owt = sch.decide(
        "owt",
        [d for d in range(1, min(ow_iv.extent, max_w) + 1) if ow_iv.extent % d == 0],
        owt0 if nt == nt0 else 1,
    )
    oco, oci = sch.split(loc, [None, nt])
    ocv_o, ocv = sch.split(oci, [None, min(lanes, nt)])
    owo, owi = sch.split(low, [None, owt])
    red = (
        [lrc, lry, lrx]
        if sch.decide("reduce_order", ["c_kh_kw", "kh_kw_c"], "c_kh_kw") == "c_kh_kw"
        else [lry, lrx, lrc]
    )
    tiles = (
        [oco, loh, owo]
        if sch.decide("tile_order", ["oc_oh_ow", "oh_oc_ow"], "oc_oh_ow") == "oc_oh_ow"
        else [loh, oco, owo]
    )
    sch.reorder(ln, *tiles, *red, owi, ocv_o, ocv)
    outer = sch.fuse(ln, tiles[0], tiles[1])
    if nest.threads:
        sch.parallel(outer)
    sch.unroll(owi)
    sch.unroll(ocv_o)
    sch.vectorize(ocv)
    if sch.decide("unroll_kw", [False, True], False):
        sch.unroll(lrx)
    weight = next(
        x.buffer.name
        for x in walk_expr(store_of(nest.blk).value)
        if isinstance(x, Load) and x.indices[0] is oc_iv.var
    )
    if weight in sch.const_params and oc % nt == 0:
        sch.pack_layout(weight, Layout(((0, nt),), (0, 2, 3, 4, 1)))
    sch.reverse_compute_at(nest.consumer, owo)
    sch.decompose_reduction(nest.conv, red[0])


def _conv2d_schedule(sch: Schedule, info: KernelInfo) -> None:
    """Direct convolution: the shared preamble, then one of three rules by the conv's kind.

    The preamble inlines injective producers (keeping the padded input, materialized once so the
    inner loops have no bounds checks), makes the block that stores the result and decides
    `parallel`. Then depthwise convs take depthwise_rows, grouped convs columns_tile, and the rest
    columns_tile or channel_tile by the `vector_axis` decision ("ow" or "oc"). A padded input that
    the rule did not place gets its own parallel, vectorized nest.
    """
    conv = info.anchor_block
    assert conv is not None
    kind = info.tags.get(conv, "anchor")
    pad = f"{conv}_pad"
    keep = (pad,) if pad in sch.blocks() else ()
    inline_injective(sch, info, keep=keep)
    blk = block_of(sch, conv)
    consumer = _consumer_and_scope(sch, info, conv)
    loops = tuple(f.var.name for f in root_loops(sch, conv))
    work = 2 * math.prod(iv.extent for iv in blk.iter_vars)
    threads = sch.decide("parallel", [True, False], work >= MIN_PARALLEL_FLOPS)
    nest = ConvNest(conv, blk, consumer, loops, threads, pad if keep else None)
    pad_placed = False
    if kind == "anchor_depthwise":
        pad_placed = depthwise_rows(sch, info, nest)
    else:
        grouped = kind == "anchor_grouped"  # always columns_tile: no vector_axis decision
        if grouped or sch.decide("vector_axis", ["oc", "ow"], _default_axis(info, blk)) == "ow":
            columns_tile(sch, info, nest)
        else:
            channel_tile(sch, info, nest)
    if keep and not pad_placed:
        parallel_vectorize(sch, pad, info.target)


# conv2d(x, w), attrs: strides, pads (top, left, bottom, right), dilations, groups
register(
    OpDef(
        "conv2d",
        Pattern.ANCHOR,
        _conv2d_infer,
        _conv2d,
        compute=_conv2d_compute,
        schedule=_conv2d_schedule,
        version=2,  # 2: strided depthwise convs read a phase-split padded input
    )
)
