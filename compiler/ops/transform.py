"""Injective data-movement ops; every attribute is resolved to static values by the frontend.

reshape(x) shape; transpose(x) perm; concat(*xs) axis; slice(x) starts, ends, axes, steps (one entry
per axis, clamped; a negative step may end at -1 meaning 'through index 0'); gather(data, indices)
axis; expand(x) shape (the full output shape); pad(x) pads (ONNX order: all begins then all ends,
non-negative), mode (constant | reflect | edge), value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import (
    INDEX_DTYPES,
    broadcast_shapes,
    expect_args,
    expect_dtype,
    expect_same_dtype,
    fail,
    float_attr,
    int_attr,
    ints_attr,
    non_negative,
    slice_len,
    str_attr,
)
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm


def _reshape_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("reshape", types, 1)
    shape = ints_attr(attrs, "shape")
    non_negative("shape", shape)
    if int(np.prod(shape, dtype=np.int64)) != types[0].size:
        raise fail(f"reshape cannot turn {list(types[0].shape)} into {list(shape)}")
    return TensorType(shape, types[0].dtype)


def _reshape(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return a[0].reshape(attrs["shape"])


def _transpose_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("transpose", types, 1)
    perm = ints_attr(attrs, "perm")
    if sorted(perm) != list(range(types[0].ndim)):
        raise fail(f"transpose perm {list(perm)} is not a permutation of rank {types[0].ndim}")
    return TensorType(tuple(types[0].shape[p] for p in perm), types[0].dtype)


def _transpose(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.array(np.transpose(a[0], attrs["perm"]), order="C")  # (ascontiguousarray: 0-d -> 1-d)


def _concat_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    if not types:
        raise fail("concat needs at least one argument")
    dtype = expect_same_dtype("concat", types)
    axis = int_attr(attrs, "axis")
    rank = types[0].ndim
    if not 0 <= axis < rank:
        raise fail(f"concat axis {axis} is out of range for rank {rank}")
    for t in types:
        if t.ndim != rank or any(
            d != e for i, (d, e) in enumerate(zip(t.shape, types[0].shape, strict=True)) if i != axis
        ):
            raise fail(f"concat shapes {[list(t.shape) for t in types]} differ off axis {axis}")
    shape = list(types[0].shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return TensorType(tuple(shape), dtype)


def _concat(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.concatenate(list(a), axis=attrs["axis"])


def _slice_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("slice", types, 1)
    x = types[0]
    starts, ends, steps = (ints_attr(attrs, k, x.ndim) for k in ("starts", "ends", "steps"))
    if ints_attr(attrs, "axes") != tuple(range(x.ndim)):
        raise fail(f"slice axes must list every axis 0..{x.ndim - 1}")
    shape = []
    for dim, start, end, step in zip(x.shape, starts, ends, steps, strict=True):
        if step == 0:
            raise fail("slice step must not be 0")
        if step > 0:
            ok = 0 <= start <= dim and 0 <= end <= dim
        else:
            ok = min(0, dim - 1) <= start <= dim - 1 and -1 <= end <= dim - 1
        if not ok:
            raise fail(f"slice [{start}:{end}:{step}] is not resolved and clamped for a dim of {dim}")
        shape.append(slice_len(start, end, step))
    return TensorType(tuple(shape), x.dtype)


def _slice(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    index = tuple(
        slice(s, e if e >= 0 else None, st)
        for s, e, st in zip(attrs["starts"], attrs["ends"], attrs["steps"], strict=True)
    )
    return np.array(a[0][index], order="C")


def contiguous_slice_offset(shape: Sequence[int], attrs: dict[str, Any]) -> int | None:
    """The element offset in x of a slice that is one contiguous run of x's row-major elements (so
    that it can be a view of x: leading axes taken at one index, then one axis taken as a range with
    step 1, the rest whole); None for any other slice."""
    starts, ends, steps = (ints_attr(attrs, k, len(shape)) for k in ("starts", "ends", "steps"))
    offset, stride, partial = 0, 1, False
    for dim, start, end, step in reversed(list(zip(shape, starts, ends, steps, strict=True))):
        n = slice_len(start, end, step)
        if partial and n != 1:
            return None  # an axis before a partial one must be a single index
        if n != 1 and step != 1:
            return None
        offset += start * stride
        partial = partial or n != dim
        stride *= dim
    return offset


def _gather_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("gather", types, 2)
    data, indices = types
    expect_dtype("gather", indices, INDEX_DTYPES, "indices")
    axis = int_attr(attrs, "axis")
    if not 0 <= axis < data.ndim:
        raise fail(f"gather axis {axis} is out of range for rank {data.ndim}")
    return TensorType((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]), data.dtype)


def _gather(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    data, indices = a
    axis = attrs["axis"]
    dim = data.shape[axis]
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise IndexError(f"gather index out of range [{-dim}, {dim - 1}]")
    return np.take(data, np.where(indices < 0, indices + dim, indices), axis=axis)


def _expand_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("expand", types, 1)
    shape = ints_attr(attrs, "shape")
    if len(shape) < types[0].ndim or broadcast_shapes(types[0].shape, shape) != shape:
        raise fail(f"expand cannot broadcast {list(types[0].shape)} to {list(shape)}")
    return TensorType(shape, types[0].dtype)


def _expand(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    return np.array(np.broadcast_to(a[0], attrs["shape"]), order="C")


def _pad_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("pad", types, 1)
    x = types[0]
    pads = ints_attr(attrs, "pads", 2 * x.ndim)
    non_negative("pads", pads)
    mode = str_attr(attrs, "mode", ("constant", "reflect", "edge"))
    float_attr(attrs, "value")
    begin, end = pads[: x.ndim], pads[x.ndim :]
    for dim, b, e in zip(x.shape, begin, end, strict=True):
        if mode == "reflect" and max(b, e) > dim - 1:
            raise fail(f"reflect pad {max(b, e)} needs a dim larger than {dim}")
        if mode == "edge" and max(b, e) > 0 and dim == 0:
            raise fail("edge pad of an empty dim")
    return TensorType(tuple(d + b + e for d, b, e in zip(x.shape, begin, end, strict=True)), x.dtype)


def _pad(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    pads = attrs["pads"]
    width = list(zip(pads[: x.ndim], pads[x.ndim :], strict=True))
    if attrs["mode"] == "constant":
        return np.pad(x, width, mode="constant", constant_values=np.array(attrs["value"]).astype(x.dtype))
    return np.pad(x, width, mode=attrs["mode"])


# ------------------------------------------------------------------ lowering: compute definitions
def _reshape_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    return te.compute(
        out.shape,
        lambda *ix: x[te.unflatten_index(x.shape, te.flat_index(out.shape, ix))],
        name,
        tag="injective",
        dtype=out.dtype,
    )


def _transpose_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    perm = list(attrs["perm"])

    def body(*ix: Expr) -> Expr:
        src: list[Expr] = [IntImm(0)] * x.ndim
        for k, p in enumerate(perm):
            src[p] = ix[k]
        return x[src]

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


def _concat_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    axis = attrs["axis"]

    def body(*ix: Expr) -> Expr:
        starts = []
        s = 0
        for t in inputs:
            starts.append(s)
            s += t.shape[axis]
        value: Expr | None = None
        for t, st in reversed(list(zip(inputs, starts, strict=True))):
            src = list(ix)
            src[axis] = te.clamp(te.sub(ix[axis], te.idx(st)), t.shape[axis] - 1)
            v = t[src]
            value = (
                v if value is None else te.select(BinOp("<", ix[axis], te.idx(st + t.shape[axis])), v, value)
            )
        assert value is not None
        return value

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


def _slice_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    starts, axes, steps = list(attrs["starts"]), list(attrs["axes"]), list(attrs["steps"])
    spec = {a: (s, st) for a, s, st in zip(axes, starts, steps, strict=True)}

    def body(*ix: Expr) -> Expr:
        src = []
        for a, i in enumerate(ix):
            if a in spec:
                s, st = spec[a]
                src.append(te.add(te.idx(s), te.mul(i, te.idx(st))))
            else:
                src.append(i)
        return x[src]

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


def _gather_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    data, indices = inputs
    axis = attrs["axis"]
    q = indices.ndim
    d = data.shape[axis]

    def body(*ix: Expr) -> Expr:
        idx_ix = list(ix[axis : axis + q])
        raw = te.cast("int64", indices[idx_ix] if q else indices[()])
        norm = te.select(BinOp("<", raw, te.idx(0)), te.add(raw, te.idx(d)), raw)
        src = [*ix[:axis], te.clamp(norm, d - 1), *ix[axis + q :]]
        return data[src]

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


def _expand_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    return te.compute(
        out.shape,
        lambda *ix: x[te.broadcast_indices(out.shape, x.shape, ix)],
        name,
        tag="injective",
        dtype=out.dtype,
    )


def _pad_compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    x = inputs[0]
    pads = list(attrs["pads"])
    n = x.ndim
    before = pads[:n]
    mode = attrs.get("mode", "constant")
    value = float(attrs.get("value", 0.0) or 0.0)

    def body(*ix: Expr) -> Expr:
        src: list[Expr] = []
        conds: list[Expr] = []
        for i, dim, b in zip(ix, x.shape, before, strict=True):
            j = te.sub(i, te.idx(b))
            if mode == "constant":
                conds += [BinOp(">=", j, te.idx(0)), BinOp("<", j, te.idx(dim))]
                src.append(te.clamp(j, dim - 1))
            elif mode == "edge":
                src.append(te.clamp(j, dim - 1))
            else:  # reflect
                r = te.select(BinOp("<", j, te.idx(0)), te.sub(te.idx(0), j), j)
                r = te.select(BinOp(">=", r, te.idx(dim)), te.sub(te.idx(2 * (dim - 1)), r), r)
                src.append(te.clamp(r, dim - 1))
        v = x[src]
        cond = te.all_of(conds)
        if cond is None:
            return v
        fill = FloatImm(value, x.dtype) if x.dtype.startswith("float") else IntImm(int(value), x.dtype)
        return te.select(cond, v, fill)

    return te.compute(out.shape, body, name, tag="injective", dtype=out.dtype)


# reshape(x), attrs: shape (static, fully resolved)
register(OpDef("reshape", Pattern.INJECTIVE, _reshape_infer, _reshape, compute=_reshape_compute))
# transpose(x), attrs: perm
register(OpDef("transpose", Pattern.INJECTIVE, _transpose_infer, _transpose, compute=_transpose_compute))
# concat(*xs), attrs: axis (non-negative)
register(OpDef("concat", Pattern.INJECTIVE, _concat_infer, _concat, compute=_concat_compute))
# slice(x), attrs: starts, ends, axes (= every axis), steps
register(OpDef("slice", Pattern.INJECTIVE, _slice_infer, _slice, compute=_slice_compute))
# gather(data, indices), attrs: axis (non-negative); negative runtime indices count from the end
register(OpDef("gather", Pattern.INJECTIVE, _gather_infer, _gather, compute=_gather_compute))
# expand(x), attrs: shape (the broadcast output shape)
register(OpDef("expand", Pattern.INJECTIVE, _expand_infer, _expand, compute=_expand_compute))
# pad(x), attrs: pads (ONNX order, non-negative), mode, value (float, constant mode)
register(OpDef("pad", Pattern.INJECTIVE, _pad_infer, _pad, compute=_pad_compute))
