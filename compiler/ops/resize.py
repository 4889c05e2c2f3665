"""resize(x): nearest / (n-)linear / (n-)cubic resampling to a static output shape.

Attributes: mode (nearest | linear | cubic), coordinate_transformation_mode, nearest_mode, sizes (the
full output shape) and scales (one float per axis: the scale the coordinate mapping divides by — the
model's scales when it gave them, else output/input; they differ when in * scale is not whole); cubic
also takes cubic_coeff_a (the kernel's A: -0.75 as PyTorch's bicubic, -0.5 as TensorFlow's) and
exclude_outside (1: taps outside the input weigh 0 and the others are renormalised; 0: they read the
edge). Cubic resampling reads the four inputs around each source coordinate with Keys' weights.
Coordinates are computed in float32 with onnxruntime's formulas so ties round the same way.
Axes with scale 1 and unchanged length are copied, not interpolated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compiler.ops.common import (
    FLOAT,
    NUMERIC,
    expect_args,
    expect_dtype,
    fail,
    float_attr,
    floats_attr,
    int_attr,
    ints_attr,
    str_attr,
)
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr

COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("resize", types, 1)
    x = types[0]
    mode = str_attr(attrs, "mode", ("nearest", "linear", "cubic"))
    expect_dtype("resize", x, NUMERIC if mode == "nearest" else (FLOAT,))
    if mode == "cubic":
        float_attr(attrs, "cubic_coeff_a")
        if int_attr(attrs, "exclude_outside") not in (0, 1):
            raise fail(f"resize exclude_outside must be 0 or 1, got {attrs['exclude_outside']}")
    str_attr(attrs, "coordinate_transformation_mode", COORDINATE_MODES)
    str_attr(attrs, "nearest_mode", NEAREST_MODES)
    sizes = ints_attr(attrs, "sizes", x.ndim)
    scales = floats_attr(attrs, "scales", x.ndim)
    if any(s < 1 for s in sizes) or any(not s > 0 for s in scales):
        raise fail(f"resize sizes {list(sizes)} and scales {list(scales)} must be positive")
    return TensorType(sizes, x.dtype)


def original_coordinates(mode: str, out_len: int, in_len: int, scale: float) -> np.ndarray:
    """Source coordinate (float32) of every output position along one axis."""
    f = np.float32
    x = np.arange(out_len, dtype=np.float32)
    s = f(scale)
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + f(0.5)) / s - f(0.5) if out_len > 1 else np.zeros_like(x)
    if mode == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / s
    if mode == "align_corners":
        if out_len == 1:
            return np.zeros_like(x)
        return x * f(in_len - 1) / f(out_len - 1)
    if mode == "half_pixel_symmetric":
        adjustment = f(out_len) / (s * f(in_len))
        offset = f(in_len) / f(2) * (f(1) - adjustment)
        return (offset + (x.astype(np.float64) + 0.5) / s - 0.5).astype(np.float32)
    return (x + f(0.5)) / s - f(0.5)  # half_pixel


def nearest_indices(coords: np.ndarray, nearest_mode: str, in_len: int) -> np.ndarray:
    if nearest_mode == "floor":
        idx = np.floor(coords)
    elif nearest_mode == "ceil":
        idx = np.ceil(coords)
    else:
        away = np.sign(coords) * np.floor(np.abs(coords) + np.float32(0.5))  # C round(): half away from 0
        if nearest_mode == "round_prefer_floor":
            tie = coords == np.trunc(coords) + np.float32(0.5)
            idx = np.where(tie, np.floor(coords), away)
        else:
            idx = away
    out: np.ndarray = np.clip(idx.astype(np.int64), 0, in_len - 1)
    return out


def cubic_weights(t: Any, a: float, lift: Any) -> list[Any]:
    """Keys' weights of the four taps at distances 1 + t, t, 1 - t, 2 - t from the source coordinate
    (t its fraction): one formula for float32 arrays (lift: np.float32, the reference) and TIR
    expressions (lift: LiftedF32, `t` wrapped in it, the compute definition)."""
    A = lift(a)

    def near(d: Any) -> Any:  # |d| <= 1
        return ((A + lift(2.0)) * d - (A + lift(3.0))) * d * d + lift(1.0)

    def far(d: Any) -> Any:  # 1 < |d| < 2
        return ((A * d - lift(5.0) * A) * d + lift(8.0) * A) * d - lift(4.0) * A

    one = lift(1.0)
    return [far(t + one), near(t), near(one - t), far(lift(2.0) - t)]


def cubic_taps(
    coords: np.ndarray, in_len: int, a: float, exclude_outside: int
) -> tuple[np.ndarray, np.ndarray]:
    """For every source coordinate, the indices of its four taps (clamped to the edge) and their
    weights [out_len, 4] (float32), renormalised without the outside taps when exclude_outside."""
    base = np.floor(coords)
    t = (coords - base).astype(np.float32)
    weights = np.stack(cubic_weights(t, a, np.float32), axis=1).astype(np.float32)
    taps = base.astype(np.int64)[:, None] + np.arange(-1, 3)
    if exclude_outside:
        weights = np.where((taps >= 0) & (taps < in_len), weights, np.float32(0))
        weights = (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)
    return np.clip(taps, 0, in_len - 1), weights


def _resize(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out = x
    for axis, (in_len, out_len, scale) in enumerate(
        zip(x.shape, attrs["sizes"], attrs["scales"], strict=True)
    ):
        if in_len == out_len and scale == 1.0:
            continue
        coords = original_coordinates(attrs["coordinate_transformation_mode"], out_len, in_len, scale)
        if attrs["mode"] == "nearest":
            out = np.take(out, nearest_indices(coords, attrs["nearest_mode"], in_len), axis=axis)
            continue
        view = [1] * x.ndim
        view[axis] = out_len
        if attrs["mode"] == "cubic":
            taps, weights = cubic_taps(coords, in_len, attrs["cubic_coeff_a"], attrs["exclude_outside"])
            out = sum(
                (np.take(out, taps[:, k], axis=axis) * weights[:, k].reshape(view) for k in range(4)),
                start=np.zeros((), np.float32),
            )
            continue
        c = np.clip(coords, np.float32(0), np.float32(in_len - 1))
        lo = np.minimum(c.astype(np.int64), in_len - 1)
        hi = np.minimum(lo + 1, in_len - 1)
        w_hi = (c - lo.astype(np.float32)).astype(np.float32)
        w_hi = w_hi.reshape(view)
        out = np.take(out, lo, axis=axis) * (np.float32(1) - w_hi) + np.take(out, hi, axis=axis) * w_hi
    return np.ascontiguousarray(out.astype(x.dtype))


# ------------------------------------------------------------------ lowering: compute definitions
def _source_coord(o: Expr, in_size: int, out_size: int, scale: float, mode: str) -> Expr:
    """Continuous input coordinate of output index o (float32), as onnxruntime computes it."""
    of = te.cast("float32", o)
    if mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        offset = in_size / 2 * (1 - adjustment)
        return te.add(te.f32(offset), te.sub(te.div(te.add(of, te.f32(0.5)), te.f32(scale)), te.f32(0.5)))
    if mode == "asymmetric":
        return te.div(of, te.f32(scale))
    if mode == "align_corners":
        return te.f32(0.0) if out_size == 1 else te.mul(of, te.f32((in_size - 1) / (out_size - 1)))
    if mode == "tf_half_pixel_for_nn":
        return te.div(te.add(of, te.f32(0.5)), te.f32(scale))
    if mode == "pytorch_half_pixel" and out_size == 1:
        return te.f32(0.0)
    return te.sub(te.div(te.add(of, te.f32(0.5)), te.f32(scale)), te.f32(0.5))  # half_pixel


def _nearest(c: Expr, mode: str) -> Expr:
    if mode == "floor":
        return te.call("floor", c)
    if mode == "ceil":
        return te.call("ceil", c)
    if mode == "round_prefer_ceil":
        return te.call("floor", te.add(c, te.f32(0.5)))
    return te.call("ceil", te.sub(c, te.f32(0.5)))  # round_prefer_floor (ONNX default)


def _interpolate(
    x: te.Tensor,
    ix: Sequence[Expr],
    axes: Sequence[int],
    out_shape: Sequence[int],
    scales: Sequence[float],
    attrs: dict[str, Any],
) -> Expr:
    """The value at output position `ix` resampled from x along `axes` (the others index x as they are)."""
    mode = attrs.get("mode", "nearest")
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    nmode = attrs.get("nearest_mode", "round_prefer_floor")
    if mode == "nearest":
        src = list(ix)
        for a in axes:
            c = _source_coord(ix[a], x.shape[a], out_shape[a], scales[a], ctm)
            src[a] = te.clamp(te.cast("int64", _nearest(c, nmode)), x.shape[a] - 1)
        return x[src]
    # linear: n-linear interpolation over the axes (cubic: n-cubic, four taps per axis)
    corners: list[tuple[list[Expr], Expr | None]] = [(list(ix), None)]
    for a in axes:
        c = _source_coord(ix[a], x.shape[a], out_shape[a], scales[a], ctm)
        if mode == "cubic":
            corners = [
                ([*src[:a], pos, *src[a + 1 :]], wt if w is None else te.mul(w, wt))
                for src, w in corners
                for pos, wt in _cubic_taps(c, x.shape[a], attrs)
            ]
            continue
        c = te.minimum(te.maximum(c, te.f32(0.0)), te.f32(float(x.shape[a] - 1)))
        lo = te.cast("int64", te.call("floor", c))
        hi = te.minimum(te.add(lo, te.idx(1)), te.idx(x.shape[a] - 1))
        frac = te.sub(c, te.call("floor", c))
        nxt: list[tuple[list[Expr], Expr | None]] = []
        for src, w in corners:
            for pos, wt in ((lo, te.sub(te.f32(1.0), frac)), (hi, frac)):
                s2 = list(src)
                s2[a] = pos
                nxt.append((s2, wt if w is None else te.mul(w, wt)))
        corners = nxt
    total: Expr | None = None
    for src, w in corners:
        term = x[src] if w is None else te.mul(x[src], w)
        total = term if total is None else te.add(total, term)
    assert total is not None
    return total


def _cubic_taps(c: Expr, length: int, attrs: dict[str, Any]) -> list[tuple[Expr, Expr]]:
    """The four (index, weight) taps around source coordinate `c` along an axis of `length`."""
    base = te.call("floor", c)
    lifted = cubic_weights(LiftedF32(te.sub(c, base)), float(attrs["cubic_coeff_a"]), LiftedF32)
    weights = [w.e for w in lifted]
    index = te.cast("int64", base)
    taps = [te.add(index, te.idx(k - 1)) for k in range(4)]
    if attrs.get("exclude_outside", 0):
        inside = [BinOp("and", BinOp(">=", tap, te.idx(0)), BinOp("<", tap, te.idx(length))) for tap in taps]
        weights = [te.select(ok, w, te.f32(0.0)) for ok, w in zip(inside, weights, strict=True)]
        total = te.add(te.add(weights[0], weights[1]), te.add(weights[2], weights[3]))
        weights = [te.div(w, total) for w in weights]
    return [(te.clamp(tap, length - 1), w) for tap, w in zip(taps, weights, strict=True)]


class LiftedF32:
    """float32 TIR arithmetic for `cubic_weights`: a constant lifted to an expression, and +, - and *
    between lifted values."""

    def __init__(self, value: float | Expr) -> None:
        self.e = te.f32(value) if isinstance(value, float) else value

    def _wrap(self, other: Any) -> Expr:
        return other.e if isinstance(other, LiftedF32) else other

    def __add__(self, o: Any) -> LiftedF32:
        return LiftedF32(te.add(self.e, self._wrap(o)))

    def __sub__(self, o: Any) -> LiftedF32:
        return LiftedF32(te.sub(self.e, self._wrap(o)))

    def __mul__(self, o: Any) -> LiftedF32:
        return LiftedF32(te.mul(self.e, self._wrap(o)))


# the stage of a separable resize that resamples the innermost axis alone (schedules keep it, it is
# not inlined: compiler/tir/rules.py INLINE_TAGS)
ROWS_TAG = "resize_rows"


def _resize_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    """Resampling is separable. When the innermost axis and an axis that grows are both resampled,
    the innermost axis goes first, over the input's rows only: its reads are the lane-by-lane ones (a
    vector of output columns reads scattered input columns), and an upsampling makes fewer of them
    there than over the output's rows; the other axes then read whole rows of that stage, contiguous."""
    x = inputs[0]
    scales = list(attrs.get("scales") or [o / i for o, i in zip(out.shape, x.shape, strict=True)])
    resized = [a for a in range(x.ndim) if x.shape[a] != out.shape[a] or scales[a] != 1.0]
    last = x.ndim - 1
    if last in resized and any(out.shape[a] > x.shape[a] for a in resized if a != last):
        rows_shape = (*x.shape[:last], out.shape[last])
        rows = te.compute(
            rows_shape,
            lambda *ix: _interpolate(x, ix, [last], out.shape, scales, attrs),
            f"{name}_rows",
            tag=ROWS_TAG,
            dtype=out.dtype,
        )
        rest = [a for a in resized if a != last]
        one = [1.0 if a == last else s for a, s in enumerate(scales)]
        return te.compute(
            out.shape,
            lambda *ix: _interpolate(rows, ix, rest, out.shape, one, attrs),
            name,
            tag="injective",
            dtype=out.dtype,
        )
    return te.compute(
        out.shape,
        lambda *ix: _interpolate(x, ix, resized, out.shape, scales, attrs),
        name,
        tag="injective",
        dtype=out.dtype,
    )


# resize(x), attrs: mode, coordinate_transformation_mode, nearest_mode, sizes, scales
register(OpDef("resize", Pattern.INJECTIVE, _infer, _resize, compute=_resize_compute))
