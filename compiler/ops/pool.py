"""2-D pooling over NCHW: max_pool2d and avg_pool2d (ANCHOR: each accepts an elementwise epilogue).

A 5-D input is the blocked layout NCHW{b}c (compiler/ops/layout.py): the window slides over axes 2
and 3 as in NCHW and the trailing channel lanes are carried along (one vector per output pixel).

max_pool2d attrs: kernel, strides, pads (top, left, bottom, right), dilations, ceil_mode.
avg_pool2d attrs: kernel, strides, pads, ceil_mode, count_include_pad.
With ceil_mode a last partial window exists only if it starts inside the input or the left pad.
Averages divide by the window clipped to the input (count_include_pad=0) or to the padded input
(count_include_pad=1), as onnxruntime does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.errors import ScheduleError
from compiler.ops.common import (
    FLOAT,
    expect_args,
    expect_dtype,
    fail,
    int_attr,
    ints_attr,
    non_negative,
    pool_out_size,
    positive,
)
from compiler.ops.conv2d import pad_tensor
from compiler.ops.conv2d_blocked import pad_per_row
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IterVar
from compiler.tir.rules import (
    MIN_PARALLEL_WORK,
    KernelInfo,
    block_of,
    inline_injective,
    parallel_vectorize,
    plane_rows,
    root_loops,
    store_of,
)
from compiler.tir.trace import Schedule


def _geometry(op: str, x: TensorType, attrs: dict[str, Any], dilated: bool) -> dict[str, Any]:
    kernel = ints_attr(attrs, "kernel", 2)
    strides = ints_attr(attrs, "strides", 2)
    pads = ints_attr(attrs, "pads", 4)
    dilations = ints_attr(attrs, "dilations", 2) if dilated else (1, 1)
    ceil_mode = int_attr(attrs, "ceil_mode")
    positive("kernel", kernel)
    positive("strides", strides)
    positive("dilations", dilations)
    non_negative("pads", pads)
    if x.ndim not in (4, 5):
        raise fail(f"{op} needs a 4-D NCHW (or 5-D NCHW<b>c) input, got {list(x.shape)}")
    out = tuple(
        pool_out_size(
            x.shape[2 + i], kernel[i], strides[i], pads[i], pads[i + 2], dilations[i], bool(ceil_mode)
        )
        for i in range(2)
    )
    if min(out) < 1:
        raise fail(f"{op} output would be empty for input {list(x.shape)}")
    if any(pads[i] >= kernel[i] or pads[i + 2] >= kernel[i] for i in range(2)):
        raise fail(f"{op} pads {list(pads)} must be smaller than the kernel {list(kernel)}")
    return {"kernel": kernel, "strides": strides, "pads": pads, "dilations": dilations, "out": out}


def _max_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("max_pool2d", types, 1)
    expect_dtype("max_pool2d", types[0], (FLOAT,))
    g = _geometry("max_pool2d", types[0], attrs, dilated=True)
    return TensorType((*types[0].shape[:2], *g["out"], *types[0].shape[4:]), types[0].dtype)


def _avg_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("avg_pool2d", types, 1)
    expect_dtype("avg_pool2d", types[0], (FLOAT,))
    int_attr(attrs, "count_include_pad")
    g = _geometry("avg_pool2d", types[0], attrs, dilated=False)
    return TensorType((*types[0].shape[:2], *g["out"], *types[0].shape[4:]), types[0].dtype)


def _taps(x: np.ndarray, g: dict[str, Any], value: float) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Pad x so every window fits and return it with the (row, col) offsets of the kernel taps."""
    (kh, kw), (sh, sw), (top, left, _, _), (dh, dw), (oh, ow) = (
        g["kernel"],
        g["strides"],
        g["pads"],
        g["dilations"],
        g["out"],
    )
    h, w = x.shape[2:4]
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    width = [(0, 0), (0, 0), (top, max(need_h - top - h, 0)), (left, max(need_w - left - w, 0))]
    width += [(0, 0)] * (x.ndim - 4)
    xp = np.pad(x, width, constant_values=value)
    return xp, [(i * dh, j * dw) for i in range(kh) for j in range(kw)]


def _window(xp: np.ndarray, g: dict[str, Any], r: int, c: int) -> np.ndarray:
    (sh, sw), (oh, ow) = g["strides"], g["out"]
    return xp[:, :, r : r + (oh - 1) * sh + 1 : sh, c : c + (ow - 1) * sw + 1 : sw]


