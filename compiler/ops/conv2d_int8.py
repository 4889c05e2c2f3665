"""conv2d_nchwc_u8s8: an 8-bit integer convolution in the blocked channel layout, int32 sums.

Input x is uint8 [N, C/ib, H, W, ib] (ib a multiple of 4), or the same 8-bit values widened to int16
(ib even); the weight is int8 packed to int32s, four input channels to an int32 for a uint8 input,
two (as int16 halves) for an int16 one, [OC/ob, C/ib, KH, KW, ib/4 or ib/2, ob] (pack_weight_u8s8);
the output is the exact int32 sums [N, OC/ob, OH, OW, ob]. Attributes as conv2d_nchwc (strides,
pads, dilations, groups = 1) and x_zero: the uint8 value the padding holds (a quantized input's zero
point, which stands for 0); optional pairs_fit (0 or 1, uint8 inputs): the weights' pairs keep their
int16 sums from saturating (weight_pairs_fit), so that targets without VNNI take vpmaddubsw
(DOT4_PAIRS_FIT).

Why: a quantized model's convs multiply 8-bit integers. VNNI's vpdpbusd sums four u8 x s8 products
into each int32 lane in one instruction, four times the multiply-adds of a float32 FMA of the same
width; without VNNI, vpmaddubsw and vpmaddwd do it in two, for weights whose pairs fit in int16. For
weights whose pairs do not, the values widened to int16 take vpmaddwd alone (DOT2): two exact
products per lane, twice an FMA's, at the cost of twice the input's bytes.
The loop nest is conv2d_nchwc's, with a step of four (two) input channels in place of one, so the
blocked conv's schedule rules and tuning decisions apply unchanged (see
compiler/graph/passes/quantized_kernels.py for where the graph gets these convs, and the float
arithmetic of its epilogue).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import expect_args, expect_dtype, fail, int_attr
from compiler.ops.conv2d import conv_output_hw, pad_tensor, padded, window_attrs
from compiler.ops.conv2d_blocked import _schedule, pack_weight, unpack_weight
from compiler.ops.layout import to_blocked, to_planar
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import DOT_WIDTH, Expr, int_dot

OP = "conv2d_nchwc_u8s8"
DOT = DOT_WIDTH["uint8"]  # input channels per packed weight of a uint8 input (one DOT4 step)
PAIRS_FIT = "pairs_fit"  # the attribute: DOT4_PAIRS_FIT's promise holds for the weight
_INT16 = (-(1 << 15), (1 << 15) - 1)


def weight_pairs_fit(k: np.ndarray, x_max: int) -> bool:
    """Whether every pair of int8 weights one vpmaddubsw step sums (`k`'s last axis, of even length:
    the reduction, paired 2m and 2m + 1 as the packing places them) keeps x * k[2m] + y * k[2m + 1]
    within int16 for all x, y in 0..x_max (its largest sums: all the pair's positive weights, or all
    its negative ones, times x_max)."""
    pairs = np.pad(k.astype(np.int64), [(0, 0)] * (k.ndim - 1) + [(0, k.shape[-1] % 2)])
    pairs = pairs.reshape(*pairs.shape[:-1], -1, 2)
    high = x_max * np.clip(pairs, 0, None).sum(axis=-1)
    low = x_max * np.clip(pairs, None, 0).sum(axis=-1)
    return not pairs.size or bool(high.max() <= _INT16[1] and low.min() >= _INT16[0])


def pairs_fit_attr(attrs: dict[str, Any]) -> bool:
    """The op's optional pairs_fit attribute (0 or 1)."""
    value = attrs.get(PAIRS_FIT, 0)
    if value not in (0, 1):
        raise fail(f"{PAIRS_FIT} must be 0 or 1, got {value!r}")
    return bool(value)


