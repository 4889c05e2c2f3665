"""layout_transform: NCHW <-> NCHW{b}c, the blocked channel layout of the layout-alteration pass.

NCHW{b}c splits the channel axis into blocks of b and moves the block to the innermost axis:
element [n, c, h, w] of NCHW lives at [n, c // b, h, w, c % b]. With b the target's vector lanes,
a vector holds b channels of one pixel, so a convolution's output tile, its epilogue and the next
convolution's weights are all contiguous vectors (see compiler/graph/passes/alter_layout.py).

Attributes: src_layout, dst_layout: "NCHW" and "NCHW{b}c" (one of each); channels: the planar
side's channel count when b does not divide it. The blocked side then has ceil(channels / b) blocks
and its last block is zero-padded (a conv's packed weights are zero for those lanes, so they never
reach a real channel); converting back drops them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import expect_args, fail
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr

PLANAR = "NCHW"
_BLOCKED = re.compile(r"NCHW([1-9][0-9]*)c")


def blocked_layout(block: int) -> str:
    return f"NCHW{block}c"


def layout_block(layout: str) -> int:
    """The channel block of a layout string: 0 for NCHW, b for NCHW{b}c."""
    if layout == PLANAR:
        return 0
    m = _BLOCKED.fullmatch(layout)
    if m is None:
        raise fail(f"unknown layout {layout!r}: expected NCHW or NCHW<b>c")
    return int(m.group(1))


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW -> NCHW{block}c, the last block zero-padded when block does not divide the channels."""
    n, c, h, w = x.shape
    if c % block:
        x = np.concatenate([x, np.zeros((n, block - c % block, h, w), x.dtype)], axis=1)
    return np.ascontiguousarray(x.reshape(n, -1, block, h, w).transpose(0, 1, 3, 4, 2))


def to_planar(x: np.ndarray, channels: int | None = None) -> np.ndarray:
    n, cb, h, w, b = x.shape
    planar = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)
    return np.ascontiguousarray(planar[:, :channels] if channels is not None else planar)


def _blocks(attrs: dict[str, Any]) -> tuple[int, int]:
    src, dst = layout_block(str(attrs.get("src_layout"))), layout_block(str(attrs.get("dst_layout")))
    if (src == 0) == (dst == 0):
        raise fail(
            f"layout_transform converts between NCHW and NCHW<b>c, "
            f"got {attrs.get('src_layout')!r} -> {attrs.get('dst_layout')!r}"
        )
    return src, dst


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("layout_transform", types, 1)
    (x,) = types
    src, dst = _blocks(attrs)
    if dst:
        if x.ndim != 4:
            raise fail(f"layout_transform to NCHW{dst}c needs a 4-D NCHW input, got {list(x.shape)}")
        n, c, h, w = x.shape
        return TensorType((n, -(-c // dst), h, w, dst), x.dtype)
    if x.ndim != 5 or x.shape[4] != src:
        raise fail(
            f"layout_transform from NCHW{src}c needs a 5-D input with inner axis {src}, got {list(x.shape)}"
        )
    n, cb, h, w, b = x.shape
    channels = _channels(attrs, cb * b)
    if not (cb - 1) * b < channels <= cb * b:
        raise fail(f"layout_transform: {channels} channels do not fill {cb} blocks of {b}")
    return TensorType((n, channels, h, w), x.dtype)


def _channels(attrs: dict[str, Any], default: int) -> int:
    value = attrs.get("channels")
    return default if value is None else int(value)


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    _, dst = _blocks(attrs)
    return to_blocked(a[0], dst) if dst else to_planar(a[0], attrs.get("channels"))


def _compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    (x,) = inputs
    src, dst = _blocks(attrs)

    def body(*ix: Expr) -> Expr:
        if dst:
            n, cb, h, w, c = ix
            channel = te.add(te.mul(cb, te.idx(dst)), c)
            if x.shape[1] % dst == 0:
                return x[n, channel, h, w]
            real = x[n, te.minimum(channel, te.idx(x.shape[1] - 1)), h, w]
            return te.select(BinOp("<", channel, te.idx(x.shape[1])), real, te.zero(x.dtype))
        n, c, h, w = ix
        return x[n, BinOp("//", c, te.idx(src)), h, w, BinOp("%", c, te.idx(src))]

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


# layout_transform(x), attrs: src_layout, dst_layout, channels (planar side, when padded)
register(OpDef("layout_transform", Pattern.INJECTIVE, _infer, _reference, compute=_compute))
