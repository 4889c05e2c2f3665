"""grid_sample(x, grid): x (N x C x H x W) sampled at the points of a grid (N x Ho x Wo x 2).

Spatial transformer networks, optical-flow warping and point-sampling heads read their input at
computed places. grid[n, i, j] = (gx, gy) names one point of image n in normalized coordinates (-1 is
the first pixel's edge or centre, 1 the last's: align_corners), and out[n, c, i, j] is channel c there.

Attributes: mode (linear: the four pixels around the point; nearest: the pixel its coordinates round
to, ties to even; cubic: the sixteen around it, Keys' weights with A = -0.75), padding_mode (what a
pixel outside the image reads: zeros, the nearest edge pixel (border), or the pixel mirrored into the
image (reflection)) and align_corners (0 or 1). The coordinate itself is first brought into the image
by the padding mode (clamped or mirrored; left as it is for zeros), then each tap by the same rule.
Coordinates are computed in float32 with onnxruntime's formulas, and where onnxruntime and onnx's
reference differ temper follows onnxruntime: a cubic coordinate is not clamped for border padding
(its sixteen taps are).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, expect_args, expect_dtype, fail, int_attr, str_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.ops.resize import LiftedF32, cubic_weights
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr

MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75  # the Keys kernel of PyTorch's and onnxruntime's bicubic grid sampling
F32 = np.float32


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("grid_sample", types, 2)
    x, grid = types
    expect_dtype("grid_sample", x, (FLOAT,))
    expect_dtype("grid_sample", grid, (FLOAT,), "grid")
    str_attr(attrs, "mode", MODES)
    str_attr(attrs, "padding_mode", PADDING_MODES)
    if int_attr(attrs, "align_corners") not in (0, 1):
        raise fail(f"grid_sample align_corners must be 0 or 1, got {attrs['align_corners']}")
    if x.ndim != 4 or grid.ndim != 4 or grid.shape[3] != 2 or grid.shape[0] != x.shape[0]:
        raise fail(
            f"grid_sample takes x [N, C, H, W] and grid [N, Ho, Wo, 2], got x {list(x.shape)}, "
            f"grid {list(grid.shape)}"
        )
    return TensorType((x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]), x.dtype)


def bounds(size: int, align_corners: int) -> tuple[float, float]:
    """The coordinates of the image's first and last edge along an axis of `size` pixels: the pixel
    centres with align_corners, half a pixel beyond them without."""
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


# ---- the reference (numpy, float32) -------------------------------------------------------------------


def _unnormalize_np(g: np.ndarray, size: int, align_corners: int) -> np.ndarray:
    if align_corners:
        return ((g + F32(1)) / F32(2) * F32(size - 1)).astype(F32)
    return (((g + F32(1)) * F32(size) - F32(1)) / F32(2)).astype(F32)


def _reflect_np(c: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """`c` mirrored at lo and hi until it lies between them (lo where they coincide)."""
    span = F32(hi - lo)
    if span <= 0:
        return np.full_like(c, F32(lo))
    below, above = c < lo, c > hi
    d = np.where(below, F32(lo) - c, np.where(above, c - F32(hi), F32(0))).astype(F32)
    turns = np.floor(d / span)
    r = (d - turns * span).astype(F32)
    even = np.mod(turns, 2) == 0
    from_lo, from_hi = (F32(lo) + r).astype(F32), (F32(hi) - r).astype(F32)
    inside_or_above = np.where(above, np.where(even, from_hi, from_lo), c)
    return np.where(below, np.where(even, from_lo, from_hi), inside_or_above)


def _coordinate_np(g: np.ndarray, size: int, attrs: dict[str, Any]) -> np.ndarray:
    c = _unnormalize_np(g, size, attrs["align_corners"])
    if attrs["mode"] == "nearest":
        c = np.rint(c).astype(F32)
    lo, hi = bounds(size, attrs["align_corners"])
    if attrs["padding_mode"] == "border" and attrs["mode"] != "cubic":
        return np.where((c < lo) | (c > hi), np.clip(c, F32(0), F32(size - 1)), c).astype(F32)
    if attrs["padding_mode"] == "reflection":
        return _reflect_np(c, lo, hi).astype(F32)
    return c


def _taps_np(c: np.ndarray, mode: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(integer tap, weight) pairs around coordinates `c` (float32 arrays)."""
    if mode == "nearest":
        return [(np.trunc(c).astype(np.int64), np.ones_like(c))]
    base = np.floor(c)
    t = (c - base).astype(F32)
    first = base.astype(np.int64)
    if mode == "linear":
        return [(first, (F32(1) - t).astype(F32)), (first + 1, t)]
    weights = cubic_weights(t, CUBIC_A, F32)
    return [(first + k - 1, np.asarray(w, dtype=F32)) for k, w in enumerate(weights)]


