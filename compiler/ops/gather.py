"""Gathers by index tensors beyond a single axis: the indexing transformer exports emit.

gather_nd(data, indices) batch_dims: indices [..., k] pick k-tuples of coordinates into data after
its first batch_dims dims; the output is indices.shape[:-1] + data.shape[batch_dims + k:].
gather_elements(data, indices) axis: out has the shape of indices, and out[i] = data[i with its
`axis` coordinate replaced by indices[i]].

Negative indices count from the end, as ONNX says; indices are clamped into range in compiled code
(an index out of range has no defined result), the numpy reference raises on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import INDEX_DTYPES, expect_args, expect_dtype, fail, int_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr


def _index(raw: Expr, dim: int) -> Expr:
    """A runtime index as int64, negative ones counted from the end, clamped into [0, dim)."""
    value = te.cast("int64", raw)
    normalized = te.select(BinOp("<", value, te.idx(0)), te.add(value, te.idx(dim)), value)
    return te.clamp(normalized, dim - 1)


def _check_range(indices: np.ndarray, dims: Sequence[int], op: str) -> np.ndarray:
    """Indices with negative ones counted from the end; IndexError when one is out of range."""
    bounds = np.asarray(dims, dtype=np.int64).reshape((1,) * (indices.ndim - 1) + (len(dims),))
    if indices.size and ((indices < -bounds).any() or (indices >= bounds).any()):
        raise IndexError(f"{op} index out of range for dims {list(dims)}")
    return np.where(indices < 0, indices + bounds, indices)


# ---- gather_nd ----------------------------------------------------------------------------------------


def _gather_nd_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("gather_nd", types, 2)
    data, indices = types
    expect_dtype("gather_nd", indices, INDEX_DTYPES, "indices")
    b = int_attr(attrs, "batch_dims")
    if indices.ndim < 1 or not 0 <= b < min(data.ndim, indices.ndim):
        raise fail(
            f"gather_nd batch_dims {b} does not fit data rank {data.ndim}, indices rank {indices.ndim}"
        )
    k = indices.shape[-1]
    if k < 1 or b + k > data.ndim:
        raise fail(f"gather_nd indices pick {k} coordinates of data rank {data.ndim} after {b} batch dims")
    if data.shape[:b] != indices.shape[:b]:
        raise fail(
            f"gather_nd batch dims differ: data {list(data.shape[:b])}, indices {list(indices.shape[:b])}"
        )
    return TensorType((*indices.shape[:-1], *data.shape[b + k :]), data.dtype)


def _gather_nd(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    data, indices = a
    b = attrs["batch_dims"]
    k = indices.shape[-1]
    idx = _check_range(indices.astype(np.int64), data.shape[b : b + k], "gather_nd")
    batch = int(np.prod(data.shape[:b], dtype=np.int64))
    flat_data = data.reshape((batch, *data.shape[b:]))
    flat_idx = idx.reshape((batch, -1, k))
    picked = np.stack([flat_data[n][tuple(flat_idx[n].T)] for n in range(batch)])
    return picked.reshape((*indices.shape[:-1], *data.shape[b + k :]))


def _gather_nd_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    data, indices = inputs
    b = attrs["batch_dims"]
    q = indices.ndim
    k = indices.shape[-1]

    def body(*ix: Expr) -> Expr:
        lead = list(ix[: q - 1])  # the output's coordinates into indices (batch dims first)
        coords = [_index(indices[[*lead, te.idx(t)]], data.shape[b + t]) for t in range(k)]
        return data[[*ix[:b], *coords, *ix[q - 1 :]]]

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


# ---- gather_elements ------------------------------------------------------------------------------------


def _gather_elements_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("gather_elements", types, 2)
    data, indices = types
    expect_dtype("gather_elements", indices, INDEX_DTYPES, "indices")
    axis = int_attr(attrs, "axis")
    if data.ndim != indices.ndim or not 0 <= axis < data.ndim:
        raise fail(f"gather_elements: data rank {data.ndim}, indices rank {indices.ndim}, axis {axis}")
    if any(i > d for n, (i, d) in enumerate(zip(indices.shape, data.shape, strict=True)) if n != axis):
        raise fail(f"gather_elements indices {list(indices.shape)} exceed data {list(data.shape)}")
    return TensorType(indices.shape, data.dtype)


def _gather_elements(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    data, indices = a
    axis = attrs["axis"]
    dim = data.shape[axis]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise IndexError(f"gather_elements index out of range [{-dim}, {dim - 1}]")
    # the other coordinates are the output's own: only the part of data that indices spans is read
    window = tuple(slice(None) if n == axis else slice(0, i) for n, i in enumerate(indices.shape))
    normalized = np.where(indices < 0, indices + dim, indices).astype(np.int64)
    return np.take_along_axis(data[window], normalized, axis)


def _gather_elements_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    data, indices = inputs
    axis = attrs["axis"]

    def body(*ix: Expr) -> Expr:
        src = list(ix)
        src[axis] = _index(indices[list(ix)], data.shape[axis])
        return data[src]

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


# gather_nd(data, indices), attrs: batch_dims
register(OpDef("gather_nd", Pattern.INJECTIVE, _gather_nd_infer, _gather_nd, compute=_gather_nd_compute))
# gather_elements(data, indices), attrs: axis (non-negative)
register(
    OpDef(
        "gather_elements",
        Pattern.INJECTIVE,
        _gather_elements_infer,
        _gather_elements,
        compute=_gather_elements_compute,
    )
)
