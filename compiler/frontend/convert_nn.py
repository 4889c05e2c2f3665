"""ONNX neural-network ops -> graph ops: convolutions, pooling, dense layers, normalisations, reductions.

1-D convolutions and pools become their 2-D forms on an [N, C, 1, L] view; biases become a separate
`add` so that conv2d/matmul stay pure anchors; auto_pad becomes explicit pads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from compiler.errors import ShapeError
from compiler.frontend.context import Converter, NodeContext, OpConverter, ScanInfo
from compiler.frontend.convert_tensor import emit_slice
from compiler.graph.ir import Expr
from compiler.ops.common import norm_axis, pool_out_size, same_pads
from compiler.ops.conv_transpose import conv_transpose_out_size
from compiler.ops.pool import window_counts
from compiler.tensor_type import TensorType

# ---- shared window handling -------------------------------------------------------------------------


def _spatial_rank(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> int | None:
    if "kernel_shape" in attrs:
        return len(attrs["kernel_shape"])
    for name in node.input[1:2] or node.input[:1]:
        rank = info.rank(name)
        if rank is not None:
            return rank - 2
    return None


def _check_window(
    node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo, ranks: tuple[int, ...] = (1, 2)
) -> str | None:
    """Windows of `ranks` spatial axes only (by default 1-D and 2-D: 3-D refused)."""
    sp = _spatial_rank(node, attrs, info)
    if sp is not None and sp not in ranks:
        supported = ", ".join(f"{r}-D" for r in ranks)
        return f"{sp}-D {node.op_type} (supported: {supported})"
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        return f"auto_pad {attrs['auto_pad']!r}"
    return None


def window_geometry(ctx: NodeContext, x: Expr, kernel: Sequence[int]) -> dict[str, list[int]]:
    """Per-spatial-axis strides, dilations and (begin, end) pads with auto_pad resolved."""
    sp = len(kernel)
    strides = list(ctx.attr("strides", [1] * sp))
    dilations = list(ctx.attr("dilations", [1] * sp))
    if len(strides) != sp or len(dilations) != sp:
        raise ctx.error(f"strides {strides} / dilations {dilations} do not match a {sp}-D kernel")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    sizes = x.type.shape[2:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [
            same_pads(sizes[i], kernel[i], strides[i], dilations[i], auto_pad == "SAME_UPPER")
            for i in range(sp)
        ]
        pads = [p[0] for p in pairs] + [p[1] for p in pairs]
    elif auto_pad == "VALID":
        pads = [0] * (2 * sp)
    else:
        pads = list(ctx.attr("pads", [0] * (2 * sp)))
    if len(pads) != 2 * sp:
        raise ctx.error(f"pads {pads} do not match a {sp}-D kernel")
    return {"strides": strides, "dilations": dilations, "pads": pads}


def _to_2d(ctx: NodeContext, x: Expr) -> Expr:
    """[N, C, L] -> [N, C, 1, L]."""
    n, c, length = x.type.shape
    return ctx.emit("reshape", [x], shape=(n, c, 1, length))


def _lift(geom: dict[str, list[int]], kernel: Sequence[int]) -> dict[str, Any]:
    """2-D attributes of a window op: 1-D geometry gets a unit leading axis."""
    s, d, p = geom["strides"], geom["dilations"], geom["pads"]
    if len(kernel) == 1:
        return {
            "kernel": (1, kernel[0]),
            "strides": (1, s[0]),
            "dilations": (1, d[0]),
            "pads": (0, p[0], 0, p[1]),
        }
    return {"kernel": tuple(kernel), "strides": tuple(s), "dilations": tuple(d), "pads": tuple(p)}


def _from_2d(ctx: NodeContext, y: Expr, rank: int) -> Expr:
    if rank == 3:
        n, c, _, length = y.type.shape
        return ctx.emit("reshape", [y], shape=(n, c, length))
    return y


def _spatial_input(ctx: NodeContext) -> Expr:
    x = ctx.arg(0)
    if x.type.ndim not in (3, 4):
        raise ctx.error(
            f"{ctx.op_type} input must be 3-D or 4-D (1-D or 2-D spatial), got {list(x.type.shape)}"
        )
    return x


def _add_channel_bias(ctx: NodeContext, y: Expr, bias: Expr | None) -> Expr:
    if bias is None:
        return y
    b = ctx.emit("reshape", [bias], shape=(1, bias.type.size, 1, 1))
    return ctx.emit("add", [y, b])


# ---- convolutions -----------------------------------------------------------------------------------


def _check_conv(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """1-D, 2-D and 3-D convolutions (3-D: as 2-D convs over the frames, `_conv3d`)."""
    return _check_window(node, attrs, info, (1, 2, 3))


def _conv(ctx: NodeContext) -> Sequence[Expr]:
    x, w = ctx.arg(0), ctx.arg(1)
    kernel = list(w.type.shape[2:])
    if w.type.ndim != x.type.ndim or list(ctx.attr("kernel_shape", kernel)) != kernel:
        raise ctx.error(
            f"weight {list(w.type.shape)} does not match input {list(x.type.shape)} / kernel_shape"
        )
    if x.type.ndim == 5:
        return [_conv3d(ctx, x, w, window_geometry(ctx, x, kernel))]
    x = _spatial_input(ctx)
    g = _lift(window_geometry(ctx, x, kernel), kernel)
    if x.type.ndim == 3:
        x, w = _to_2d(ctx, x), _to_2d(ctx, w)
    y = ctx.emit(
        "conv2d",
        [x, w],
        strides=g["strides"],
        pads=g["pads"],
        dilations=g["dilations"],
        groups=ctx.attr("group", 1),
    )
    return [_from_2d(ctx, _add_channel_bias(ctx, y, ctx.optional(2)), ctx.arg(0).type.ndim)]


def _conv3d(ctx: NodeContext, x: Expr, w: Expr, geom: dict[str, list[int]]) -> Expr:
    """A 3-D conv [N, C, T, H, W] as one 2-D conv over the output frames: each output frame's kt input
    frames (the time taps) are stacked as channels, the frames of every sample are the 2-D conv's
    batch, and the weight's time taps join its input channels in the same order (per group)."""
    n, c, frames, h, wd = x.type.shape
    out_ch, cg, kt, kh, kw = w.type.shape
    groups = int(ctx.attr("group", 1))
    if groups < 1 or c % groups or cg * groups != c:
        raise ctx.error(
            f"weight {list(w.type.shape)} does not match input {list(x.type.shape)} in {groups} groups"
        )
    (st, sh, sw), (dt, dh, dw), pads = geom["strides"], geom["dilations"], geom["pads"]
    span = frames + pads[0] + pads[3] - dt * (kt - 1)
    if span < 1:
        raise ctx.error(f"kernel of {kt} frames (dilation {dt}) is larger than the {frames} padded frames")
    out_frames = (span - 1) // st + 1
    if pads[0] or pads[3]:
        x = ctx.emit("pad", [x], pads=(0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0), mode="constant", value=0.0)
        frames += pads[0] + pads[3]
    taps = [emit_slice(ctx, x, {2: (i * dt, i * dt + (out_frames - 1) * st + 1, st)}) for i in range(kt)]
    stacked = taps[0] if kt == 1 else ctx.emit("concat", taps, axis=1)  # channels (tap, channel)
    if kt > 1 and groups > 1:  # each group's channels together: (group, tap, channel of the group)
        stacked = ctx.emit("reshape", [stacked], shape=(n, kt, groups, cg, out_frames, h, wd))
        stacked = ctx.emit("transpose", [stacked], perm=(0, 2, 1, 3, 4, 5, 6))
        stacked = ctx.emit("reshape", [stacked], shape=(n, c * kt, out_frames, h, wd))
    planes = ctx.emit("transpose", [stacked], perm=(0, 2, 1, 3, 4))
    planes = ctx.emit("reshape", [planes], shape=(n * out_frames, c * kt, h, wd))
    weight = ctx.emit("transpose", [w], perm=(0, 2, 1, 3, 4))  # [O, kt, C/g, kh, kw]
    weight = ctx.emit("reshape", [weight], shape=(out_ch, kt * cg, kh, kw))
    y = ctx.emit(
        "conv2d",
        [planes, weight],
        strides=(sh, sw),
        pads=(pads[1], pads[2], pads[4], pads[5]),
        dilations=(dh, dw),
        groups=groups,
    )
    ho, wo = y.type.shape[2:]
    y = ctx.emit("reshape", [y], shape=(n, out_frames, out_ch, ho, wo))
    y = ctx.emit("transpose", [y], perm=(0, 2, 1, 3, 4))
    bias = ctx.optional(2)
    if bias is None:
        return y
    return ctx.emit("add", [y, ctx.emit("reshape", [bias], shape=(1, bias.type.size, 1, 1, 1))])


