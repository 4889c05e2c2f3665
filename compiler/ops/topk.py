"""TopK with a constant k as two ops, one per ONNX output: topk_values(x) and topk_indices(x), attrs
k, axis, largest (0/1). Results are sorted (ONNX's default) and ties go to the lower index.

Computed by ranking: an element's rank along the axis is how many elements come before it in the
order (greater, or equal with a lower index, for largest), and output r is the element of rank r.
Quadratic in the axis' length, with no data-dependent control flow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import NUMERIC, expect_args, expect_dtype, fail, int_attr
from compiler.ops.registry import InferFn, OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm


def _infer(op: str, indices: bool) -> InferFn:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 1)
        (x,) = types
        expect_dtype(op, x, NUMERIC)
        axis, k = int_attr(attrs, "axis"), int_attr(attrs, "k")
        if not 0 <= axis < x.ndim or not 0 <= k <= x.shape[axis]:
            raise fail(f"{op}: k={k} along axis {axis} of {list(x.shape)}")
        shape = list(x.shape)
        shape[axis] = k
        return TensorType(tuple(shape), "int64" if indices else x.dtype)

    return infer


def _order(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Positions along the axis in output order (stable: ties keep the lower index first)."""
    key = -x if attrs["largest"] else x
    return np.argsort(key, axis=attrs["axis"], kind="stable").take(np.arange(attrs["k"]), axis=attrs["axis"])


def _values(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    (x,) = a
    return np.take_along_axis(x, _order(x, attrs), attrs["axis"])


def _indices(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return _order(a[0], attrs).astype(np.int64)


def _compute(indices: bool) -> Callable[[Sequence[te.Tensor], dict[str, Any], TensorType, str], te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        axis = attrs["axis"]
        n = x.shape[axis]
        before = ">" if attrs["largest"] else "<"
        m = te.reduce_axis(n, "m")

        def at(p: Sequence[Expr], position: Expr) -> list[Expr]:
            src = list(p)
            src[axis] = position
            return src

        def precedes(p: Sequence[Expr]) -> Expr:  # element m comes before element p[axis]
            xm, xj = x[at(p, m.var)], x[list(p)]
            tie = BinOp("and", BinOp("==", xm, xj), BinOp("<", m.var, p[axis]))
            return BinOp("or", BinOp(before, xm, xj), tie)

        rank = te.compute(
            x.shape,
            lambda *p: te.reduce_sum(te.select(precedes(p), te.idx(1), te.idx(0)), [m]),
            f"{name}_rank",
            tag="reduce",
            dtype="int64",
        )
        j = te.reduce_axis(n, "j")
        zero: Expr = (
            IntImm(0, "int64")
            if indices
            else (FloatImm(0.0, x.dtype) if x.dtype.startswith("float") else IntImm(0, x.dtype))
        )

        def pick(*r: Expr) -> te.Reduce:
            chosen = BinOp("==", rank[at(r, j.var)], r[axis])
            value = te.cast("int64", j.var) if indices else x[at(r, j.var)]
            return te.reduce_sum(te.select(chosen, value, zero), [j])

        return te.compute(out.shape, pick, name, tag="reduce", dtype=out.dtype)

    return compute


# topk_values(x) / topk_indices(x), attrs: k, axis (non-negative), largest (0/1); sorted
register(OpDef("topk_values", Pattern.OPAQUE, _infer("topk_values", False), _values, compute=_compute(False)))
register(
    OpDef("topk_indices", Pattern.OPAQUE, _infer("topk_indices", True), _indices, compute=_compute(True))
)
