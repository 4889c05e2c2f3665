"""ONNX data-movement and shape ops -> injective graph ops with every attribute resolved statically.

Shape-typed inputs (Reshape's shape, Slice's starts, Pad's pads, ...) must be compile-time constants;
Shape / Size / Constant / ConstantOfShape become constants directly, so shape subgraphs fold away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from compiler.errors import ShapeError
from compiler.frontend.context import Converter, NodeContext, OpConverter, ScanInfo
from compiler.frontend.convert_math import onnx_dtype_name
from compiler.graph.ir import Const, Expr
from compiler.ops.common import broadcast_shapes, norm_axis
from compiler.tensor_type import TensorType

# ---- reshapes ---------------------------------------------------------------------------------------


def _axis(ctx: NodeContext, axis: int, rank: int) -> int:
    try:
        return norm_axis(int(axis), rank)
    except ShapeError as e:
        raise ctx.error(e.message) from None


def resolve_reshape(
    ctx: NodeContext, in_shape: Sequence[int], target: Sequence[int], allowzero: bool
) -> tuple[int, ...]:
    """ONNX Reshape target (0 copies the input dim unless allowzero, -1 is inferred) -> static shape."""
    out = [in_shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise ctx.error(f"invalid Reshape target {list(target)}")
    total = int(np.prod(in_shape, dtype=np.int64))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape {list(in_shape)} to {list(target)}")
        out[out.index(-1)] = total // known
    return tuple(out)


def _reshape(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    target = ctx.ints(1, "Reshape shape")
    assert target is not None
    shape = resolve_reshape(ctx, x.type.shape, target, bool(ctx.attr("allowzero", 0)))
    return [ctx.emit("reshape", [x], shape=shape)]


def _flatten(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axis = int(ctx.attr("axis", 1))
    axis = axis + x.type.ndim if axis < 0 else axis
    if not 0 <= axis <= x.type.ndim:
        raise ctx.error(f"Flatten axis {ctx.attr('axis')} out of range for rank {x.type.ndim}")
    outer = int(np.prod(x.type.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.type.shape[axis:], dtype=np.int64))
    return [ctx.emit("reshape", [x], shape=(outer, inner))]


def _squeeze(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axes = ctx.ints(1, "Squeeze axes")
    shape = x.type.shape
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {_axis(ctx, a, x.type.ndim) for a in axes}
        if any(shape[a] != 1 for a in drop):
            raise ctx.error(f"Squeeze axes {list(axes)} are not all of size 1 in {list(shape)}")
    return [ctx.emit("reshape", [x], shape=tuple(d for i, d in enumerate(shape) if i not in drop))]


def _unsqueeze(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axes = ctx.ints(1, "Unsqueeze axes")
    if not axes:
        raise ctx.error("Unsqueeze needs axes")
    rank = x.type.ndim + len(axes)
    inserted = {_axis(ctx, a, rank) for a in axes}
    if len(inserted) != len(axes):
        raise ctx.error(f"Unsqueeze axes {list(axes)} repeat an axis")
    dims = iter(x.type.shape)
    return [ctx.emit("reshape", [x], shape=tuple(1 if i in inserted else next(dims) for i in range(rank)))]


def _transpose(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    perm = tuple(ctx.attr("perm", range(x.type.ndim - 1, -1, -1)))
    return [ctx.emit("transpose", [x], perm=perm)]


def _depth_to_space(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    b = int(ctx.attr("blocksize"))
    if x.type.ndim != 4 or x.type.shape[1] % (b * b):
        raise ctx.error(f"DepthToSpace blocksize {b} does not divide the channels of {list(x.type.shape)}")
    n, c, h, w = x.type.shape
    if ctx.attr("mode", "DCR") == "DCR":
        t = ctx.emit("reshape", [x], shape=(n, b, b, c // (b * b), h, w))
        t = ctx.emit("transpose", [t], perm=(0, 3, 4, 1, 5, 2))
    else:
        t = ctx.emit("reshape", [x], shape=(n, c // (b * b), b, b, h, w))
        t = ctx.emit("transpose", [t], perm=(0, 1, 4, 2, 5, 3))
    return [ctx.emit("reshape", [t], shape=(n, c // (b * b), h * b, w * b))]


def _space_to_depth(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    b = int(ctx.attr("blocksize"))
    if x.type.ndim != 4 or x.type.shape[2] % b or x.type.shape[3] % b:
        raise ctx.error(
            f"SpaceToDepth blocksize {b} does not divide the spatial dims of {list(x.type.shape)}"
        )
    n, c, h, w = x.type.shape
    mode = str(ctx.attr("mode", "DCR"))  # an attribute from opset 28 on; DCR before
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"SpaceToDepth mode {mode!r} is not DCR or CRD")
    t = ctx.emit("reshape", [x], shape=(n, c, h // b, b, w // b, b))
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    t = ctx.emit("transpose", [t], perm=perm)
    return [ctx.emit("reshape", [t], shape=(n, c * b * b, h // b, w // b))]


# ---- combining and selecting ------------------------------------------------------------------------


def _concat(ctx: NodeContext) -> Sequence[Expr]:
    xs = [ctx.arg(i) for i in range(len(ctx.inputs))]
    return [ctx.emit("concat", xs, axis=_axis(ctx, ctx.attr("axis"), xs[0].type.ndim))]


def resolve_slice(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice clamping of one axis (negative indices count from the end)."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def emit_slice(ctx: NodeContext, x: Expr, spec: dict[int, tuple[int, int, int]]) -> Expr:
    """Slice with `spec` = {axis: (start, end, step)} already clamped; other axes are taken whole."""
    shape = x.type.shape
    starts = [spec.get(i, (0, d, 1))[0] for i, d in enumerate(shape)]
    ends = [spec.get(i, (0, d, 1))[1] for i, d in enumerate(shape)]
    steps = [spec.get(i, (0, d, 1))[2] for i, d in enumerate(shape)]
    axes = tuple(range(len(shape)))
    return ctx.emit("slice", [x], starts=tuple(starts), ends=tuple(ends), axes=axes, steps=tuple(steps))


def _slice(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    starts, ends = ctx.ints(1, "Slice starts"), ctx.ints(2, "Slice ends")
    assert starts is not None and ends is not None
    axes = ctx.ints(3, "Slice axes") or list(range(len(starts)))
    steps = ctx.ints(4, "Slice steps") or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error("Slice starts, ends, axes and steps differ in length")
    spec: dict[int, tuple[int, int, int]] = {}
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        a = _axis(ctx, axis, x.type.ndim)
        if step == 0 or a in spec:
            raise ctx.error("Slice step 0 or a repeated axis")
        spec[a] = (*resolve_slice(x.type.shape[a], start, end, step), step)
    return [emit_slice(ctx, x, spec)]


def _split(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axis = _axis(ctx, ctx.attr("axis", 0), x.type.ndim)
    dim = x.type.shape[axis]
    sizes = ctx.ints(1, "Split sizes")
    count = len(ctx.node.output)
    if sizes is None:
        count = int(ctx.attr("num_outputs", count))
        chunk = -(-dim // count)
        sizes = [min(chunk, dim - i * chunk) for i in range(count)]
    if len(sizes) != len(ctx.node.output) or sum(sizes) != dim or min(sizes) < 0:
        raise ctx.error(f"Split sizes {sizes} do not cover dim {dim} with {len(ctx.node.output)} outputs")
    outs, offset = [], 0
    for size in sizes:
        outs.append(emit_slice(ctx, x, {axis: (offset, offset + size, 1)}))
        offset += size
    return outs


def _gather(ctx: NodeContext) -> Sequence[Expr]:
    data, indices = ctx.arg(0), ctx.arg(1)
    axis = _axis(ctx, ctx.attr("axis", 0), data.type.ndim)
    if isinstance(indices, Const):
        idx = indices.data
        dim = data.type.shape[axis]
        if idx.size and (idx.min() < -dim or idx.max() >= dim):
            raise ctx.error(f"Gather indices out of range for a dim of {dim}")
        indices = ctx.new_const(
            np.where(idx < 0, idx + dim, idx).astype(idx.dtype), name=f"{ctx.name}.indices"
        )
    return [ctx.emit("gather", [data, indices], axis=axis)]


def _gather_nd(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("gather_nd", [ctx.arg(0), ctx.arg(1)], batch_dims=int(ctx.attr("batch_dims", 0)))]


def _gather_elements(ctx: NodeContext) -> Sequence[Expr]:
    data = ctx.arg(0)
    axis = _axis(ctx, ctx.attr("axis", 0), data.type.ndim)
    return [ctx.emit("gather_elements", [data, ctx.arg(1)], axis=axis)]


def _cumulative(ctx: NodeContext) -> Sequence[Expr]:
    """CumSum / CumProd along their axis (exclusive: each position leaves itself out; reverse: from
    the end)."""
    x = ctx.arg(0)
    (axis,) = ctx.ints(1, f"{ctx.op_type} axis") or [0]
    flags = {k: int(ctx.attr(k, 0)) for k in ("exclusive", "reverse")}
    op = {"CumSum": "cumsum", "CumProd": "cumprod"}[ctx.op_type]
    return [ctx.emit(op, [x], axis=_axis(ctx, axis, x.type.ndim), **flags)]


def _check_cumulative(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """The axis known at compile time."""
    if len(node.input) > 1 and node.input[1] and node.input[1] not in info.consts:
        return f"{node.op_type} axis computed at run time (temper needs it when it compiles)"
    return None


def _scatter(op: str) -> Converter:
    """ScatterND / ScatterElements (a `mul` reduction is listed as unsupported by the scan)."""

    def convert(ctx: NodeContext) -> Sequence[Expr]:
        data, indices, updates = ctx.arg(0), ctx.arg(1), ctx.arg(2)
        attrs: dict[str, Any] = {"reduction": str(ctx.attr("reduction", "none"))}
        if op == "scatter_elements":
            attrs["axis"] = _axis(ctx, ctx.attr("axis", 0), data.type.ndim)
        return [ctx.emit(op, [data, indices, updates], **attrs)]

    return convert


def _check_scatter(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Reduction none, add, max or min (not mul)."""
    reduction = attrs.get("reduction", "none")
    return None if reduction in ("none", "add", "max", "min") else f"{node.op_type} reduction {reduction!r}"


