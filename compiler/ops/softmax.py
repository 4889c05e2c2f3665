"""softmax and log_softmax along one axis (attr axis, non-negative), ONNX opset >= 13 semantics."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, expect_args, expect_dtype, fail, int_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, IntImm


def _infer(op: str) -> Callable[..., TensorType]:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 1)
        expect_dtype(op, types[0], (FLOAT,))
        axis = int_attr(attrs, "axis")
        if not 0 <= axis < types[0].ndim:
            raise fail(f"{op} axis {axis} is out of range for rank {types[0].ndim}")
        return types[0]

    return infer


def _softmax(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0].astype(np.float64)
    e = np.exp(x - x.max(axis=attrs["axis"], keepdims=True))
    out: np.ndarray = (e / e.sum(axis=attrs["axis"], keepdims=True)).astype(a[0].dtype)
    return out


def _log_softmax(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0].astype(np.float64)
    shifted = x - x.max(axis=attrs["axis"], keepdims=True)
    total = np.exp(shifted).sum(axis=attrs["axis"], keepdims=True)
    out: np.ndarray = (shifted - np.log(total)).astype(a[0].dtype)
    return out


# ------------------------------------------------------------------ lowering: compute definitions
# the smallest normal float32, 2^-126
_FLT_MIN = float(np.finfo(np.float32).tiny)


def _row_exp(v: Expr, n: int) -> Expr:
    """e^v for v = x - max(row) <= 0, flushed to 0 below e^floor = n * 2^-126: such a term changes
    the row's sum (at least 1, at most n) by less than it can round, and its output share (e^v / sum,
    at least e^v / n) would be subnormal. Computing subnormal floats takes a microcode assist on
    many x86 cores, a hundred cycles or more per value: a row with masked entries (Swin's shifted
    windows add -100 before the softmax) then ran several times slower than any other. NaN passes."""
    floor = te.f32(math.log(_FLT_MIN * n))
    below = BinOp("<", v, floor)
    return te.select(below, te.f32(0.0), te.call("exp", te.select(below, floor, v)))


def _softmax_compute(log: bool) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        axis = attrs["axis"]
        n = x.shape[axis]
        shape = list(x.shape)
        shape[axis] = 1

        def along(ix: Sequence[Expr], v: Expr) -> list[Expr]:
            out_ix = list(ix)
            out_ix[axis] = v
            return out_ix

        r1 = te.reduce_axis(n, "r")
        mx = te.compute(
            shape, lambda *ix: te.reduce_max(x[along(ix, r1.var)], [r1]), f"{name}_max", tag="reduce"
        )
        ex = te.compute(
            x.shape,
            lambda *ix: _row_exp(te.sub(x[ix], mx[along(ix, IntImm(0))]), n),
            f"{name}_exp",
            tag="exp",
        )
        r2 = te.reduce_axis(n, "r")
        sm = te.compute(
            shape, lambda *ix: te.reduce_sum(ex[along(ix, r2.var)], [r2]), f"{name}_sum", tag="reduce"
        )
        if log:
            return te.compute(
                x.shape,
                lambda *ix: te.sub(
                    te.sub(x[ix], mx[along(ix, IntImm(0))]), te.call("log", sm[along(ix, IntImm(0))])
                ),
                name,
                tag="elemwise",
                dtype=out.dtype,
            )
        # one reciprocal per row (hoisted out of the row's loop), then a multiply per element: a
        # vector division costs several multiplies' throughput
        return te.compute(
            x.shape,
            lambda *ix: te.mul(ex[ix], te.div(te.f32(1.0), sm[along(ix, IntImm(0))])),
            name,
            tag="elemwise",
            dtype=out.dtype,
        )

    return compute


# softmax(x), attrs: axis
register(OpDef("softmax", Pattern.REDUCTION, _infer("softmax"), _softmax, compute=_softmax_compute(False)))
# log_softmax(x), attrs: axis
register(
    OpDef(
        "log_softmax", Pattern.REDUCTION, _infer("log_softmax"), _log_softmax, compute=_softmax_compute(True)
    )
)
