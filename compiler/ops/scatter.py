"""Scatters: data with some of its elements replaced (or combined) by updates at runtime indices.

scatter_nd(data, indices, updates) reduction: indices [U..., k] name k-tuples of coordinates into
data; updates [U..., data.shape[k:]] hold what goes there. scatter_elements(data, indices, updates)
axis, reduction: indices and updates share a shape; update i goes to i with its `axis` coordinate
replaced by indices[i]. reduction: none (replace; ONNX requires the targets to be distinct), add,
max or min.

Each output element is computed where it is (a compute definition has no scattered writes): it
reduces over the updates that target it — a predicated reduction, `hits` counting them and `acc`
combining them — then keeps data's value where nothing hit. Quadratic in the number of updates,
which in the models that scatter (masks, cache positions) is small.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import INDEX_DTYPES, NUMERIC, expect_args, expect_dtype, fail, int_attr, str_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm, IterVar

REDUCTIONS = ("none", "add", "max", "min")


def _zero(dtype: str) -> Expr:
    return FloatImm(0.0, dtype) if dtype.startswith("float") else IntImm(0, dtype)


def _normalized(raw: Expr, dim: int) -> Expr:
    value = te.cast("int64", raw)
    return te.select(BinOp("<", value, te.idx(0)), te.add(value, te.idx(dim)), value)


def _combine(
    data: te.Tensor,
    out: TensorType,
    name: str,
    reduction: str,
    axes: list[IterVar],
    match: Callable[[Sequence[Expr]], Expr],
    update: Callable[[Sequence[Expr]], Expr],
) -> te.Tensor:
    """out[p] = data[p] combined with every update u whose target is p (`match(p, u)`)."""
    hits = te.compute(
        out.shape,
        lambda *p: te.reduce_sum(te.select(match(p), te.idx(1), te.idx(0)), axes),
        f"{name}_hits",
        tag="reduce",
        dtype="int64",
    )
    if reduction in ("none", "add"):
        acc = te.compute(
            out.shape,
            lambda *p: te.reduce_sum(te.select(match(p), update(p), _zero(out.dtype)), axes),
            f"{name}_acc",
            tag="reduce",
            dtype=out.dtype,
        )
    else:
        pick = te.reduce_max if reduction == "max" else te.reduce_min
        acc = te.compute(
            out.shape,
            lambda *p: pick(te.select(match(p), update(p), _extreme(out.dtype, reduction)), axes),
            f"{name}_acc",
            tag="reduce",
            dtype=out.dtype,
        )

    def body(*p: Expr) -> Expr:
        hit = BinOp(">", hits[p], te.idx(0))
        if reduction == "none":
            return te.select(hit, acc[p], data[p])
        if reduction == "add":
            return te.add(data[p], acc[p])
        combined = te.maximum(data[p], acc[p]) if reduction == "max" else te.minimum(data[p], acc[p])
        return te.select(hit, combined, data[p])

    return te.compute(out.shape, body, name, tag="elemwise", dtype=out.dtype)


def _extreme(dtype: str, reduction: str) -> Expr:
    sign = -1 if reduction == "max" else 1
    if dtype.startswith("float"):
        return FloatImm(sign * float("inf"), dtype)
    info = np.iinfo(np.dtype(dtype))
    return IntImm(int(info.min if sign < 0 else info.max), dtype)


def _reduction(attrs: dict[str, Any], op: str) -> str:
    return str_attr(attrs, "reduction", REDUCTIONS)


def _apply(out: np.ndarray, target: tuple[np.ndarray, ...], values: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[target] = values
    elif reduction == "add":
        np.add.at(out, target, values)
    elif reduction == "max":
        np.maximum.at(out, target, values)
    else:
        np.minimum.at(out, target, values)


# ---- scatter_nd ------------------------------------------------------------------------------------------


def _scatter_nd_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("scatter_nd", types, 3)
    data, indices, updates = types
    expect_dtype("scatter_nd", data, NUMERIC)
    expect_dtype("scatter_nd", indices, INDEX_DTYPES, "indices")
    _reduction(attrs, "scatter_nd")
    k = indices.shape[-1] if indices.ndim else 0
    if indices.ndim < 1 or not 1 <= k <= data.ndim:
        raise fail(f"scatter_nd indices {list(indices.shape)} do not fit data of rank {data.ndim}")
    want = (*indices.shape[:-1], *data.shape[k:])
    if updates.shape != want or updates.dtype != data.dtype:
        raise fail(
            f"scatter_nd updates must be {data.dtype}{list(want)}, got {updates.dtype}{list(updates.shape)}"
        )
    return data


def _scatter_nd(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    data, indices, updates = a
    k = indices.shape[-1]
    dims = np.asarray(data.shape[:k], dtype=np.int64)
    idx = indices.reshape(-1, k).astype(np.int64)
    if idx.size and ((idx < -dims).any() or (idx >= dims).any()):
        raise IndexError(f"scatter_nd index out of range for dims {list(data.shape[:k])}")
    idx = np.where(idx < 0, idx + dims, idx)
    out = data.copy()
    _apply(out, tuple(idx.T), updates.reshape((-1, *data.shape[k:])), attrs["reduction"])
    return out


def _scatter_nd_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    data, indices, updates = inputs
    k = indices.shape[-1]
    u_axes = [te.reduce_axis(n, f"u{d}") for d, n in enumerate(indices.shape[:-1])]
    u = [ax.var for ax in u_axes]

    def match(p: Sequence[Expr]) -> Expr:
        conds = [BinOp("==", _normalized(indices[[*u, te.idx(t)]], data.shape[t]), p[t]) for t in range(k)]
        cond = te.all_of(conds)
        assert cond is not None
        return cond

    def update(p: Sequence[Expr]) -> Expr:
        return updates[[*u, *p[k:]]]

    return _combine(data, out, name, attrs["reduction"], u_axes, match, update)


# ---- scatter_elements ------------------------------------------------------------------------------------


def _scatter_elements_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("scatter_elements", types, 3)
    data, indices, updates = types
    expect_dtype("scatter_elements", data, NUMERIC)
    expect_dtype("scatter_elements", indices, INDEX_DTYPES, "indices")
    _reduction(attrs, "scatter_elements")
    axis = int_attr(attrs, "axis")
    if indices.shape != updates.shape or indices.ndim != data.ndim or not 0 <= axis < data.ndim:
        raise fail(
            f"scatter_elements: data {list(data.shape)}, indices {list(indices.shape)}, "
            f"updates {list(updates.shape)}, axis {axis}"
        )
    if any(i > d for n, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if n != axis):
        raise fail(f"scatter_elements indices {list(indices.shape)} exceed data {list(data.shape)}")
    return data


def _scatter_elements(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    data, indices, updates = a
    axis = attrs["axis"]
    dim = data.shape[axis]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise IndexError(f"scatter_elements index out of range [{-dim}, {dim - 1}]")
    target: list[np.ndarray] = list(np.indices(indices.shape, sparse=False))
    target[axis] = np.where(indices < 0, indices + dim, indices)
    out = data.copy()
    _apply(out, tuple(target), updates, attrs["reduction"])
    return out


def _scatter_elements_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    data, indices, updates = inputs
    axis = attrs["axis"]
    j_axis = te.reduce_axis(indices.shape[axis], "j")

    def source(p: Sequence[Expr]) -> list[Expr]:
        src = list(p)
        src[axis] = j_axis.var
        return src

    def inside(p: Sequence[Expr]) -> Expr:
        """p's other coordinates fall inside indices (which may be smaller than data there)."""
        conds = [
            BinOp("<", p[n], te.idx(d)) for n, d in enumerate(indices.shape) if n != axis and d < out.shape[n]
        ]
        return te.all_of(conds) or BinOp("==", te.idx(0), te.idx(0))

    def clamped(p: Sequence[Expr]) -> list[Expr]:
        src = source(p)
        return [c if n == axis else te.clamp(c, indices.shape[n] - 1) for n, c in enumerate(src)]

    def match(p: Sequence[Expr]) -> Expr:
        hit = BinOp("==", _normalized(indices[clamped(p)], data.shape[axis]), p[axis])
        return BinOp("and", inside(p), hit)

    def update(p: Sequence[Expr]) -> Expr:
        return updates[clamped(p)]

    return _combine(data, out, name, attrs["reduction"], [j_axis], match, update)


# scatter_nd(data, indices, updates), attrs: reduction (none | add | max | min)
register(OpDef("scatter_nd", Pattern.OPAQUE, _scatter_nd_infer, _scatter_nd, compute=_scatter_nd_compute))
# scatter_elements(data, indices, updates), attrs: axis (non-negative), reduction
register(
    OpDef(
        "scatter_elements",
        Pattern.OPAQUE,
        _scatter_elements_infer,
        _scatter_elements,
        compute=_scatter_elements_compute,
    )
)
