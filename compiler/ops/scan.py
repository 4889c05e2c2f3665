"""Scans along one axis: cumsum(x) axis, exclusive, reverse (position ids from attention masks).

Computed as a reduction whose every output point sums the input points before it (or after it,
reversed): quadratic in the axis' length, which for the sequence axes scans run along is cheaper
than a serial loop would be once the other axes run in parallel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import NUMERIC, expect_args, expect_dtype, fail, int_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm


def _cumsum_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("cumsum", types, 1)
    expect_dtype("cumsum", types[0], NUMERIC)
    axis = int_attr(attrs, "axis")
    if not 0 <= axis < types[0].ndim:
        raise fail(f"cumsum axis {axis} is out of range for rank {types[0].ndim}")
    return types[0]


def _cumsum(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    (x,) = a
    axis = attrs["axis"]
    y = np.flip(x, axis) if attrs.get("reverse", 0) else x
    out = np.cumsum(y, axis=axis, dtype=x.dtype)
    if attrs.get("exclusive", 0):
        out = out - y
    return np.ascontiguousarray(np.flip(out, axis) if attrs.get("reverse", 0) else out)


def _cumsum_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    axis = attrs["axis"]
    r = te.reduce_axis(x.shape[axis], "rs")
    # forward: the points j <= i (j < i when exclusive); reversed: j >= i (j > i)
    compare = {(0, 0): "<=", (0, 1): "<", (1, 0): ">=", (1, 1): ">"}[
        (int(attrs.get("reverse", 0)), int(attrs.get("exclusive", 0)))
    ]
    zero = FloatImm(0.0, out.dtype) if out.dtype.startswith("float") else IntImm(0, out.dtype)

    def body(*ix: Expr) -> te.Reduce:
        src = list(ix)
        src[axis] = r.var
        return te.reduce_sum(te.select(BinOp(compare, r.var, ix[axis]), x[src], zero), [r])

    return te.compute(out.shape, body, name, tag="reduce", dtype=out.dtype)


# cumsum(x), attrs: axis (non-negative), exclusive (0/1), reverse (0/1)
register(OpDef("cumsum", Pattern.REDUCTION, _cumsum_infer, _cumsum, compute=_cumsum_compute))
