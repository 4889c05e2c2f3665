"""ONNX DFT and STFT as products with a transform matrix built at compile time.

The discrete Fourier transform along one axis of a real ([..., 1]) or complex ([..., 2]) signal is
linear in the signal, so it is one matmul: the signal's axis and its real/imaginary pair, moved last
and flattened, times a constant matrix of cosines and sines (`dft_matrix`) that also holds the 1/N of
an inverse, the zero-padding or truncation to dft_length and the one-sided half spectrum (of a
forward transform; an inverse one-sided transform takes a half spectrum to a real signal). A dense
product does O(N^2) work per signal where an FFT does O(N log N), but it runs as temper's scheduled
matmul over every signal at once, and the frame lengths of audio front ends (hundreds to a few
thousand samples) keep the matrix small. A length whose matrix would exceed MAX_DFT_MATRIX_ELEMENTS
is refused, naming the node.

STFT is the same transform of windowed frames: a strided convolution whose filters are the matrix's
rows scaled by the window (`_stft`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from compiler.frontend.context import NodeContext, OpConverter, ScanInfo
from compiler.graph.ir import Expr

# the transform matrix's size limit (elements): a real signal's one-sided DFT of 4096 points fits
MAX_DFT_MATRIX_ELEMENTS = 1 << 24
# from this opset on, the axis is an input (default -2), before it an attribute (default 1)
AXIS_INPUT_OPSET = 20


def dft_matrix(length: int, n: int, bins: int, complex_input: bool, inverse: bool) -> np.ndarray:
    """[length * c, bins * 2] (c: 2 for a complex signal, else 1): row (t, part) of the input's sample
    t and its real or imaginary part, column (k, part) of bin k's. Bin k of an n-point transform is
    sum over t < n of x[t] e^(-+2 pi i k t / n) (the sign + and a factor 1/n for the inverse); samples
    at t >= n are cut (their rows stay zero), samples past `length` are the zero padding (no rows)."""
    used = min(length, n)
    t, k = np.arange(used)[:, None], np.arange(bins)[None, :]
    theta = 2 * np.pi * ((t * k) % n) / n  # reduced exactly before the float: precise for any length
    cos, sin = np.cos(theta), np.sin(theta)
    sign = 1.0 if inverse else -1.0
    parts = 2 if complex_input else 1
    m = np.zeros((length, parts, bins, 2))
    m[:used, 0, :, 0] = cos  # (a + ib)(cos + i sign sin) = a cos - b sign sin + i (a sign sin + b cos)
    m[:used, 0, :, 1] = sign * sin
    if complex_input:
        m[:used, 1, :, 0] = -sign * sin
        m[:used, 1, :, 1] = cos
    if inverse:
        m /= n
    return m.reshape(length * parts, bins * 2)


def inverse_onesided_matrix(length: int, n: int) -> np.ndarray:
    """[length * 2, n]: the n real samples of the inverse of a one-sided spectrum of `length` bins
    (an IRFFT). The missing bins are the conjugates of the given ones (X[n - k] = X[k]*), so sample t
    is (1/n) sum over k <= n/2 of w_k Re(X[k] e^(2 pi i k t / n)), w_k = 2 but for bin 0 and an even
    n's bin n/2 (1: their conjugates are themselves). Bins past n/2 are cut, missing ones are zeros."""
    used = min(length, n // 2 + 1)
    k, t = np.arange(used)[:, None], np.arange(n)[None, :]
    theta = 2 * np.pi * ((k * t) % n) / n
    weight = np.where((k == 0) | (2 * k == n), 1.0, 2.0) / n
    m = np.zeros((length, 2, n))
    m[:used, 0, :] = weight * np.cos(theta)  # Re((a + ib)(cos + i sin)) = a cos - b sin
    m[:used, 1, :] = -weight * np.sin(theta)
    return m.reshape(length * 2, n)


def _reserve_matrix(ctx: NodeContext, described: str, elements: int) -> None:
    """Refuse a transform matrix above MAX_DFT_MATRIX_ELEMENTS, else count it with the model's other
    constants (bounded in total: many such nodes cannot make the compiler allocate without bound)."""
    if elements > MAX_DFT_MATRIX_ELEMENTS:
        raise ctx.error(
            f"{described} needs a transform matrix of {elements} elements; temper computes "
            f"{ctx.op_type} as a dense matrix product, up to {MAX_DFT_MATRIX_ELEMENTS} elements"
        )
    if not ctx.budget.fold(elements):
        raise ctx.error(
            f"{ctx.op_type}'s transform matrix of {elements} elements outgrows the model's constant budget"
        )


def _constant_dtype(dtype: str) -> str:
    """The matrix's dtype: the signal's, but float32 for a float16 signal (which computes in float32,
    as float16 constants do: the coefficients need no rounding to float16)."""
    return "float32" if dtype == "float16" else dtype


def _scalar(ctx: NodeContext, i: int, what: str) -> int | None:
    """Input i as one compile-time integer (None when omitted)."""
    values = ctx.ints(i, what)
    if values is None:
        return None
    if len(values) != 1:
        raise ctx.error(f"{what} must be one integer, got {len(values)} values")
    return values[0]


def _axis(ctx: NodeContext, rank: int) -> int:
    if ctx.opset >= AXIS_INPUT_OPSET:
        given = _scalar(ctx, 2, "DFT's axis")
        axis = -2 if given is None else given
    else:
        axis = int(ctx.attr("axis", 1))
    normalized = axis + rank if axis < 0 else axis
    if not 0 <= normalized <= rank - 2:
        raise ctx.error(f"DFT axis {axis} is outside a signal of rank {rank} (its last axis holds the parts)")
    return normalized


def _dft(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    shape, rank = x.type.shape, x.type.ndim
    if rank < 2 or shape[-1] not in (1, 2):
        raise ctx.error(f"DFT needs a signal [..., 1] (real) or [..., 2] (complex), got shape {list(shape)}")
    if not x.type.dtype.startswith("float"):
        raise ctx.error(f"DFT of a {x.type.dtype} signal (a float type is needed)")
    axis = _axis(ctx, rank)
    length = shape[axis]
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    parts = shape[-1]
    if onesided and parts != (2 if inverse else 1):
        kind = "an inverse one-sided DFT needs a complex half spectrum ([..., 2])"
        raise ctx.error(kind if inverse else "a one-sided DFT needs a real signal ([..., 1])")
    given = _scalar(ctx, 1, "DFT's dft_length")
    n = given if given is not None else (2 * (length - 1) if inverse and onesided else length)
    if n < 1:
        raise ctx.error(f"DFT length must be at least 1, got {n}")
    # output positions along the axis and parts per position
    bins, out_parts = (n, 1) if inverse and onesided else (n // 2 + 1 if onesided else n, 2)
    _reserve_matrix(ctx, f"DFT of {n} points over {length} samples", length * parts * bins * out_parts)
    if inverse and onesided:
        matrix = inverse_onesided_matrix(length, n)
    else:
        matrix = dft_matrix(length, n, bins, parts == 2, inverse)
    matrix = matrix.astype(_constant_dtype(x.type.dtype))
    others = [i for i in range(rank - 1) if i != axis]
    order = (*others, axis, rank - 1)
    moved = ctx.emit("transpose", [x], perm=order) if order != tuple(range(rank)) else x
    signals = math.prod(shape[i] for i in others)
    flat = ctx.emit("reshape", [moved], shape=(signals, length * parts))
    spectrum = ctx.emit("matmul", [flat, ctx.new_const(matrix, name=f"{ctx.name}.dft_matrix")])
    spectrum = ctx.emit("reshape", [spectrum], shape=(*(shape[i] for i in others), bins, out_parts))
    # back to the signal's order: bins (or samples) where the axis was, the parts last
    back = (*(len(others) if i == axis else others.index(i) for i in range(rank - 1)), rank - 1)
    if back == tuple(range(rank)):
        return [spectrum]
    return [ctx.emit("transpose", [spectrum], perm=back)]


def _stft(ctx: NodeContext) -> Sequence[Expr]:
    """Frames of frame_length samples every frame_step, windowed and transformed: a strided 1-D
    convolution of the signal with the windowed transform's rows as its filters, one output channel
    per bin and part (conv2d over a [batch, parts, 1, length] image with [bins * 2, parts, 1, frame]
    filters), so the frames are never copied out."""
    x = ctx.arg(0)
    shape = x.type.shape
    if x.type.ndim == 2:  # [batch, length]: a real signal, as PyTorch's exporter writes it
        shape = (*shape, 1)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise ctx.error(f"STFT needs a signal [batch, length, 1 or 2], got shape {list(x.type.shape)}")
    if not x.type.dtype.startswith("float"):
        raise ctx.error(f"STFT of a {x.type.dtype} signal (a float type is needed)")
    batch, length, parts = shape
    step = _scalar(ctx, 1, "STFT's frame_step") or 0
    window = ctx.const(2, "STFT's window")
    given = _scalar(ctx, 3, "STFT's frame_length")
    if window is not None and window.ndim != 1:
        raise ctx.error(f"STFT's window must be one-dimensional, got shape {list(window.shape)}")
    if window is not None and given is not None and given != window.shape[0]:
        raise ctx.error(f"STFT's frame_length {given} differs from its window's length {window.shape[0]}")
    frame = window.shape[0] if window is not None else (given or 0)
    if step < 1 or frame < 1:
        raise ctx.error(f"STFT needs a frame_step and a frame length of at least 1, got {step} and {frame}")
    if frame > length:
        raise ctx.error(f"STFT frames of {frame} samples do not fit a signal of {length}")
    onesided = bool(ctx.attr("onesided", 1))
    if onesided and parts == 2:
        raise ctx.error("a one-sided STFT needs a real signal ([..., 1])")
    bins = frame // 2 + 1 if onesided else frame
    _reserve_matrix(ctx, f"STFT of {frame}-sample frames", frame * parts * bins * 2)
    rows = dft_matrix(frame, frame, bins, parts == 2, inverse=False).reshape(frame, parts, bins, 2)
    if window is not None:
        rows = rows * window.astype(np.float64)[:, None, None, None]
    filters = rows.transpose(2, 3, 1, 0).reshape(bins * 2, parts, 1, frame)
    filters = filters.astype(_constant_dtype(x.type.dtype))
    image = ctx.emit("transpose", [x], perm=(0, 2, 1)) if parts == 2 else x
    image = ctx.emit("reshape", [image], shape=(batch, parts, 1, length))
    weight = ctx.new_const(filters, name=f"{ctx.name}.stft_filters")
    y = ctx.emit("conv2d", [image, weight], strides=(1, step), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1)
    frames = (length - frame) // step + 1
    y = ctx.emit("reshape", [y], shape=(batch, bins, 2, frames))
    return [ctx.emit("transpose", [y], perm=(0, 3, 1, 2))]


def _check_stft(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """STFT with its frame_step, window and frame_length known at compile time."""
    if node.op_type != "STFT":
        return None
    for index, what in ((1, "frame_step"), (2, "window"), (3, "frame_length")):
        if len(node.input) > index and node.input[index] and node.input[index] not in info.consts:
            return f"STFT with a {what} computed at run time"
    return None


def _check_dft(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """DFT with its dft_length (and, from opset 20, its axis) known at compile time."""
    if node.op_type != "DFT":
        return None
    if len(node.input) > 1 and node.input[1] and node.input[1] not in info.consts:
        return "DFT with a dft_length computed at run time"
    axis_input = info.opset >= AXIS_INPUT_OPSET and len(node.input) > 2 and node.input[2]
    if axis_input and node.input[2] not in info.consts:
        return "DFT with an axis computed at run time"
    return None


CONVERTERS: dict[str, OpConverter] = {
    "DFT": OpConverter(_dft, _check_dft),
    "STFT": OpConverter(_stft, _check_stft),
}
