"""Reductions over a set of axes: reduce_sum, reduce_mean, reduce_max.

Attributes: axes (sorted, unique, non-negative; empty means "reduce nothing"), keepdims (0 | 1).
The frontend resolves ONNX defaults (missing axes = all axes) before building the call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, NUMERIC, expect_args, expect_dtype, fail, int_attr, ints_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import Expr, FloatImm


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(op: str, allowed: Sequence[str]) -> Callable[..., TensorType]:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 1)
        x = types[0]
        expect_dtype(op, x, allowed)
        axes = ints_attr(attrs, "axes")
        keepdims = int_attr(attrs, "keepdims")
        if list(axes) != sorted(set(axes)) or any(not 0 <= a < x.ndim for a in axes):
            raise fail(f"{op} axes {list(axes)} must be sorted, unique and within rank {x.ndim}")
        if keepdims not in (0, 1):
            raise fail(f"{op} keepdims must be 0 or 1, got {keepdims}")
        if any(x.shape[a] == 0 for a in axes) and op != "reduce_sum":
            raise fail(f"{op} over an empty axis of {list(x.shape)}")
        return TensorType(reduced_shape(x.shape, axes, bool(keepdims)), x.dtype)

    return infer


def _reduce_sum(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out: np.ndarray = np.sum(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]), dtype=x.dtype)
    return out


def _reduce_mean(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out = np.mean(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]), dtype=np.float64)
    return np.asarray(out).astype(x.dtype)


def _reduce_max(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out: np.ndarray = np.max(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))
    return out


# ------------------------------------------------------------------ lowering: compute definitions
def _reduce_compute(kind: str) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        axes = tuple(attrs["axes"]) if attrs.get("axes") is not None else tuple(range(x.ndim))
        keep = bool(attrs.get("keepdims", 1))
        raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
        count = 1
        for a in axes:
            count *= x.shape[a]

        def index(*ix: Expr) -> list[Expr]:
            src: list[Expr] = []
            k = 0
            for a in range(x.ndim):
                if a in raxes:
                    src.append(raxes[a].var)
                    if keep:
                        k += 1
                else:
                    src.append(ix[k])
                    k += 1
            return src

        if kind == "max":
            return te.compute(
                out.shape,
                lambda *ix: te.reduce_max(x[index(*ix)], list(raxes.values())),
                name,
                tag="reduce",
                dtype=out.dtype,
            )
        s = te.compute(
            out.shape,
            lambda *ix: te.reduce_sum(x[index(*ix)], list(raxes.values())),
            name if kind == "sum" else f"{name}_sum",
            tag="reduce",
            dtype=out.dtype,
        )
        if kind == "sum":
            return s
        return te.compute(
            out.shape,
            lambda *ix: te.div(s[ix], FloatImm(float(count), out.dtype)),
            name,
            tag="elemwise",
            dtype=out.dtype,
        )

    return compute


# reduce_sum(x), attrs: axes, keepdims
register(
    OpDef(
        "reduce_sum",
        Pattern.REDUCTION,
        _reduce_infer("reduce_sum", NUMERIC),
        _reduce_sum,
        compute=_reduce_compute("sum"),
    )
)
# reduce_mean(x), attrs: axes, keepdims
register(
    OpDef(
        "reduce_mean",
        Pattern.REDUCTION,
        _reduce_infer("reduce_mean", (FLOAT,)),
        _reduce_mean,
        compute=_reduce_compute("mean"),
    )
)
# reduce_max(x), attrs: axes, keepdims
register(
    OpDef(
        "reduce_max",
        Pattern.REDUCTION,
        _reduce_infer("reduce_max", NUMERIC),
        _reduce_max,
        compute=_reduce_compute("max"),
    )
)