def pack_weight_u8s8(w: np.ndarray, in_block: int, out_block: int, width: int = DOT) -> np.ndarray:
    """int8 OIHW -> int32 [O/ob, I/ib, KH, KW, ib/width, ob]: each int32 holds the weights of `width`
    consecutive input channels of one output lane, the first lowest: four bytes for a uint8 input
    (as DOT4 reads them), two int16 halves for an int16 one (DOT2)."""
    if w.dtype != np.int8 or width not in DOT_WIDTH.values() or in_block % width:
        raise ValueError(f"pack_weight_u8s8 takes int8 weights and an input block divisible by {width}")
    packed = pack_weight(w, in_block, out_block)  # [OB, IB, KH, KW, ib, ob]
    ocb, icb, kh, kw, ib, ob = packed.shape
    groups = packed.reshape(ocb, icb, kh, kw, ib // width, width, ob).transpose(0, 1, 2, 3, 4, 6, 5)
    words = np.ascontiguousarray(groups.astype(f"<i{4 // width}"))
    return words.view("<i4").reshape(ocb, icb, kh, kw, ib // width, ob)


def unpack_weight_u8s8(w: np.ndarray, width: int = DOT) -> np.ndarray:
    """pack_weight_u8s8's inverse (padded channels kept): int8 OIHW."""
    ocb, icb, kh, kw, groups, ob = w.shape
    # each int32 seen as its `width` parts, back into [.., ib, ob]
    parts = np.ascontiguousarray(w).astype("<i4").view(f"<i{4 // width}")
    b = parts.reshape(ocb, icb, kh, kw, groups, ob, width).astype(np.int8)
    blocked = b.transpose(0, 1, 2, 3, 4, 6, 5).reshape(ocb, icb, kh, kw, groups * width, ob)
    return unpack_weight(blocked)


def dot_width(x: TensorType) -> int:
    """The input channels one packed int32 of weights covers for an input of x's dtype."""
    if x.dtype not in DOT_WIDTH:
        raise fail(f"an integer conv's input is uint8 or int16 (8-bit values widened), got {x.dtype}")
    return DOT_WIDTH[x.dtype]


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args(OP, types, 2)
    x, w = types
    expect_dtype(OP, x, tuple(DOT_WIDTH), "input")
    expect_dtype(OP, w, ("int32",), "weight")
    window_attrs(attrs)
    if int_attr(attrs, "groups") != 1:
        raise fail(f"{OP} is for dense convs (groups=1), got groups={attrs['groups']}")
    zero = int_attr(attrs, "x_zero")
    if not 0 <= zero <= 255:
        raise fail(f"{OP}'s x_zero must be a uint8 value, got {zero}")
    if pairs_fit_attr(attrs) and x.dtype != "uint8":
        raise fail(f"{OP}'s {PAIRS_FIT} is for uint8 inputs (vpmaddubsw's pairs), got {x.dtype}")
    if x.ndim != 5 or w.ndim != 6:
        raise fail(f"{OP} needs a 5-D input and a 6-D weight, got {list(x.shape)} and {list(w.shape)}")
    width = dot_width(x)
    n, icb, _, _, ib = x.shape
    ocb, wicb, kh, kw, groups, ob = w.shape
    if ib % width or wicb != icb or groups * width != ib:
        raise fail(
            f"{OP}: {x.dtype} input {list(x.shape)} and weight {list(w.shape)} do not match "
            f"(the input block must be {width} times the weight's packed channels)"
        )
    oh, ow = conv_output_hw(OP, x, (kh, kw), attrs)
    return TensorType((n, ocb, oh, ow, ob), "int32")


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The exact sums, in float64 (exact for these products and any realistic reduction)."""
    x, w = a
    (sh, sw), pads, (dh, dw) = window_attrs(attrs)
    xp = padded(to_planar(x).astype(np.float64), pads, float(attrs["x_zero"]))
    weight = unpack_weight_u8s8(w, DOT_WIDTH[str(x.dtype)]).astype(np.float64)
    m, c, kh, kw = weight.shape
    n, _, h, wd = xp.shape
    oh, ow = (h - (kh - 1) * dh - 1) // sh + 1, (wd - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, m, oh * ow))
    for i in range(kh):
        for j in range(kw):
            tap = xp[:, :, i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw]
            out += np.matmul(weight[:, :, i, j][None], tap.reshape(n, c, oh * ow))
    return to_blocked(out.reshape(n, m, oh, ow).astype(np.int32), w.shape[5])


def _compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    x, w = inputs
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    dh, dw = attrs["dilations"]
    width = DOT_WIDTH[x.dtype]
    xp = pad_tensor(x, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), attrs["x_zero"], name)
    ry, rx = te.reduce_axis(w.shape[2], "ry"), te.reduce_axis(w.shape[3], "rx")
    rcb, rq = te.reduce_axis(w.shape[1], "rcb"), te.reduce_axis(w.shape[4], "rci")

    def dense(n: Expr, ocb: Expr, oh: Expr, ow: Expr, oc: Expr) -> te.Reduce:
        h = te.add(te.mul(oh, te.idx(sh)), te.mul(ry.var, te.idx(dh)))
        col = te.add(te.mul(ow, te.idx(sw)), te.mul(rx.var, te.idx(dw)))
        channel = te.mul(rq.var, te.idx(width))
        lanes = [xp[n, rcb.var, h, col, te.add(channel, te.idx(k))] for k in range(width)]
        step = int_dot(lanes, w[ocb, rcb.var, ry.var, rx.var, rq.var, oc], pairs_fit_attr(attrs))
        return te.reduce_sum(step, [rcb, ry, rx, rq])

    # the iteration space and its names are conv2d_nchwc's: its schedule (block_tile) applies as is
    axes = ["n", "ocb", "oh", "ow", "oc"]
    return te.compute(out.shape, dense, name, tag="anchor_nchwc_u8s8", axis_names=axes, dtype="int32")


# conv2d_nchwc_u8s8(x uint8 or int16 blocked, packed int8 weight), attrs: strides, pads, dilations,
# groups, x_zero, pairs_fit (optional)
register(OpDef(OP, Pattern.ANCHOR, _infer, _reference, compute=_compute, schedule=_schedule))