def _max_pool(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    g = _geometry("max_pool2d", TensorType(x.shape, str(x.dtype)), attrs, dilated=True)
    xp, taps = _taps(x, g, -np.inf)
    out = np.full((*x.shape[:2], *g["out"], *x.shape[4:]), -np.inf, dtype=x.dtype)
    for r, c in taps:
        np.maximum(out, _window(xp, g, r, c), out=out)
    return out


def window_counts(
    size: int, kernel: int, stride: int, begin: int, end: int, out: int, include_pad: bool
) -> np.ndarray:
    """Per output position along one axis: how many taps the average divides by."""
    lo, hi = (-begin, size + end) if include_pad else (0, size)
    starts = np.arange(out) * stride - begin
    return np.array([sum(lo <= s + k < hi for k in range(kernel)) for s in starts], dtype=np.float64)


def _avg_pool(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    g = _geometry("avg_pool2d", TensorType(x.shape, str(x.dtype)), attrs, dilated=False)
    xp, taps = _taps(x, g, 0.0)
    total = np.zeros((*x.shape[:2], *g["out"], *x.shape[4:]), dtype=np.float64)
    for r, c in taps:
        total += _window(xp, g, r, c)
    include = bool(attrs["count_include_pad"])
    (kh, kw), (sh, sw), (top, left, bottom, right), (oh, ow) = g["kernel"], g["strides"], g["pads"], g["out"]
    ch = window_counts(x.shape[2], kh, sh, top, bottom, oh, include)
    cw = window_counts(x.shape[3], kw, sw, left, right, ow, include)
    counts = np.maximum(np.outer(ch, cw), 1.0).reshape(oh, ow, *([1] * (x.ndim - 4)))
    return (total / counts).astype(x.dtype)


# ------------------------------------------------------------------ lowering: compute definitions
def _window_index(
    x: te.Tensor, attrs: dict[str, Any], oh: Expr, ow: Expr, ry: IterVar, rx: IterVar
) -> tuple[Expr | None, Expr, Expr]:
    sh, sw = attrs["strides"]
    pt, pl = attrs["pads"][0], attrs["pads"][1]
    dh, dw = attrs.get("dilations", (1, 1))
    h = te.sub(te.add(te.mul(oh, te.idx(sh)), te.mul(ry.var, te.idx(dh))), te.idx(pt))
    w = te.sub(te.add(te.mul(ow, te.idx(sw)), te.mul(rx.var, te.idx(dw))), te.idx(pl))
    H, W = x.shape[2], x.shape[3]
    cond = te.all_of(
        [
            BinOp(">=", h, te.idx(0)),
            BinOp("<", h, te.idx(H)),
            BinOp(">=", w, te.idx(0)),
            BinOp("<", w, te.idx(W)),
        ]
    )
    hc = te.minimum(te.maximum(h, te.idx(0)), te.idx(H - 1))
    wc = te.minimum(te.maximum(w, te.idx(0)), te.idx(W - 1))
    return cond, hc, wc


def _max_pool_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    kh, kw = attrs["kernel"]
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    sh, sw = attrs["strides"]
    pt, pl = attrs["pads"][0], attrs["pads"][1]
    dh, dw = attrs.get("dilations", (1, 1))
    # pad with -inf so that every window (ceil_mode's last one too) reads inside the padded input
    after = [
        max(
            0,
            (out.shape[2 + i] - 1) * (sh, sw)[i]
            + ((kh, kw)[i] - 1) * (dh, dw)[i]
            + 1
            - x.shape[2 + i]
            - (pt, pl)[i],
        )
        for i in range(2)
    ]
    lanes = [0] * (x.ndim - 4)
    xp = pad_tensor(x, (0, 0, pt, pl, *lanes), (0, 0, *after, *lanes), float("-inf"), name)

    def body(n: Expr, c: Expr, oh: Expr, ow: Expr, *lane: Expr) -> te.Reduce:
        h = te.add(te.mul(oh, te.idx(sh)), te.mul(ry.var, te.idx(dh)))
        w = te.add(te.mul(ow, te.idx(sw)), te.mul(rx.var, te.idx(dw)))
        return te.reduce_max(xp[n, c, h, w, *lane], [ry, rx])

    names = ["n", "c", "oh", "ow", "lane"][: x.ndim]
    return te.compute(out.shape, body, name, tag="anchor", axis_names=names, dtype=out.dtype)


def _max_pool_schedule(sch: Schedule, info: KernelInfo) -> None:
    """One channel plane per parallel iteration, its padded copy made right before it (so it stays
    in cache); output rows as vectors of up to 64 columns (strided window reads become wide loads
    and shuffles), the window unrolled, the running max in registers, the epilogue per row tile."""
    assert info.anchor_block is not None
    _pool_schedule(sch, info, info.anchor_block)


def _avg_pool_schedule(sch: Schedule, info: KernelInfo) -> None:
    """The max pool's schedule on the window sum (its padding is a condition on each read, not a
    padded copy); the division by the window's count is the first op of the epilogue."""
    assert info.anchor_block is not None
    total = f"{info.anchor_block}_sum"
    if total not in sch.blocks():
        raise ScheduleError(f"no window sum {total!r} to schedule")
    _pool_schedule(sch, info, total)


def _pool_schedule(sch: Schedule, info: KernelInfo, pool: str) -> None:
    pad = f"{pool}_pad"
    keep = (pad,) if pad in sch.blocks() else ()
    inline_injective(sch, info, keep=keep)
    blk = block_of(sch, pool)
    if info.output_block != pool:
        sch.set_scope(store_of(blk).buffer.name, "local")
        consumer = info.output_block
    else:
        consumer = sch.cache_write(pool)
    if len(blk.iter_vars) == 7:  # NCHW{b}c
        _blocked_pool_schedule(sch, info, pool, consumer, pad if keep else None)
        return
    ln, lc, loh, low, lry, lrx = [f.var.name for f in root_loops(sch, pool)]
    lanes = info.target.lanes()
    oh, ow = blk.iter_vars[2].extent, blk.iter_vars[3].extent
    vw0 = ow if ow <= 64 else max(d for d in range(1, 65) if ow % d == 0)
    vw = sch.decide("vector_width", sorted({vw0} | {d for d in range(lanes, 65, lanes) if ow % d == 0}), vw0)
    nv = -(-vw // lanes)
    row_options = [d for d in range(1, oh + 1) if oh % d == 0 and d * nv <= 16]
    rows = sch.decide("rows", row_options, 1)
    work = math.prod(iv.extent for iv in blk.iter_vars)
    threads = sch.decide("parallel", [True, False], work >= MIN_PARALLEL_WORK)
    placed = plane_rows(
        sch, pool, consumer, (ln, lc, loh, low), [lry, lrx], vw, rows, threads, pad if keep else None,
        info.target,
    )  # fmt: skip
    if keep and not placed:
        parallel_vectorize(sch, pad, info.target)


def _blocked_pool_schedule(
    sch: Schedule, info: KernelInfo, pool: str, consumer: str, pad: str | None
) -> None:
    """NCHW{b}c: a run of output pixels, each one channel vector, reduces over the window. A large
    padded input is made per output row, the window's rows in a local buffer (decision pad_at: "row",
    or "kernel" for a pass of its own), as the blocked depthwise conv does: a pool does even less
    arithmetic per byte than it."""
    ln, lc, loh, low, lane, lry, lrx = [f.var.name for f in root_loops(sch, pool)]
    blk = block_of(sch, pool)
    ow = blk.iter_vars[3].extent
    options = [d for d in range(1, min(ow, 8) + 1) if ow % d == 0]
    owt = sch.decide("owt", options, max(options))
    work = math.prod(iv.extent for iv in blk.iter_vars)
    threads = sch.decide("parallel", [True, False], work >= MIN_PARALLEL_WORK)
    owo, owi = sch.split(low, [None, owt])
    sch.reorder(ln, lc, loh, owo, lry, lrx, owi, lane)
    outer = sch.fuse(ln, lc, loh)
    if threads:
        sch.parallel(outer)
    sch.unroll(owi)
    sch.vectorize(lane)
    sch.reverse_compute_at(consumer, owo)
    sch.decompose_reduction(pool, lry)
    sch.vectorize(root_loops(sch, consumer)[-1].var.name)
    if pad is not None and not pad_per_row(sch, pad, outer, info.target):
        parallel_vectorize(sch, pad, info.target)


def _avg_pool_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    kh, kw = attrs["kernel"]
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    H, W = x.shape[2], x.shape[3]
    include_pad = bool(attrs.get("count_include_pad", 0))
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    names = ["n", "c", "oh", "ow", "lane"][: x.ndim]

    def total(n: Expr, c: Expr, oh: Expr, ow: Expr, *lane: Expr) -> te.Reduce:
        cond, hc, wc = _window_index(x, attrs, oh, ow, ry, rx)
        v = x[n, c, hc, wc, *lane]
        return te.reduce_sum(te.select(cond, v, FloatImm(0.0, x.dtype)) if cond is not None else v, [ry, rx])

    s = te.compute(out.shape, total, f"{name}_sum", tag="reduce", axis_names=names)

    def count(o: Expr, stride: int, pad_before: int, k: int, size: int, pad_after: int) -> Expr:
        start = te.sub(te.mul(o, te.idx(stride)), te.idx(pad_before))
        if include_pad:
            lo, hi = te.idx(-pad_before), te.idx(size + pad_after)
        else:
            lo, hi = te.idx(0), te.idx(size)
        end = te.minimum(te.add(start, te.idx(k)), hi)
        return te.sub(end, te.maximum(start, lo))

    def body(n: Expr, c: Expr, oh: Expr, ow: Expr, *lane: Expr) -> Expr:
        cnt = te.mul(count(oh, sh, pt, kh, H, pb), count(ow, sw, pl, kw, W, pr))
        return te.div(s[n, c, oh, ow, *lane], te.cast(x.dtype, cnt))

    return te.compute(out.shape, body, name, tag="elemwise", axis_names=names, dtype=out.dtype)


# max_pool2d(x), attrs: kernel, strides, pads, dilations, ceil_mode
register(
    OpDef(
        "max_pool2d",
        Pattern.ANCHOR,
        _max_infer,
        _max_pool,
        compute=_max_pool_compute,
        schedule=_max_pool_schedule,
        version=2,  # 2: padded copy + own schedule (version 1 traces were the generic schedule's)
    )
)
# avg_pool2d(x), attrs: kernel, strides, pads, ceil_mode, count_include_pad
register(
    OpDef(
        "avg_pool2d",
        Pattern.ANCHOR,
        _avg_infer,
        _avg_pool,
        compute=_avg_pool_compute,
        schedule=_avg_pool_schedule,
        version=2,  # 2: own schedule (version 1 traces were the generic schedule's)
    )
)
