"""matmul_u8s8(a, w): an 8-bit integer matmul, exact int32 sums.

a is uint8 [..., M, K] (K a multiple of 4), or the same 8-bit values widened to int16 (K even); w is
a constant int8 weight [K, N] packed four rows to an int32 for a uint8 input, two (as int16 halves)
for an int16 one, [K/4 or K/2, N] (pack_matmul_u8s8); the output is int32 [..., M, N]. Optional
attribute pairs_fit, as conv2d_nchwc_u8s8's.

Why: the quantized dense layers of a QDQ model (a classifier's head, a transformer's projections)
multiply 8-bit integers; VNNI sums four u8 x s8 products per int32 lane in one instruction (without
it, conv2d_nchwc_u8s8's steps). The loop nest is matmul's, with a step of four (two) rows of w in
place of one, so matmul's register-tiled
schedule and its tuning decisions apply unchanged (compiler/graph/passes/quantized_kernels.py makes
these matmuls and their float epilogue).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import expect_args, expect_dtype, fail
from compiler.ops.conv2d_int8 import DOT, PAIRS_FIT, dot_width, pairs_fit_attr
from compiler.ops.matmul import _matmul_schedule
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import DOT_WIDTH, Expr, int_dot

OP = "matmul_u8s8"


def pack_matmul_u8s8(w: np.ndarray, width: int = DOT) -> np.ndarray:
    """int8 [K, N] -> int32 [K/width, N] (K padded with zero rows to a multiple of `width`): each
    int32 holds rows width*q .. width*q + width - 1 of one column, the first lowest (four bytes for a
    uint8 input, two int16 halves for an int16 one)."""
    if w.dtype != np.int8 or w.ndim != 2 or width not in DOT_WIDTH.values():
        raise ValueError("pack_matmul_u8s8 takes a 2-D int8 weight")
    k, n = w.shape
    padded = np.pad(w, [(0, -k % width), (0, 0)])
    groups = padded.reshape(-1, width, n).transpose(0, 2, 1).astype(f"<i{4 // width}")
    return np.ascontiguousarray(groups).view("<i4").reshape(-1, n)


def unpack_matmul_u8s8(w: np.ndarray, width: int = DOT) -> np.ndarray:
    """pack_matmul_u8s8's inverse: int8 [K, N] (K a multiple of `width`)."""
    groups, n = w.shape
    parts = np.ascontiguousarray(w).astype("<i4").view(f"<i{4 // width}").reshape(groups, n, width)
    return np.ascontiguousarray(parts.transpose(0, 2, 1).reshape(groups * width, n).astype(np.int8))


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args(OP, types, 2)
    a, w = types
    expect_dtype(OP, a, tuple(DOT_WIDTH), "input")
    expect_dtype(OP, w, ("int32",), "weight")
    width = dot_width(a)
    if a.ndim < 2 or w.ndim != 2 or a.shape[-1] != width * w.shape[0]:
        raise fail(
            f"{OP}: {a.dtype} input {list(a.shape)} and packed weight {list(w.shape)} do not match (the "
            f"input's last axis must be {width} times the weight's packed rows)"
        )
    if pairs_fit_attr(attrs) and a.dtype != "uint8":
        raise fail(f"{OP}'s {PAIRS_FIT} is for uint8 inputs (vpmaddubsw's pairs), got {a.dtype}")
    return TensorType((*a.shape[:-2], a.shape[-2], w.shape[1]), "int32")


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    """The exact sums, in float64 (exact for these products and any realistic reduction)."""
    x, w = a
    weight = unpack_matmul_u8s8(w, DOT_WIDTH[str(x.dtype)]).astype(np.float64)
    out: np.ndarray = np.matmul(x.astype(np.float64), weight)
    return out.astype(np.int32)


def _compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    a, w = inputs
    nb = len(out.shape) - 2
    width = DOT_WIDTH[a.dtype]
    q = te.reduce_axis(w.shape[0], "k")

    def body(*ix: Expr) -> te.Reduce:
        batch, i, j = ix[:nb], ix[nb], ix[nb + 1]
        lead = [*te.broadcast_indices(out.shape[:nb], a.shape[:-2], batch), i]
        lanes = [a[[*lead, te.add(te.mul(q.var, te.idx(width)), te.idx(k))]] for k in range(width)]
        return te.reduce_sum(int_dot(lanes, w[q.var, j], pairs_fit_attr(attrs)), [q])

    names = [f"b{d}" for d in range(nb)] + ["i", "j"]
    # matmul's iteration space and names: its schedule applies as is
    return te.compute(out.shape, body, name, tag="anchor", axis_names=names, dtype="int32")


# matmul_u8s8(a uint8 or int16, packed int8 weight), attrs: pairs_fit (optional)
register(OpDef(OP, Pattern.ANCHOR, _infer, _reference, compute=_compute, schedule=_matmul_schedule))