def _conv_transpose_pads(
    ctx: NodeContext, x: Expr, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Explicit (pads, output_padding) of ConvTranspose. With output_shape (or SAME_*: output =
    input * stride) the total padding goes mostly to the end for SAME_UPPER and mostly to the
    beginning otherwise (ONNX spec); an output larger than the natural one grows at the end."""
    sp = len(kernel)
    sizes = x.type.shape[2:]
    out_pad = list(ctx.attr("output_padding", [0] * sp))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    target = ctx.attr("output_shape")
    if target is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [sizes[i] * strides[i] for i in range(sp)]
    if target is None:
        pads = [0] * (2 * sp) if auto_pad == "VALID" else list(ctx.attr("pads", [0] * (2 * sp)))
        if len(pads) != 2 * sp:
            raise ctx.error(f"pads {pads} do not match a {sp}-D kernel")
        return pads, out_pad
    target = list(target)[-sp:]
    begins, ends = [], []
    for i in range(sp):
        natural = conv_transpose_out_size(sizes[i], kernel[i], strides[i], 0, 0, dilations[i], out_pad[i])
        total = natural - target[i]
        small = total // 2
        begin, end = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        if begin < 0:
            raise ctx.error(f"output_shape {target} is too large for this input (by {-total} along axis {i})")
        if end < 0:  # a larger output than the natural one: extra zero-fed rows at the end
            out_pad[i] += -end
            end = 0
        begins.append(begin)
        ends.append(end)
    return begins + ends, out_pad


def _conv_transpose(ctx: NodeContext) -> Sequence[Expr]:
    x, w = ctx.arg(0), ctx.arg(1)
    kernel = list(w.type.shape[2:])
    sp = len(kernel)
    if w.type.ndim != x.type.ndim or list(ctx.attr("kernel_shape", kernel)) != kernel:
        raise ctx.error(
            f"weight {list(w.type.shape)} does not match input {list(x.type.shape)} / kernel_shape"
        )
    strides = list(ctx.attr("strides", [1] * sp))
    dilations = list(ctx.attr("dilations", [1] * sp))
    out_pad = list(ctx.attr("output_padding", [0] * sp))
    if not len(strides) == len(dilations) == len(out_pad) == sp:
        raise ctx.error(f"strides / dilations / output_padding do not match a {sp}-D kernel")
    pads, out_pad = _conv_transpose_pads(ctx, x, kernel, strides, dilations)
    if x.type.ndim == 5:
        y = _conv_transpose3d(ctx, x, w, {"strides": strides, "dilations": dilations, "pads": pads}, out_pad)
        bias = ctx.optional(2)
        if bias is None:
            return [y]
        return [ctx.emit("add", [y, ctx.emit("reshape", [bias], shape=(1, bias.type.size, 1, 1, 1))])]
    x = _spatial_input(ctx)
    g = _lift({"strides": strides, "dilations": dilations, "pads": pads}, kernel)
    if x.type.ndim == 3:
        x, w = _to_2d(ctx, x), _to_2d(ctx, w)
        out_pad = [0, *out_pad]
    y = ctx.emit(
        "conv_transpose2d",
        [x, w],
        strides=g["strides"],
        pads=g["pads"],
        dilations=g["dilations"],
        groups=ctx.attr("group", 1),
        output_padding=tuple(out_pad),
    )
    return [_from_2d(ctx, _add_channel_bias(ctx, y, ctx.optional(2)), ctx.arg(0).type.ndim)]


def _conv_transpose3d(
    ctx: NodeContext, x: Expr, w: Expr, geom: dict[str, list[int]], out_pad: Sequence[int]
) -> Expr:
    """A 3-D transposed conv [N, C, T, H, W] as one 2-D transposed conv over frames: output frame
    s*q + r sums the input frames q - m through the kernel's time tap r + s*m (the time taps of a
    phase, as conv_transpose_phases splits a plane), so each frame q stacks its input frames q - m as
    channels, the 2-D transposed conv writes every time phase r as channels, and these interleave
    into frames; a slice crops the time pads."""
    weight = ctx.const(1, "a 3-D ConvTranspose's weight")
    assert weight is not None
    if int(ctx.attr("group", 1)) != 1:
        raise ctx.error("grouped 3-D ConvTranspose (supported: one group)")
    n, c, frames, h, wd = x.type.shape
    _, out_ch, kt, kh, kw = weight.shape
    (st, sh, sw), (dt, dh, dw), pads = geom["strides"], geom["dilations"], geom["pads"]
    reach = dt * (kt - 1) + 1
    taps = -(-reach // st)  # input frames per output frame of one phase
    try:  # a stride far beyond the kernel makes mostly-zero time taps: bounded like any constant
        ctx.budget.check(TensorType((taps * c, st * out_ch, kh, kw), "float32"))
    except ShapeError as e:
        raise ctx.error(f"3-D ConvTranspose's filters over its time phases: {e.message}") from None
    spread = np.zeros((c, out_ch, taps * st, kh, kw), dtype=np.float32)
    spread[:, :, :reach:dt] = weight
    by_tap = spread.reshape(c, out_ch, taps, st, kh, kw).transpose(2, 0, 3, 1, 4, 5)  # [m, c, r, o, ...]
    planes_weight = ctx.new_const(np.ascontiguousarray(by_tap.reshape(taps * c, st * out_ch, kh, kw)))
    full = st * (frames - 1) + out_pad[0] + reach  # output frames before the pads crop them
    rows = -(-full // st)  # frames of each phase
    before, after = taps - 1, max(0, rows - frames)
    if before or after:
        x = ctx.emit("pad", [x], pads=(0, 0, before, 0, 0, 0, 0, after, 0, 0), mode="constant", value=0.0)
    shifted = [emit_slice(ctx, x, {2: (before - m, before - m + rows, 1)}) for m in range(taps)]
    stacked = shifted[0] if taps == 1 else ctx.emit("concat", shifted, axis=1)  # channels (tap, channel)
    planes = ctx.emit("transpose", [stacked], perm=(0, 2, 1, 3, 4))
    planes = ctx.emit("reshape", [planes], shape=(n * rows, taps * c, h, wd))
    y = ctx.emit(
        "conv_transpose2d",
        [planes, planes_weight],
        strides=(sh, sw),
        pads=(pads[1], pads[2], pads[4], pads[5]),
        dilations=(dh, dw),
        groups=1,
        output_padding=(out_pad[1], out_pad[2]),
    )
    ho, wo = y.type.shape[2:]
    y = ctx.emit("reshape", [y], shape=(n, rows, st, out_ch, ho, wo))
    y = ctx.emit("transpose", [y], perm=(0, 3, 1, 2, 4, 5))
    y = ctx.emit("reshape", [y], shape=(n, out_ch, rows * st, ho, wo))
    return emit_slice(ctx, y, {2: (pads[0], full - pads[3], 1)})


def _check_conv_transpose(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """1-D, 2-D and 3-D transposed convolutions (3-D: one group, a weight known at compile time)."""
    reason = _check_window(node, attrs, info, (1, 2, 3))
    if reason is None and _spatial_rank(node, attrs, info) == 3:
        if int(attrs.get("group", 1)) != 1:
            return "grouped 3-D ConvTranspose (supported: one group)"
        if len(node.input) > 1 and node.input[1] not in info.consts:
            return "3-D ConvTranspose with a weight computed at run time"
    return reason


# ---- column-to-image --------------------------------------------------------------------------------


def _check_col2im(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """2-D images only (the output's rank, where shape inference knows it)."""
    rank = info.rank(node.output[0]) if node.output else None
    if rank is not None and rank != 4:
        return f"Col2Im of a {rank - 2}-D image (supported: 2-D)"
    return None


def _col2im(ctx: NodeContext) -> Sequence[Expr]:
    """Col2Im (nn.Fold): every column of the input is one block of the image, summed in where blocks
    overlap. Blocks that tile the image exactly (stride = block, no padding or dilation) are a
    rearrangement, as DepthToSpace; any other layout is a grouped ConvTranspose whose kernel is one-hot
    (block channel (i, j) of each image channel writes its pixel at offset (i, j)), so the overlapping
    sums, strides, dilations and pads are the transposed convolution's own."""
    x = ctx.arg(0)
    image, block = ctx.ints(1, "Col2Im image_shape"), ctx.ints(2, "Col2Im block_shape")
    if image is None or block is None:
        raise ctx.error("Col2Im needs image_shape and block_shape")
    if len(image) != 2 or len(block) != 2:
        raise ctx.error(f"Col2Im of a {len(image)}-D image with a {len(block)}-D block (supported: 2-D)")
    if x.type.ndim != 3:
        raise ctx.error(f"Col2Im input must be 3-D [N, C * block size, blocks], got {list(x.type.shape)}")
    strides = list(ctx.attr("strides", [1, 1]))
    dilations = list(ctx.attr("dilations", [1, 1]))
    pads = list(ctx.attr("pads", [0, 0, 0, 0]))
    if len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        raise ctx.error(f"strides {strides} / dilations {dilations} / pads {pads} do not match a 2-D image")
    if min(*image, *block, *strides, *dilations) < 1 or min(pads) < 0:
        raise ctx.error(
            f"Col2Im needs positive image_shape {image}, block_shape {block}, strides {strides} and "
            f"dilations {dilations}, and pads {pads} >= 0"
        )
    n, columns, length = x.type.shape
    kh, kw = block
    if columns % (kh * kw):
        raise ctx.error(f"input dim 1 ({columns}) is not a multiple of the block's {kh}x{kw} elements")
    c = columns // (kh * kw)
    spans = [image[i] + pads[i] + pads[i + 2] - dilations[i] * (block[i] - 1) - 1 for i in range(2)]
    if min(spans) < 0:
        raise ctx.error(f"block {block} (dilations {dilations}) is larger than the padded image {image}")
    bh, bw = (spans[i] // strides[i] + 1 for i in range(2))
    if bh * bw != length:
        raise ctx.error(
            f"input holds {length} blocks, but a {image[0]}x{image[1]} image with these pads, strides "
            f"and dilations has {bh}x{bw}"
        )
    y = ctx.emit("reshape", [x], shape=(n, columns, bh, bw))
    if strides == block and dilations == [1, 1] and not any(pads) and [bh * kh, bw * kw] == image:
        y = ctx.emit("reshape", [y], shape=(n, c, kh, kw, bh, bw))
        y = ctx.emit("transpose", [y], perm=(0, 1, 4, 2, 5, 3))
        return [ctx.emit("reshape", [y], shape=(n, c, image[0], image[1]))]
    if x.type.dtype != "float32":
        raise ctx.error(f"Col2Im of {x.type.dtype} with overlapping or spaced blocks (supported: float32)")
    weight_type = TensorType((columns, 1, kh, kw), x.type.dtype)
    try:
        ctx.budget.check(weight_type)
    except ShapeError as e:
        raise ctx.error(f"Col2Im's one-hot kernel: {e.message}") from None
    weight = np.zeros(weight_type.shape, dtype=np.float32)
    channel = np.arange(columns)
    weight[channel, 0, (channel // kw) % kh, channel % kw] = 1
    y = ctx.emit(
        "conv_transpose2d",
        [y, ctx.new_const(weight, name=f"{ctx.name}.one_hot")],
        strides=tuple(strides),
        pads=tuple(pads),
        dilations=tuple(dilations),
        groups=c,
        output_padding=tuple(spans[i] % strides[i] for i in range(2)),
    )
    return [y]


# ---- pooling ----------------------------------------------------------------------------------------


def _pool(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    kernel = list(ctx.attr("kernel_shape", []))
    if len(kernel) != x.type.ndim - 2:
        raise ctx.error(f"kernel_shape {kernel} does not match input {list(x.type.shape)}")
    if x.type.ndim == 5:
        return [_pool3d(ctx, x, kernel, window_geometry(ctx, x, kernel))]
    x = _spatial_input(ctx)
    g = _lift(window_geometry(ctx, x, kernel), kernel)
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    x2 = _to_2d(ctx, x) if x.type.ndim == 3 else x
    common = {"kernel": g["kernel"], "strides": g["strides"], "pads": g["pads"], "ceil_mode": ceil_mode}
    if ctx.op_type == "MaxPool":
        y = ctx.emit("max_pool2d", [x2], dilations=g["dilations"], **common)
    else:
        y = ctx.emit("avg_pool2d", [x2], count_include_pad=int(ctx.attr("count_include_pad", 0)), **common)
    return [_from_2d(ctx, y, x.type.ndim)]


def _pool3d(ctx: NodeContext, x: Expr, kernel: Sequence[int], geom: dict[str, list[int]]) -> Expr:
    """A 3-D pool [N, C, T, H, W] as the 2-D pool of every frame, then the window over time: the
    max (or the sum) of the time taps of those pooled frames; an average divides by the valid time
    taps, as the 2-D pool divided by the valid taps of its plane (the window's count is their product)."""
    n, c, frames, h, wd = x.type.shape
    kt, st, dt = kernel[0], geom["strides"][0], geom["dilations"][0]
    before, after = geom["pads"][0], geom["pads"][3]
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    out_frames = pool_out_size(frames, kt, st, before, after, dt, bool(ceil_mode))
    if out_frames < 1:
        raise ctx.error(f"window of {kt} frames (dilation {dt}) is larger than the {frames} padded frames")
    planes = ctx.emit("transpose", [x], perm=(0, 2, 1, 3, 4))
    planes = ctx.emit("reshape", [planes], shape=(n * frames, c, h, wd))
    common = {
        "kernel": tuple(kernel[1:]),
        "strides": tuple(geom["strides"][1:]),
        "pads": (geom["pads"][1], geom["pads"][2], geom["pads"][4], geom["pads"][5]),
        "ceil_mode": ceil_mode,
    }
    is_max = ctx.op_type == "MaxPool"
    include_pad = int(ctx.attr("count_include_pad", 0))
    if is_max:
        pooled = ctx.emit("max_pool2d", [planes], dilations=tuple(geom["dilations"][1:]), **common)
    else:
        pooled = ctx.emit("avg_pool2d", [planes], count_include_pad=include_pad, **common)
    ho, wo = pooled.type.shape[2:]
    pooled = ctx.emit("reshape", [pooled], shape=(n, frames, c, ho, wo))
    reach = (out_frames - 1) * st + dt * (kt - 1) + 1  # the padded frames the windows read
    end = max(0, reach - frames - before)
    if before or end:
        fill = -np.inf if is_max else 0.0
        pooled = ctx.emit(
            "pad", [pooled], pads=(0, before, 0, 0, 0, 0, end, 0, 0, 0), mode="constant", value=fill
        )
    total: Expr | None = None
    for i in range(kt):
        start = i * dt
        tap = emit_slice(ctx, pooled, {1: (start, start + (out_frames - 1) * st + 1, st)})
        total = tap if total is None else ctx.emit("maximum" if is_max else "add", [total, tap])
    assert total is not None
    if not is_max:
        counts = window_counts(frames, kt, st, before, after, out_frames, bool(include_pad))
        scale = (1.0 / np.maximum(counts, 1.0)).astype(np.float32).reshape(1, out_frames, 1, 1, 1)
        total = ctx.emit("mul", [total, ctx.new_const(scale, name=f"{ctx.name}.frame_counts")])
    return ctx.emit("transpose", [total], perm=(0, 2, 1, 3, 4))


def _check_pool(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """No MaxPool Indices output, no dilated AveragePool; 1-D, 2-D and 3-D windows (3-D: the 2-D pool
    of every frame, then the window over time)."""
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1] in info.used:
        return "MaxPool Indices output"
    if node.op_type == "AveragePool" and any(d != 1 for d in attrs.get("dilations", [])):
        return "dilated AveragePool"
    return _check_window(node, attrs, info, (1, 2, 3))


def _global_pool(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Sequence[Expr]:
        x = ctx.arg(0)
        return [ctx.emit(op, [x], axes=tuple(range(2, x.type.ndim)), keepdims=1)]

    return convert


# ---- dense ------------------------------------------------------------------------------------------


def _matmul(ctx: NodeContext) -> Sequence[Expr]:
    a, b = ctx.arg(0), ctx.arg(1)
    squeeze_a, squeeze_b = a.type.ndim == 1, b.type.ndim == 1
    if squeeze_a:
        a = ctx.emit("reshape", [a], shape=(1, a.type.shape[0]))
    if squeeze_b:
        b = ctx.emit("reshape", [b], shape=(b.type.shape[0], 1))
    lead = a.type.shape[:-2]
    if b.type.ndim == 2 and not squeeze_b and math.prod(lead) > 1:
        # A 2-D right operand is shared by every batch of the left one: one GEMM over all their rows,
        # not a batch of small ones ([197, 1, 768] x [768, 2304] is 197 GEMVs otherwise).
        rows = math.prod(a.type.shape[:-1])
        flat = ctx.emit("matmul", [ctx.emit("reshape", [a], shape=(rows, a.type.shape[-1])), b])
        return [ctx.emit("reshape", [flat], shape=(*a.type.shape[:-1], b.type.shape[-1]))]
    y = ctx.emit("matmul", [a, b])
    if squeeze_a or squeeze_b:
        shape = list(y.type.shape)
        if squeeze_b:
            shape.pop(-1)
        if squeeze_a:
            shape.pop(-2 if not squeeze_b else -1)
        y = ctx.emit("reshape", [y], shape=tuple(shape))
    return [y]


def _gemm(ctx: NodeContext) -> Sequence[Expr]:
    a, b, c = ctx.arg(0), ctx.arg(1), ctx.optional(2)
    if a.type.ndim != 2 or b.type.ndim != 2:
        raise ctx.error(f"Gemm operands must be 2-D, got {list(a.type.shape)} and {list(b.type.shape)}")
    if ctx.attr("transA", 0):
        a = ctx.emit("transpose", [a], perm=(1, 0))
    if ctx.attr("transB", 0):
        b = ctx.emit("transpose", [b], perm=(1, 0))
    y = ctx.emit("matmul", [a, b])
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = ctx.emit("mul", [y, ctx.new_const(alpha, y.type.dtype)])
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = ctx.emit("mul", [c, ctx.new_const(beta, c.type.dtype)])
        y = ctx.emit("add", [y, c])
    if y.type.shape != (a.type.shape[0], b.type.shape[1]):
        raise ctx.error(f"Gemm bias C {list(c.type.shape) if c else []} does not broadcast to the output")
    return [y]


# ---- normalisation, softmax -------------------------------------------------------------------------


def _batch_norm(ctx: NodeContext) -> Sequence[Expr]:
    args = [ctx.arg(i) for i in range(5)]
    return [ctx.emit("batch_norm", args, epsilon=float(ctx.attr("epsilon", 1e-5)))]


def _check_batch_norm(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Inference mode only (no training-mode BatchNormalization)."""
    if attrs.get("training_mode", 0) or any(o in info.used for o in node.output[1:]):
        return "BatchNormalization in training mode"
    return None


def _layer_norm(ctx: NodeContext) -> Sequence[Expr]:
    x, scale, bias = ctx.arg(0), ctx.arg(1), ctx.optional(2)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.type.ndim)
    if bias is None:
        bias = ctx.new_const(np.zeros(scale.type.shape, dtype=scale.type.dtype))
    return [ctx.emit("layer_norm", [x, scale, bias], axis=axis, epsilon=float(ctx.attr("epsilon", 1e-5)))]


def _normalize_groups(ctx: NodeContext, x: Expr, groups: int, epsilon: float) -> Expr:
    """x [N, C, ...] normalized over each of `groups` groups of channels (with their spatial dims),
    without an affine: layer_norm over the flattened group, then back to x's shape."""
    n, c = x.type.shape[0], x.type.shape[1]
    if groups < 1 or c % groups:
        raise ctx.error(f"{c} channels do not split into {groups} groups")
    per_group = x.type.size // (n * groups)
    flat = ctx.emit("reshape", [x], shape=(n, groups, per_group))
    ones = ctx.new_const(np.ones(per_group, np.float32), name=f"{ctx.name}.ones")
    zeros = ctx.new_const(np.zeros(per_group, np.float32), name=f"{ctx.name}.zeros")
    normed = ctx.emit("layer_norm", [flat, ones, zeros], axis=2, epsilon=epsilon)
    return ctx.emit("reshape", [normed], shape=x.type.shape)


def _channel_affine(ctx: NodeContext, y: Expr, scale: Expr, bias: Expr) -> Expr:
    """y * scale[c] + bias[c] with the per-channel vectors broadcast along N and the spatial dims."""
    view = (1, y.type.shape[1], *([1] * (y.type.ndim - 2)))
    scaled = ctx.emit("mul", [y, ctx.emit("reshape", [scale], shape=view)])
    return ctx.emit("add", [scaled, ctx.emit("reshape", [bias], shape=view)])


def _instance_norm(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    if x.type.ndim < 3:
        raise ctx.error(f"InstanceNormalization needs rank >= 3, got {list(x.type.shape)}")
    y = _normalize_groups(ctx, x, x.type.shape[1], float(ctx.attr("epsilon", 1e-5)))
    return [_channel_affine(ctx, y, ctx.arg(1), ctx.arg(2))]


def _group_norm(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    groups = int(ctx.attr("num_groups", 0))
    if x.type.ndim < 3:
        raise ctx.error(f"GroupNormalization needs rank >= 3, got {list(x.type.shape)}")
    y = _normalize_groups(ctx, x, groups, float(ctx.attr("epsilon", 1e-5)))
    # opset 21's per-channel scale and bias (18's per-group form is deprecated: the checker refuses it)
    return [_channel_affine(ctx, y, ctx.arg(1), ctx.arg(2))]


def _lrn(ctx: NodeContext) -> Sequence[Expr]:
    """Local response normalization (AlexNet, GoogLeNet): x / (bias + alpha/size * sum x^2)^beta, the
    sum over a window of `size` channels around each one. The window sum is an average pool (padding
    counted, times size) along the channel axis of an [N, 1, C, spatial] view of x^2."""
    x = ctx.arg(0)
    size = int(ctx.attr("size", 0))
    if x.type.ndim < 3:
        raise ctx.error(f"LRN input must be [N, C, D1, ...], got {list(x.type.shape)}")
    if size < 1:
        raise ctx.error(f"LRN size must be a positive integer, got {size}")
    alpha, beta = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    n, c = x.type.shape[0], x.type.shape[1]
    spatial = x.type.size // max(n * c, 1)
    squares = ctx.emit("reshape", [ctx.emit("mul", [x, x])], shape=(n, 1, c, spatial))
    before, after = (size - 1) // 2, size // 2
    mean = ctx.emit(
        "avg_pool2d",
        [squares],
        kernel=(size, 1),
        strides=(1, 1),
        pads=(before, 0, after, 0),
        ceil_mode=0,
        count_include_pad=1,
    )
    dtype = x.type.dtype
    scaled = ctx.emit("mul", [mean, ctx.new_const(alpha, dtype)])
    base = ctx.emit("add", [scaled, ctx.new_const(bias, dtype)])
    denominator = ctx.emit("pow", [base, ctx.new_const(beta, dtype)])
    return [ctx.emit("div", [x, ctx.emit("reshape", [denominator], shape=x.type.shape)])]


def _check_layer_norm(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Y output only (no Mean / InvStdDev outputs)."""
    if any(o in info.used for o in node.output[1:]):
        return "LayerNormalization Mean / InvStdDev outputs"
    return None


def _softmax(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Sequence[Expr]:
        x = ctx.arg(0)
        return [ctx.emit(op, [x], axis=norm_axis(int(ctx.attr("axis", -1)), x.type.ndim))]

    return convert


# ---- reductions -------------------------------------------------------------------------------------


def reduce_axes(ctx: NodeContext, x: Expr) -> tuple[int, ...] | None:
    """Resolved axes, or None when the node is an identity (empty axes with noop_with_empty_axes)."""
    axes_from_input = ctx.op_type == "ReduceSum" or ctx.opset >= 18
    axes = ctx.ints(1, "axes") if axes_from_input else ctx.attr("axes")
    if not axes:
        if ctx.attr("noop_with_empty_axes", 0):
            return None
        return tuple(range(x.type.ndim))
    try:
        return tuple(sorted({norm_axis(int(a), x.type.ndim) for a in axes}))
    except ShapeError as e:
        raise ctx.error(e.message) from None


def _reduce(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axes = reduce_axes(ctx, x)
    op = ctx.op_type
    if axes is None:  # nothing reduced: what each op computes of one element
        if op == "ReduceSumSquare":
            return [ctx.emit("mul", [x, x])]
        return [ctx.emit("abs", [x])] if op in ("ReduceL1", "ReduceL2") else [x]
    kw = {"axes": axes, "keepdims": int(ctx.attr("keepdims", 1))}
    if x.type.dtype == "bool" and op in ("ReduceMax", "ReduceMin"):  # any / all (opset 20 on)
        flags = ctx.emit("cast", [x], to="int32")
        if op == "ReduceMin":
            flags = ctx.emit("neg", [ctx.emit("reduce_max", [ctx.emit("neg", [flags])], **kw)])
        else:
            flags = ctx.emit("reduce_max", [flags], **kw)
        return [ctx.emit("cast", [flags], to="bool")]
    if op == "ReduceMin":
        return [ctx.emit("neg", [ctx.emit("reduce_max", [ctx.emit("neg", [x])], **kw)])]
    if op in ("ReduceSumSquare", "ReduceL2"):
        total = ctx.emit("reduce_sum", [ctx.emit("mul", [x, x])], **kw)
        return [ctx.emit("sqrt", [total]) if op == "ReduceL2" else total]
    if op == "ReduceL1":
        return [ctx.emit("reduce_sum", [ctx.emit("abs", [x])], **kw)]
    base = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max"}[op]
    return [ctx.emit(base, [x], **kw)]


def _extreme_position(ctx: NodeContext, x: Expr, axis: int, keepdims: int, last: bool) -> Expr:
    """The first (or last) position along `axis` of x's maximum, as int64: the maximum along the axis,
    then the extreme position that holds it (the reductions temper has)."""
    n = x.type.shape[axis]
    extreme = ctx.emit("reduce_max", [x], axes=(axis,), keepdims=1)
    hit = ctx.emit("equal", [x, extreme])
    positions = _positions(ctx, n, axis, x.type.ndim)
    if last:
        chosen = ctx.emit("where", [hit, positions, ctx.new_const(np.int64(-1))])
        return ctx.emit("reduce_max", [chosen], axes=(axis,), keepdims=keepdims)
    chosen = ctx.emit("where", [hit, ctx.emit("neg", [positions]), ctx.new_const(np.int64(-n))])
    return ctx.emit("neg", [ctx.emit("reduce_max", [chosen], axes=(axis,), keepdims=keepdims)])


def _positions(ctx: NodeContext, n: int, axis: int, rank: int) -> Expr:
    """0..n-1 (int64) along `axis` of a tensor of `rank`, 1 along the other axes."""
    view = [1] * rank
    view[axis] = n
    return ctx.new_const(np.arange(n, dtype=np.int64).reshape(view), name=f"{ctx.name}.positions")


def _arg_extreme(ctx: NodeContext) -> Sequence[Expr]:
    """ArgMax / ArgMin: the first (or, with select_last_index, the last) position of the extreme."""
    x = ctx.arg(0)
    axis = norm_axis(int(ctx.attr("axis", 0)), x.type.ndim)
    source = x if ctx.op_type == "ArgMax" else ctx.emit("neg", [x])
    keepdims = int(ctx.attr("keepdims", 1))
    return [_extreme_position(ctx, source, axis, keepdims, bool(ctx.attr("select_last_index", 0)))]


def _hardmax(ctx: NodeContext) -> Sequence[Expr]:
    """1 at the first maximum along `axis`, 0 elsewhere."""
    x = ctx.arg(0)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.type.ndim)
    first = _extreme_position(ctx, x, axis, 1, last=False)
    hit = ctx.emit("equal", [_positions(ctx, x.type.shape[axis], axis, x.type.ndim), first])
    return [ctx.emit("cast", [hit], to=x.type.dtype)]


# ---- norms ------------------------------------------------------------------------------------------


def _lp_norm(ctx: NodeContext, x: Expr, p: float, axes: tuple[int, ...]) -> Expr:
    """(sum |x|^p)^(1/p) over `axes`, kept as size-1 dims."""
    if p == 2:
        return ctx.emit("sqrt", [ctx.emit("reduce_sum", [ctx.emit("mul", [x, x])], axes=axes, keepdims=1)])
    if p == 1:
        return ctx.emit("reduce_sum", [ctx.emit("abs", [x])], axes=axes, keepdims=1)
    powered = ctx.emit("pow", [ctx.emit("abs", [x]), ctx.new_const(np.float32(p))])
    total = ctx.emit("reduce_sum", [powered], axes=axes, keepdims=1)
    return ctx.emit("pow", [total, ctx.new_const(np.float32(1.0 / p))])


def _lp_normalization(ctx: NodeContext) -> Sequence[Expr]:
    """x over its L1 or L2 norm along `axis`; a vector of zeros stays zeros, as onnxruntime leaves it."""
    x = ctx.arg(0)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.type.ndim)
    norm = _lp_norm(ctx, x, int(ctx.attr("p", 2)), (axis,))
    zero = ctx.emit("equal", [norm, ctx.new_const(np.float32(0))])
    safe = ctx.emit("where", [zero, ctx.new_const(np.float32(1)), norm])
    return [ctx.emit("div", [x, safe])]


def _check_lp(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """LpNormalization of p 1 or 2 (all ONNX defines); LpPool without dilations."""
    if node.op_type == "LpNormalization" and int(attrs.get("p", 2)) not in (1, 2):
        return f"LpNormalization p={attrs['p']} (ONNX defines 1 and 2)"
    if node.op_type == "LpPool" and any(d != 1 for d in attrs.get("dilations", [])):
        return "dilated LpPool"
    if node.op_type == "LpPool":
        return _check_window(node, attrs, info)
    return None


def _mean_variance_normalization(ctx: NodeContext) -> Sequence[Expr]:
    """(x - mean) / (standard deviation + 1e-9) over `axes` (ONNX's definition, its epsilon)."""
    x = ctx.arg(0)
    axes = tuple(sorted({norm_axis(int(a), x.type.ndim) for a in ctx.attr("axes", [0, 2, 3])}))
    mean = ctx.emit("reduce_mean", [x], axes=axes, keepdims=1)
    centred = ctx.emit("sub", [x, mean])
    variance = ctx.emit("reduce_mean", [ctx.emit("mul", [centred, centred])], axes=axes, keepdims=1)
    deviation = ctx.emit("add", [ctx.emit("sqrt", [variance]), ctx.new_const(np.float32(1e-9))])
    return [ctx.emit("div", [centred, deviation])]


def _lp_pool(ctx: NodeContext) -> Sequence[Expr]:
    """(sum over the window of |x|^p)^(1/p): the average pool of |x|^p counting the pads, times the
    taps it divided by."""
    x = _spatial_input(ctx)
    kernel = list(ctx.attr("kernel_shape", []))
    if len(kernel) != x.type.ndim - 2:
        raise ctx.error(f"kernel_shape {kernel} does not match input {list(x.type.shape)}")
    g = _lift(window_geometry(ctx, x, kernel), kernel)
    p = float(ctx.attr("p", 2))
    x2 = _to_2d(ctx, x) if x.type.ndim == 3 else x
    powered = (
        ctx.emit("mul", [x2, x2])
        if p == 2
        else ctx.emit("pow", [ctx.emit("abs", [x2]), ctx.new_const(np.float32(p))])
    )
    ceil_mode = int(ctx.attr("ceil_mode", 0))
    mean = ctx.emit(
        "avg_pool2d",
        [powered],
        kernel=g["kernel"],
        strides=g["strides"],
        pads=g["pads"],
        ceil_mode=ceil_mode,
        count_include_pad=1,
    )
    (kh, kw), (sh, sw), (top, left, bottom, right) = g["kernel"], g["strides"], g["pads"]
    oh, ow = mean.type.shape[2:]
    rows = window_counts(x2.type.shape[2], kh, sh, top, bottom, oh, True)
    cols = window_counts(x2.type.shape[3], kw, sw, left, right, ow, True)
    taps = np.maximum(np.outer(rows, cols), 1.0).astype(np.float32)
    total = ctx.emit("mul", [mean, ctx.new_const(taps, name=f"{ctx.name}.taps")])
    y = ctx.emit("sqrt", [total]) if p == 2 else ctx.emit("pow", [total, ctx.new_const(np.float32(1.0 / p))])
    return [_from_2d(ctx, y, x.type.ndim)]


def _global_lp_pool(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    return [_lp_norm(ctx, x, float(ctx.attr("p", 2)), tuple(range(2, x.type.ndim)))]


CONVERTERS: dict[str, OpConverter] = {
    "ArgMax": OpConverter(_arg_extreme),
    "Hardmax": OpConverter(_hardmax),
    "LpNormalization": OpConverter(_lp_normalization, _check_lp),
    "MeanVarianceNormalization": OpConverter(_mean_variance_normalization),
    "LpPool": OpConverter(_lp_pool, _check_lp),
    "GlobalLpPool": OpConverter(_global_lp_pool),
    "ArgMin": OpConverter(_arg_extreme),
    "Conv": OpConverter(_conv, _check_conv),
    "ConvTranspose": OpConverter(_conv_transpose, _check_conv_transpose),
    "Col2Im": OpConverter(_col2im, _check_col2im),
    "MaxPool": OpConverter(_pool, _check_pool),
    "AveragePool": OpConverter(_pool, _check_pool),
    "GlobalAveragePool": OpConverter(_global_pool("reduce_mean")),
    "GlobalMaxPool": OpConverter(_global_pool("reduce_max")),
    "MatMul": OpConverter(_matmul),
    "Gemm": OpConverter(_gemm),
    "BatchNormalization": OpConverter(_batch_norm, _check_batch_norm),
    "LayerNormalization": OpConverter(_layer_norm, _check_layer_norm),
    "InstanceNormalization": OpConverter(_instance_norm),
    "GroupNormalization": OpConverter(_group_norm),
    "LRN": OpConverter(_lrn),
    "Softmax": OpConverter(_softmax("softmax")),
    "LogSoftmax": OpConverter(_softmax("log_softmax")),
    **{
        op: OpConverter(_reduce)
        for op in (
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceSumSquare",
            "ReduceL2",
            "ReduceL1",
        )
    },
}