def _pixel_np(i: np.ndarray, size: int, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(index into the axis, whether the tap reads the image) for integer taps `i`."""
    if attrs["padding_mode"] == "zeros":
        inside = (i >= 0) & (i < size)
        return np.clip(i, 0, size - 1), inside
    if attrs["padding_mode"] == "border":
        return np.clip(i, 0, size - 1), np.ones(i.shape, bool)
    lo, hi = bounds(size, attrs["align_corners"])
    mirrored = np.trunc(_reflect_np(i.astype(F32), lo, hi)).astype(np.int64)
    return np.clip(mirrored, 0, size - 1), np.ones(i.shape, bool)


def _reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, grid = a
    n, c, h, w = x.shape
    cx = _coordinate_np(grid[..., 0].astype(F32), w, attrs)  # [N, Ho, Wo]
    cy = _coordinate_np(grid[..., 1].astype(F32), h, attrs)
    out = np.zeros((n, c, *grid.shape[1:3]), dtype=F32)
    batch = np.arange(n)[:, None, None]
    for ty, wy in _taps_np(cy, attrs["mode"]):
        iy, in_y = _pixel_np(ty, h, attrs)
        for tx, wx in _taps_np(cx, attrs["mode"]):
            ix, in_x = _pixel_np(tx, w, attrs)
            picked = x[batch, :, iy, ix]  # [N, Ho, Wo, C]
            weight = np.where(in_y & in_x, wy * wx, F32(0)).astype(F32)
            out += np.moveaxis(picked * weight[..., None], -1, 1)
    return out.astype(x.dtype)


# ---- the compute definition ---------------------------------------------------------------------------


def _lt(a: Expr, b: Expr) -> Expr:
    return BinOp("<", a, b)


def _reflect(c: Expr, lo: float, hi: float) -> Expr:
    """TIR of _reflect_np."""
    span = hi - lo
    if span <= 0:
        return te.f32(lo)
    below, above = _lt(c, te.f32(lo)), _lt(te.f32(hi), c)
    d = te.select(below, te.sub(te.f32(lo), c), te.select(above, te.sub(c, te.f32(hi)), te.f32(0.0)))
    turns = te.call("floor", te.div(d, te.f32(span)))
    r = te.sub(d, te.mul(turns, te.f32(span)))
    half = te.mul(turns, te.f32(0.5))
    even = BinOp("==", te.call("floor", half), half)
    from_lo, from_hi = te.add(te.f32(lo), r), te.sub(te.f32(hi), r)
    inside_or_above = te.select(above, te.select(even, from_hi, from_lo), c)
    return te.select(below, te.select(even, from_lo, from_hi), inside_or_above)


def _coordinate(g: Expr, size: int, attrs: dict[str, Any]) -> Expr:
    """TIR of _coordinate_np: the source coordinate along an axis of `size` of normalized `g`."""
    one = te.f32(1.0)
    if attrs["align_corners"]:
        c = te.mul(te.div(te.add(g, one), te.f32(2.0)), te.f32(float(size - 1)))
    else:
        c = te.div(te.sub(te.mul(te.add(g, one), te.f32(float(size))), one), te.f32(2.0))
    if attrs["mode"] == "nearest":
        c = te.call("round", c)  # half to even, as onnxruntime rounds
    lo, hi = bounds(size, attrs["align_corners"])
    if attrs["padding_mode"] == "border" and attrs["mode"] != "cubic":
        outside = BinOp("or", _lt(c, te.f32(lo)), _lt(te.f32(hi), c))
        return te.select(outside, te.minimum(te.maximum(c, te.f32(0.0)), te.f32(float(size - 1))), c)
    if attrs["padding_mode"] == "reflection":
        return _reflect(c, lo, hi)
    return c


def _taps(c: Expr, mode: str) -> list[tuple[Expr, Expr | None]]:
    """TIR of _taps_np: (integer tap, weight; None for 1) pairs."""
    if mode == "nearest":
        return [(te.cast("int64", c), None)]
    base = te.call("floor", c)
    first = te.cast("int64", base)
    t = te.sub(c, base)
    if mode == "linear":
        return [(first, te.sub(te.f32(1.0), t)), (te.add(first, te.idx(1)), t)]
    weights = [w.e for w in cubic_weights(LiftedF32(t), CUBIC_A, LiftedF32)]
    return [(te.add(first, te.idx(k - 1)), w) for k, w in enumerate(weights)]


def _pixel(i: Expr, size: int, attrs: dict[str, Any]) -> tuple[Expr, Expr | None]:
    """TIR of _pixel_np: (index, whether the tap reads the image; None: always)."""
    if attrs["padding_mode"] == "zeros":
        inside = BinOp("and", BinOp(">=", i, te.idx(0)), _lt(i, te.idx(size)))
        return te.clamp(i, size - 1), inside
    if attrs["padding_mode"] == "border":
        return te.clamp(i, size - 1), None
    lo, hi = bounds(size, attrs["align_corners"])
    return te.clamp(te.cast("int64", _reflect(te.cast("float32", i), lo, hi)), size - 1), None


def _axis_taps(c: Expr, size: int, attrs: dict[str, Any]) -> list[tuple[Expr, Expr]]:
    """(index into the axis, weight) of each tap around coordinate `c`: a tap that reads outside the
    image under zeros padding weighs 0 (and reads the clamped index)."""
    taps = []
    for tap, weight in _taps(c, attrs["mode"]):
        index, inside = _pixel(tap, size, attrs)
        w = weight if weight is not None else te.f32(1.0)
        taps.append((index, w if inside is None else te.select(inside, w, te.f32(0.0))))
    return taps


def _pick(k: Expr, values: Sequence[Expr]) -> Expr:
    """values[k] for a loop index k (a chain of selects)."""
    picked = values[-1]
    for at in range(len(values) - 2, -1, -1):
        picked = te.select(BinOp("==", k, te.idx(at)), values[at], picked)
    return picked


# the stages computing every point's source coordinates, then each axis' taps and weights (schedules
# keep them, they are not inlined: compiler/tir/rules.py INLINE_TAGS): every channel of the output
# reads them, and inlined the coordinate and tap arithmetic would be repeated for each channel
COORDS_TAG = "grid_sample_coords"
TAPS = {"nearest": 1, "linear": 2, "cubic": 4}


def _compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    x, grid = inputs
    sizes = (x.shape[3], x.shape[2])  # along the grid's axes: its (x, y) pairs index W, then H
    points = tuple(grid.shape[:3])
    taps = TAPS[attrs["mode"]]

    def coordinate(n: Expr, i: Expr, j: Expr, axis: Expr) -> Expr:
        g = grid[[n, i, j, axis]]
        return _pick(axis, [_coordinate(g, size, attrs) for size in sizes])

    coords = te.compute((*points, 2), coordinate, f"{name}_coords", tag=COORDS_TAG, dtype=x.dtype)
    stages: list[tuple[te.Tensor, te.Tensor]] = []  # (index, weight) per grid axis: x, then y
    for axis, size in enumerate(sizes):

        def along(part: int, axis: int = axis, size: int = size) -> Callable[..., Expr]:
            def value(n: Expr, i: Expr, j: Expr, k: Expr) -> Expr:
                found = _axis_taps(coords[[n, i, j, te.idx(axis)]], size, attrs)
                return _pick(k, [tap[part] for tap in found])

            return value

        shape, label = (*points, taps), f"{name}_{'xy'[axis]}"
        index = te.compute(shape, along(0), f"{label}_index", tag=COORDS_TAG, dtype="int64")
        weight = te.compute(shape, along(1), f"{label}_weight", tag=COORDS_TAG, dtype=x.dtype)
        stages.append((index, weight))
    (ix, wx), (iy, wy) = stages

    def body(n: Expr, c: Expr, i: Expr, j: Expr) -> Expr:
        total: Expr | None = None
        for ky in range(taps):
            for kx in range(taps):
                at_y, at_x = [n, i, j, te.idx(ky)], [n, i, j, te.idx(kx)]
                term = te.mul(te.mul(x[[n, c, iy[at_y], ix[at_x]]], wy[at_y]), wx[at_x])
                total = term if total is None else te.add(total, term)
        assert total is not None
        return total

    sample: Callable[..., Expr] = body
    return te.compute(out.shape, sample, name, tag="injective", dtype=out.dtype)


# grid_sample(x, grid), attrs: mode, padding_mode, align_corners
register(OpDef("grid_sample", Pattern.INJECTIVE, _infer, _reference, compute=_compute))
