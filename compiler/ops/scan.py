"""Scans along one axis: cumsum(x) and cumprod(x), attrs axis, exclusive, reverse (position ids from
attention masks, running products).

Computed as a reduction whose every output point combines the input points before it (or after it,
reversed): quadratic in the axis' length, which for the sequence axes scans run along is cheaper
than a serial loop would be once the other axes run in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import NUMERIC, expect_args, expect_dtype, fail, int_attr
from compiler.ops.registry import OpDef, Pattern, ReferenceFn, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm, IterVar


def _scan_infer(op: str) -> Callable[[Sequence[TensorType], dict[str, Any]], TensorType]:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 1)
        expect_dtype(op, types[0], NUMERIC)
        axis = int_attr(attrs, "axis")
        if not 0 <= axis < types[0].ndim:
            raise fail(f"{op} axis {axis} is out of range for rank {types[0].ndim}")
        return types[0]

    return infer


def _scan_reference(accumulate: Callable[..., np.ndarray], identity: int) -> ReferenceFn:
    """numpy's running sum or product along the axis; exclusive shifts the input by one point (the
    first becomes the identity), so that no result is recovered by subtracting or dividing."""

    def reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        (x,) = a
        axis = attrs["axis"]
        y = np.flip(x, axis) if attrs.get("reverse", 0) else x
        if attrs.get("exclusive", 0) and y.shape[axis]:
            first = np.full_like(np.take(y, [0], axis=axis), identity)
            y = np.concatenate([first, np.delete(y, -1, axis=axis)], axis=axis)
        with np.errstate(over="ignore", invalid="ignore"):
            out = accumulate(y, axis=axis, dtype=x.dtype)
        return np.ascontiguousarray(np.flip(out, axis) if attrs.get("reverse", 0) else out)

    return reference


def _scan_compute(
    combine: Callable[[Expr, Sequence[IterVar]], te.Reduce], identity: int
) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        axis = attrs["axis"]
        r = te.reduce_axis(x.shape[axis], "rs")
        # forward: the points j <= i (j < i when exclusive); reversed: j >= i (j > i)
        compare = {(0, 0): "<=", (0, 1): "<", (1, 0): ">=", (1, 1): ">"}[
            (int(attrs.get("reverse", 0)), int(attrs.get("exclusive", 0)))
        ]
        neutral = (
            FloatImm(float(identity), out.dtype)
            if out.dtype.startswith("float")
            else IntImm(identity, out.dtype)
        )

        def body(*ix: Expr) -> te.Reduce:
            src = list(ix)
            src[axis] = r.var
            return combine(te.select(BinOp(compare, r.var, ix[axis]), x[src], neutral), [r])

        return te.compute(out.shape, body, name, tag="reduce", dtype=out.dtype)

    return compute


# cumsum(x), attrs: axis (non-negative), exclusive (0/1), reverse (0/1)
register(
    OpDef(
        "cumsum",
        Pattern.REDUCTION,
        _scan_infer("cumsum"),
        _scan_reference(np.cumsum, 0),
        compute=_scan_compute(te.reduce_sum, 0),
    )
)
# cumprod(x), attrs: as cumsum's
register(
    OpDef(
        "cumprod",
        Pattern.REDUCTION,
        _scan_infer("cumprod"),
        _scan_reference(np.cumprod, 1),
        compute=_scan_compute(te.reduce_prod, 1),
    )
)
