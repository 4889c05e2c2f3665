"""conv_transpose2d: NCHW input, (C_in, C_out / groups, kH, kW) weight, explicit pads, no bias.

Attributes: strides, pads=(top, left, bottom, right), dilations, groups, output_padding=(oh, ow).
Output size per axis: stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, expect_args, expect_dtype, fail, int_attr, ints_attr, non_negative
from compiler.ops.conv2d import window_attrs
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr


def conv_transpose_out_size(
    size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int, output_padding: int
) -> int:
    return stride * (size - 1) + output_padding + (kernel - 1) * dilation + 1 - pad_begin - pad_end


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("conv_transpose2d", types, 2)
    x, w = types
    expect_dtype("conv_transpose2d", x, (FLOAT,), "input")
    expect_dtype("conv_transpose2d", w, (FLOAT,), "weight")
    strides, pads, dilations = window_attrs(attrs)
    output_padding = ints_attr(attrs, "output_padding", 2)
    non_negative("output_padding", output_padding)
    groups = int_attr(attrs, "groups")
    if x.ndim != 4 or w.ndim != 4:
        raise fail(f"conv_transpose2d needs 4-D input and weight, got {list(x.shape)} and {list(w.shape)}")
    n, c, h, wd = x.shape
    if groups < 1 or w.shape[0] != c or c % groups:
        raise fail(f"conv_transpose2d with groups={groups}: input {list(x.shape)} and weight {list(w.shape)}")
    for i in range(2):
        if output_padding[i] >= max(strides[i], dilations[i]):
            raise fail(f"conv_transpose2d output_padding {list(output_padding)} must be < stride or dilation")
    oh = conv_transpose_out_size(h, w.shape[2], strides[0], pads[0], pads[2], dilations[0], output_padding[0])
    ow = conv_transpose_out_size(
        wd, w.shape[3], strides[1], pads[1], pads[3], dilations[1], output_padding[1]
    )
    if oh < 1 or ow < 1:
        raise fail(f"conv_transpose2d output would be empty ({oh}x{ow})")
    return TensorType((n, w.shape[1] * groups, oh, ow), x.dtype)


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """Scatter each kernel tap's contribution into the uncropped output, then crop the pads."""
    x, w = a
    (sh, sw), (top, left, bottom, right), (dh, dw) = window_attrs(attrs)
    oph, opw = attrs["output_padding"]
    groups = attrs["groups"]
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // groups
    full_h = sh * (h - 1) + oph + (kh - 1) * dh + 1
    full_w = sw * (wd - 1) + opw + (kw - 1) * dw + 1
    buf = np.zeros((n, groups, mg, full_h, full_w), dtype=np.float32)
    xg = x.reshape(n, groups, cg, h * wd)
    # per tap, (groups, mg, cg) contiguous so that numpy hands the products to BLAS
    taps = np.ascontiguousarray(w.reshape(groups, cg, mg, kh, kw).transpose(3, 4, 0, 2, 1))
    for i in range(kh):
        for j in range(kw):
            contrib = np.matmul(taps[i, j][None], xg).reshape(n, groups, mg, h, wd)
            buf[
                :, :, :, i * dh : i * dh + (h - 1) * sh + 1 : sh, j * dw : j * dw + (wd - 1) * sw + 1 : sw
            ] += contrib
    out = buf[:, :, :, top : full_h - bottom, left : full_w - right]
    return np.ascontiguousarray(out.reshape(n, groups * mg, out.shape[3], out.shape[4]))


# ------------------------------------------------------------------ lowering: compute definitions
def _conv_transpose_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    x, w = inputs
    sh, sw = attrs["strides"]
    pt, pl = attrs["pads"][0], attrs["pads"][1]
    dh, dw = attrs["dilations"]
    groups = attrs.get("groups", 1)
    cin, ocg, kh, kw = w.shape
    icg = cin // groups
    H, W = x.shape[2], x.shape[3]
    rc, ry, rx = te.reduce_axis(icg, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def body(n: Expr, oc: Expr, oh: Expr, ow: Expr) -> te.Reduce:
        g = BinOp("//", oc, te.idx(ocg)) if groups > 1 else te.idx(0)
        ic = te.add(te.mul(g, te.idx(icg)), rc.var)
        th = te.sub(te.add(oh, te.idx(pt)), te.mul(ry.var, te.idx(dh)))
        tw = te.sub(te.add(ow, te.idx(pl)), te.mul(rx.var, te.idx(dw)))
        ih, iw = BinOp("//", th, te.idx(sh)), BinOp("//", tw, te.idx(sw))
        cond = te.all_of(
            [
                BinOp(">=", th, te.idx(0)),
                BinOp(">=", tw, te.idx(0)),
                BinOp("==", BinOp("%", th, te.idx(sh)), te.idx(0)),
                BinOp("==", BinOp("%", tw, te.idx(sw)), te.idx(0)),
                BinOp("<", ih, te.idx(H)),
                BinOp("<", iw, te.idx(W)),
            ]
        )
        v = te.mul(
            x[n, ic, te.clamp(ih, H - 1), te.clamp(iw, W - 1)],
            w[ic, BinOp("%", oc, te.idx(ocg)), ry.var, rx.var],
        )
        assert cond is not None
        return te.reduce_sum(te.select(cond, v, te.f32(0.0)), [rc, ry, rx])

    return te.compute(
        out.shape, body, name, tag="anchor", axis_names=["n", "oc", "oh", "ow"], dtype=out.dtype
    )


# conv_transpose2d(x, w), attrs: strides, pads, dilations, groups, output_padding
register(OpDef("conv_transpose2d", Pattern.ANCHOR, _infer, _reference, compute=_conv_transpose_compute))
