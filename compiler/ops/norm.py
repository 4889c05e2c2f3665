"""Normalisations: inference batch_norm (per-channel affine, BROADCAST) and layer_norm (REDUCTION)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, expect_args, expect_dtype, fail, float_attr, int_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import Expr, IntImm, IterVar


def _batch_norm_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("batch_norm", types, 5)
    for t, what in zip(types, ("x", "scale", "bias", "mean", "var"), strict=True):
        expect_dtype("batch_norm", t, (FLOAT,), what)
    float_attr(attrs, "epsilon")
    x = types[0]
    if x.ndim < 2:
        raise fail(f"batch_norm input must have rank >= 2, got {list(x.shape)}")
    for t, what in zip(types[1:], ("scale", "bias", "mean", "var"), strict=True):
        if t.shape != (x.shape[1],):
            raise fail(f"batch_norm {what} must have shape [{x.shape[1]}], got {list(t.shape)}")
    return x


def channel_view(v: np.ndarray, rank: int) -> np.ndarray:
    """Per-channel vector [C] viewed as [C, 1, ..., 1] to broadcast over an NC... tensor."""
    return v.reshape((-1,) + (1,) * (rank - 2))


def batch_norm_affine(
    scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """Inference batch norm as y = x * a + b; returns (a, b) in float32 (used by fold_batch_norm)."""
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    b = bias.astype(np.float64) - mean.astype(np.float64) * a
    return a.astype(np.float32), b.astype(np.float32)


def _batch_norm(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, scale, bias, mean, var = a
    rank = x.ndim
    mul = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + attrs["epsilon"])
    y = (x - channel_view(mean, rank)) * channel_view(mul, rank) + channel_view(bias, rank)
    out: np.ndarray = y.astype(x.dtype)
    return out


def _layer_norm_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("layer_norm", types, 3)
    for t, what in zip(types, ("x", "scale", "bias"), strict=True):
        expect_dtype("layer_norm", t, (FLOAT,), what)
    float_attr(attrs, "epsilon")
    x = types[0]
    axis = int_attr(attrs, "axis")
    if not 0 <= axis < x.ndim:
        raise fail(f"layer_norm axis {axis} is out of range for rank {x.ndim}")
    inner = x.shape[axis:]
    for t, what in zip(types[1:], ("scale", "bias"), strict=True):
        fits = t.ndim <= len(inner) and all(
            d in (1, e) for d, e in zip(t.shape[::-1], inner[::-1], strict=False)
        )
        if not fits:
            raise fail(f"layer_norm {what} {list(t.shape)} does not broadcast to {list(inner)}")
    return x


def _layer_norm(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, scale, bias = a
    axes = tuple(range(attrs["axis"], x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + attrs["epsilon"]) * scale + bias
    out: np.ndarray = y.astype(x.dtype)
    return out


# ------------------------------------------------------------------ lowering: compute definitions
def _batch_norm_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    x, scale, bias, mean, var = inputs
    eps = float(attrs.get("epsilon", 1e-5))

    def body(*ix: Expr) -> Expr:
        c = ix[1]
        inv = te.div(scale[c], te.call("sqrt", te.add(var[c], te.f32(eps))))
        return te.add(te.mul(te.sub(x[ix], mean[c]), inv), bias[c])

    return te.compute(out.shape, body, name, tag="broadcast", dtype=out.dtype)


def _layer_norm_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    x, scale, bias = inputs
    axis = attrs["axis"]
    eps = float(attrs.get("epsilon", 1e-5))
    norm_axes = list(range(axis, x.ndim))
    count = 1
    for a in norm_axes:
        count *= x.shape[a]
    stat_shape = [d if a < axis else 1 for a, d in enumerate(x.shape)]

    def reduced(ix: Sequence[Expr], rs: list[IterVar]) -> list[Expr]:
        return [ix[a] if a < axis else rs[a - axis].var for a in range(x.ndim)]

    def stat_ix(ix: Sequence[Expr]) -> list[Expr]:
        return [ix[a] if a < axis else IntImm(0) for a in range(x.ndim)]

    r1 = [te.reduce_axis(x.shape[a], f"r{a}") for a in norm_axes]
    total = te.compute(
        stat_shape, lambda *ix: te.reduce_sum(x[reduced(ix, r1)], r1), f"{name}_sum", tag="reduce"
    )
    r2 = [te.reduce_axis(x.shape[a], f"r{a}") for a in norm_axes]
    inv_n = te.f32(1.0 / count)

    def sq(*ix: Expr) -> te.Reduce:
        d = te.sub(x[reduced(ix, r2)], te.mul(total[ix], inv_n))
        return te.reduce_sum(te.mul(d, d), r2)

    sqs = te.compute(stat_shape, sq, f"{name}_sqsum", tag="reduce")

    def body(*ix: Expr) -> Expr:
        st = stat_ix(ix)
        mean = te.mul(total[st], inv_n)
        rstd = te.div(te.f32(1.0), te.call("sqrt", te.add(te.mul(sqs[st], inv_n), te.f32(eps))))
        tail = list(ix[axis:])
        sc = scale[te.broadcast_indices(x.shape[axis:], scale.shape, tail)]
        bi = bias[te.broadcast_indices(x.shape[axis:], bias.shape, tail)]
        return te.add(te.mul(te.mul(te.sub(x[ix], mean), rstd), sc), bi)

    return te.compute(out.shape, body, name, tag="elemwise", dtype=out.dtype)


# batch_norm(x, scale, bias, mean, var), attrs: epsilon (float). Inference only; channel axis 1.
register(OpDef("batch_norm", Pattern.BROADCAST, _batch_norm_infer, _batch_norm, compute=_batch_norm_compute))
# layer_norm(x, scale, bias), attrs: axis (non-negative; normalises over axes [axis, rank)), epsilon
register(OpDef("layer_norm", Pattern.REDUCTION, _layer_norm_infer, _layer_norm, compute=_layer_norm_compute))