def _topk(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    (k,) = ctx.ints(1, "TopK k") or [0]
    attrs = {
        "k": k,
        "axis": _axis(ctx, ctx.attr("axis", -1), x.type.ndim),
        "largest": int(ctx.attr("largest", 1)),
    }
    return [ctx.emit("topk_values", [x], **attrs), ctx.emit("topk_indices", [x], **attrs)]


def _trilu(ctx: NodeContext) -> Sequence[Expr]:
    """Trilu as a constant mask of its last two dims: where(mask, x, 0)."""
    x = ctx.arg(0)
    if x.type.ndim < 2:
        raise ctx.error(f"Trilu needs rank >= 2, got {list(x.type.shape)}")
    (k,) = ctx.ints(1, "Trilu k") or [0]
    rows, cols = x.type.shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]  # j - i
    keep = offset >= k if ctx.attr("upper", 1) else offset <= k
    mask = ctx.new_const(keep, name=f"{ctx.name}.mask")
    zero = ctx.new_const(np.zeros((), dtype=x.type.dtype), name=f"{ctx.name}.zero")
    return [ctx.emit("where", [mask, x, zero])]


def _expand(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    shape = ctx.ints(1, "Expand shape")
    assert shape is not None
    try:
        out = broadcast_shapes(x.type.shape, shape)
    except ShapeError as e:
        raise ctx.error(e.message) from None
    return [ctx.emit("expand", [x], shape=out)]


def _tile(ctx: NodeContext) -> Sequence[Expr]:
    """Tile as expand of an interleaved [1, d0, 1, d1, ...] view, then merge each (repeat, dim) pair."""
    x = ctx.arg(0)
    repeats = ctx.ints(1, "Tile repeats")
    assert repeats is not None
    shape = x.type.shape
    if len(repeats) != len(shape) or min(repeats, default=1) < 0:
        raise ctx.error(f"Tile repeats {repeats} do not match rank {len(shape)}")
    if all(r == 1 for r in repeats):
        return [x]
    view = ctx.emit("reshape", [x], shape=tuple(v for d in shape for v in (1, d)))
    wide = ctx.emit(
        "expand", [view], shape=tuple(v for r, d in zip(repeats, shape, strict=True) for v in (r, d))
    )
    return [ctx.emit("reshape", [wide], shape=tuple(r * d for r, d in zip(repeats, shape, strict=True)))]


# ---- padding and resampling -------------------------------------------------------------------------


def _pad(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    rank = x.type.ndim
    pads = ctx.ints(1, "Pad pads")
    assert pads is not None
    value = ctx.const(2, "Pad constant_value")
    axes = ctx.ints(3, "Pad axes")
    if axes is not None:
        full = [0] * (2 * rank)
        for i, a in enumerate(axes):
            a = _axis(ctx, a, rank)
            full[a], full[a + rank] = pads[i], pads[i + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise ctx.error(f"Pad pads {pads} do not match rank {rank}")
    fill = float(value.reshape(-1)[0]) if value is not None and value.size else 0.0
    y = x
    if any(p > 0 for p in pads):
        y = ctx.emit(
            "pad", [x], pads=tuple(max(p, 0) for p in pads), mode=ctx.attr("mode", "constant"), value=fill
        )
    if any(p < 0 for p in pads):  # negative pads crop
        spec = {
            i: (-min(pads[i], 0), y.type.shape[i] + min(pads[i + rank], 0), 1)
            for i in range(rank)
            if pads[i] < 0 or pads[i + rank] < 0
        }
        y = emit_slice(ctx, y, spec)
    return [y]


def _center_crop_pad(ctx: NodeContext) -> Sequence[Expr]:
    """Each listed axis cropped or zero-padded to its target length about its centre (the odd element
    at the end, as ONNX's reference puts it)."""
    x = ctx.arg(0)
    rank = x.type.ndim
    target = ctx.ints(1, "CenterCropPad shape")
    assert target is not None
    axes = [_axis(ctx, a, rank) for a in ctx.attr("axes", range(rank))]
    if len(target) != len(axes) or min(target, default=1) < 1:
        raise ctx.error(f"CenterCropPad shape {target} does not match axes {axes} (or is not positive)")
    crop: dict[int, tuple[int, int, int]] = {}
    pads = [0] * (2 * rank)
    for a, length in zip(axes, target, strict=True):
        size = x.type.shape[a]
        if length < size:
            start = (size - length) // 2
            crop[a] = (start, start + length, 1)
        elif length > size:
            pads[a] = (length - size) // 2
            pads[a + rank] = length - size - pads[a]
    y = emit_slice(ctx, x, crop) if crop else x
    if any(pads):
        y = ctx.emit("pad", [y], pads=tuple(pads), mode="constant", value=0.0)
    return [y]


def _check_constant_inputs(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """OneHot's depth and values, and CenterCropPad's shape, known at compile time (they set the
    output's shape and contents)."""
    needed = {"OneHot": ((1, "depth"), (2, "values")), "CenterCropPad": ((1, "shape"),)}[node.op_type]
    for i, what in needed:
        if len(node.input) > i and node.input[i] and node.input[i] not in info.consts:
            return f"{node.op_type} with its {what} computed at run time"
    return None


def _one_hot(ctx: NodeContext) -> Sequence[Expr]:
    """values[1] where the position along the new `axis` equals the index (negative ones count from
    the end of `depth`), values[0] elsewhere; indices outside [-depth, depth) give values[0]."""
    indices = ctx.arg(0)
    depth_data = ctx.const(1, "OneHot depth")
    values = ctx.const(2, "OneHot values")
    assert depth_data is not None and values is not None
    if depth_data.size != 1 or values.size != 2:
        raise ctx.error(f"OneHot needs one depth and two values, got {depth_data.size} and {values.size}")
    depth = int(depth_data.reshape(-1)[0])
    if depth < 1:
        raise ctx.error(f"OneHot depth {depth} must be positive")
    rank = indices.type.ndim + 1
    axis = _axis(ctx, int(ctx.attr("axis", -1)), rank)
    out_shape = list(indices.type.shape)
    out_shape.insert(axis, depth)
    try:  # the depth comes from the model: its output is bounded before any array is made
        ctx.budget.check(TensorType(tuple(out_shape), "float32"))
    except ShapeError as e:
        raise ctx.error(f"OneHot of depth {depth}: {e.message}") from None
    if indices.type.dtype != "int64":
        indices = ctx.emit("cast", [indices], to="int64")  # float indices truncate, as ONNX says
    negative = ctx.emit("less", [indices, ctx.new_const(np.int64(0))])
    wrapped = ctx.emit(
        "where", [negative, ctx.emit("add", [indices, ctx.new_const(np.int64(depth))]), indices]
    )
    shape = list(indices.type.shape)
    shape.insert(axis, 1)
    column = ctx.emit("reshape", [wrapped], shape=tuple(shape))
    view = [1] * rank
    view[axis] = depth
    positions = ctx.new_const(np.arange(depth, dtype=np.int64).reshape(view), name=f"{ctx.name}.positions")
    hit = ctx.emit("equal", [column, positions])
    off, on = (ctx.new_const(v, name=f"{ctx.name}.value{i}") for i, v in enumerate(values.reshape(-1)))
    return [ctx.emit("where", [hit, on, off])]


def _eye_like(ctx: NodeContext) -> Sequence[Expr]:
    """An identity matrix (ones on diagonal k) of the input's shape: a constant, the input's values
    are not read."""
    x = ctx.arg(0)
    if x.type.ndim != 2:
        raise ctx.error(f"EyeLike needs a 2-D input, got {list(x.type.shape)}")
    code = ctx.attr("dtype")
    dtype = x.type.dtype if code is None else onnx_dtype_name(int(code))
    if dtype is None:
        raise ctx.error(f"EyeLike dtype {code} (not one temper computes in)")
    rows, cols = x.type.shape
    return [ctx.new_const(np.eye(rows, cols, int(ctx.attr("k", 0)), dtype=dtype), name=f"{ctx.name}.eye")]


def _check_pad(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Modes constant, reflect and edge (not wrap)."""
    mode = attrs.get("mode", "constant")
    return None if mode in ("constant", "reflect", "edge") else f"Pad mode {mode!r}"


def _resize(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    rank = x.type.ndim
    scales = ctx.const(2, "Resize scales")
    sizes = ctx.const(3, "Resize sizes")
    axes = [_axis(ctx, a, rank) for a in ctx.attr("axes", range(rank))]
    out = list(x.type.shape)
    full_scales = [1.0] * rank
    if sizes is not None and sizes.size:
        if len(sizes) != len(axes):
            raise ctx.error(f"Resize sizes {sizes.tolist()} do not match axes {axes}")
        for a, s in zip(axes, sizes.tolist(), strict=True):
            out[a] = int(s)
            full_scales[a] = float(np.float32(s) / np.float32(x.type.shape[a]))
    elif scales is not None and scales.size:
        if len(scales) != len(axes):
            raise ctx.error(f"Resize scales {scales.tolist()} do not match axes {axes}")
        for a, s in zip(axes, scales.astype(np.float32).tolist(), strict=True):
            out[a] = int(np.float32(s) * np.float32(x.type.shape[a]))
            full_scales[a] = float(np.float32(s))
    else:
        raise ctx.error("Resize needs constant scales or sizes")
    mode = ctx.attr("mode", "nearest")
    cubic = {}
    if mode == "cubic":
        cubic = {
            "cubic_coeff_a": float(ctx.attr("cubic_coeff_a", -0.75)),
            "exclude_outside": int(ctx.attr("exclude_outside", 0)),
        }
    return [
        ctx.emit(
            "resize",
            [x],
            mode=mode,
            coordinate_transformation_mode=ctx.attr("coordinate_transformation_mode", "half_pixel"),
            nearest_mode=ctx.attr("nearest_mode", "round_prefer_floor"),
            sizes=tuple(out),
            scales=tuple(full_scales),
            **cubic,
        )
    ]


def _check_resize(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Modes nearest, linear and cubic; no tf_crop_and_resize, antialias or aspect-ratio policy."""
    if attrs.get("mode", "nearest") not in ("nearest", "linear", "cubic"):
        return f"Resize mode {attrs['mode']!r} (supported: nearest, linear, cubic)"
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        return "Resize coordinate_transformation_mode 'tf_crop_and_resize'"
    if attrs.get("antialias", 0):
        return "Resize antialias"
    if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return f"Resize keep_aspect_ratio_policy {attrs['keep_aspect_ratio_policy']!r}"
    return None


def _grid_sample(ctx: NodeContext) -> Sequence[Expr]:
    """GridSample; opsets 16-19 name the modes bilinear and bicubic, 20 and later linear and cubic."""
    mode = str(ctx.attr("mode", "bilinear" if ctx.opset < 20 else "linear"))
    return [
        ctx.emit(
            "grid_sample",
            [ctx.arg(0), ctx.arg(1)],
            mode={"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode),
            padding_mode=str(ctx.attr("padding_mode", "zeros")),
            align_corners=int(ctx.attr("align_corners", 0)),
        )
    ]


def _affine_grid(ctx: NodeContext) -> Sequence[Expr]:
    """AffineGrid of 2-D images: each point's normalized (x, y, 1) times its image's theta [2, 3],
    a matmul of the constant base grid [H * W, 3] by theta transposed, shaped [N, H, W, 2]."""
    theta = ctx.arg(0)
    size = ctx.ints(1, "AffineGrid size")
    assert size is not None
    if len(size) != 4 or theta.type.shape != (size[0], 2, 3):
        raise ctx.error(
            f"AffineGrid of size {list(size)} with theta {list(theta.type.shape)} "
            "(supported: size [N, C, H, W] with theta [N, 2, 3])"
        )
    n, _, h, w = size
    xs, ys = _grid_axis(w, ctx.attr("align_corners", 0)), _grid_axis(h, ctx.attr("align_corners", 0))
    base = np.stack([np.tile(xs, h), np.repeat(ys, w), np.ones(h * w, np.float32)], axis=1)
    points = ctx.new_const(base.astype(np.float32), name=f"{ctx.name}.base_grid")
    turned = ctx.emit("transpose", [theta], perm=(0, 2, 1))
    return [ctx.emit("reshape", [ctx.emit("matmul", [points, turned])], shape=(n, h, w, 2))]


def _grid_axis(size: int, align_corners: int) -> np.ndarray:
    """The normalized coordinates of an axis' pixel centres: -1 and 1 at the first and last centre with
    align_corners (a single pixel at 1, where onnxruntime puts it), at the image's edges without."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size, dtype=np.float32) if size > 1 else np.ones(1, np.float32)
    return ((np.arange(size, dtype=np.float32) * 2 + 1) / size - 1).astype(np.float32)


def _check_affine_grid(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """2-D grids (theta [N, 2, 3], size [N, C, H, W]; volumetric ones refused); a constant size."""
    rank = info.rank(node.output[0]) if node.output else None
    if rank is not None and rank != 4:
        return f"AffineGrid of a {rank - 2}-D grid (supported: 2-D, size [N, C, H, W])"
    if len(node.input) > 1 and node.input[1] not in info.consts:
        return "AffineGrid with a size computed at run time"
    return None


def _check_grid_sample(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """4-D inputs (N x C x H x W images; volumetric grids refused); modes linear, nearest and cubic."""
    rank = info.rank(node.input[0])
    if rank is not None and rank != 4:
        return f"GridSample of a {rank}-D input (supported: 4-D, N x C x H x W)"
    mode = attrs.get("mode", "linear")
    if mode not in ("bilinear", "linear", "nearest", "bicubic", "cubic"):
        return f"GridSample mode {mode!r}"
    return None


# ---- values known at compile time -------------------------------------------------------------------


def _shape(ctx: NodeContext) -> Sequence[Expr]:
    shape = ctx.arg(0).type.shape
    start, end = ctx.attr("start", 0), ctx.attr("end")
    return [ctx.new_const(np.array(shape[start:end], dtype=np.int64), name=ctx.node.output[0])]


def _size(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.new_const(np.array(ctx.arg(0).type.size, dtype=np.int64), name=ctx.node.output[0])]


def _constant_of_shape(ctx: NodeContext) -> Sequence[Expr]:
    shape = ctx.ints(0, "ConstantOfShape shape")
    assert shape is not None
    value = ctx.attr("value")
    fill = value.reshape(-1)[0] if value is not None else np.float32(0.0)
    return [ctx.full(shape, fill)]


def _constant(ctx: NodeContext) -> Sequence[Expr]:
    attrs = ctx.attrs
    if "value" in attrs:
        data = np.asarray(attrs["value"])
    elif "value_float" in attrs:
        data = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        data = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        data = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        data = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        raise ctx.error(f"Constant with {', '.join(attrs)} is not supported")
    return [ctx.new_const(data, name=ctx.node.output[0])]


def _check_constant(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """value, value_float(s) or value_int(s) (no sparse or string values)."""
    supported = ("value", "value_float", "value_floats", "value_int", "value_ints")
    return None if any(k in attrs for k in supported) else f"Constant with {', '.join(attrs) or 'no value'}"


def _identity(ctx: NodeContext) -> Sequence[Expr | None]:
    return [ctx.arg(0)]


def _dropout(ctx: NodeContext) -> Sequence[Expr | None]:
    training = ctx.const(2, "Dropout training_mode")
    if training is not None and bool(training.reshape(-1)[0]):
        raise ctx.error("Dropout in training mode is not supported")
    return [ctx.arg(0), None]


def _check_dropout(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Inference only (its mask output unused)."""
    return "Dropout mask output" if len(node.output) > 1 and node.output[1] in info.used else None


CONVERTERS: dict[str, OpConverter] = {
    "Reshape": OpConverter(_reshape),
    "Flatten": OpConverter(_flatten),
    "Squeeze": OpConverter(_squeeze),
    "Unsqueeze": OpConverter(_unsqueeze),
    "Transpose": OpConverter(_transpose),
    "DepthToSpace": OpConverter(_depth_to_space),
    "SpaceToDepth": OpConverter(_space_to_depth),
    "Concat": OpConverter(_concat),
    "Slice": OpConverter(_slice),
    "Split": OpConverter(_split),
    "Gather": OpConverter(_gather),
    "GatherND": OpConverter(_gather_nd),
    "CumSum": OpConverter(_cumulative, _check_cumulative),
    "CumProd": OpConverter(_cumulative, _check_cumulative),
    "Trilu": OpConverter(_trilu),
    "TopK": OpConverter(_topk),
    "ScatterND": OpConverter(_scatter("scatter_nd"), _check_scatter),
    "ScatterElements": OpConverter(_scatter("scatter_elements"), _check_scatter),
    "GatherElements": OpConverter(_gather_elements),
    "Expand": OpConverter(_expand),
    "Tile": OpConverter(_tile),
    "Pad": OpConverter(_pad, _check_pad),
    "CenterCropPad": OpConverter(_center_crop_pad, _check_constant_inputs),
    "OneHot": OpConverter(_one_hot, _check_constant_inputs),
    "EyeLike": OpConverter(_eye_like),
    "Resize": OpConverter(_resize, _check_resize),
    "GridSample": OpConverter(_grid_sample, _check_grid_sample),
    "AffineGrid": OpConverter(_affine_grid, _check_affine_grid),
    "Shape": OpConverter(_shape),
    "Size": OpConverter(_size),
    "ConstantOfShape": OpConverter(_constant_of_shape),
    "Constant": OpConverter(_constant, _check_constant),
    "Identity": OpConverter(_identity),
    "Dropout": OpConverter(_dropout, _check_dropout),
}
