"""The transformer ops of opsets 23-24 as the ops temper has: RMSNormalization, RotaryEmbedding, Swish.

What the torch exporter writes for `rms_norm`, rotary position embeddings and SiLU-with-a-slope from
opset 23 on. Each is a short chain of elementwise ops, reductions, slices and gathers that fusion
puts back together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compiler.frontend.context import NodeContext, OpConverter
from compiler.frontend.convert_tensor import emit_slice
from compiler.graph.ir import Expr
from compiler.ops.common import norm_axis


def _rms_norm(ctx: NodeContext) -> Sequence[Expr]:
    """x / sqrt(mean(x^2 over axis..last) + epsilon) * scale."""
    x, scale = ctx.arg(0), ctx.arg(1)
    axis = norm_axis(int(ctx.attr("axis", -1)), x.type.ndim)
    axes = tuple(range(axis, x.type.ndim))
    epsilon = ctx.new_const(np.float32(ctx.attr("epsilon", 1e-5)), name=f"{ctx.name}.epsilon")
    mean_square = ctx.emit("reduce_mean", [ctx.emit("mul", [x, x])], axes=axes, keepdims=1)
    rms = ctx.emit("sqrt", [ctx.emit("add", [mean_square, epsilon])])
    return [ctx.emit("mul", [ctx.emit("div", [x, rms]), scale])]


def _swish(ctx: NodeContext) -> Sequence[Expr]:
    """x * sigmoid(alpha * x)."""
    x = ctx.arg(0)
    alpha = float(ctx.attr("alpha", 1.0))
    slope = ctx.new_const(np.float32(alpha), name=f"{ctx.name}.alpha")
    gate = x if alpha == 1.0 else ctx.emit("mul", [x, slope])
    return [ctx.emit("mul", [x, ctx.emit("sigmoid", [gate])])]


def _last_slice(ctx: NodeContext, x: Expr, start: int, end: int, step: int = 1) -> Expr:
    return emit_slice(ctx, x, {x.type.ndim - 1: (start, end, step)})


def _rotary_embedding(ctx: NodeContext) -> Sequence[Expr]:
    """Rotate pairs of each head's first `rotary_embedding_dim` features by the cached cos/sin of the
    token's position: halves (x1, x2) or, interleaved, even/odd features (x1, x2) become
    (cos x1 - sin x2, sin x1 + cos x2); the other features pass through."""
    x, cos, sin, positions = ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.optional(3)
    shape = x.type.shape
    if x.type.ndim == 4:  # [B, heads, S, D] -> [B, S, heads, D]
        heads_last = ctx.emit("transpose", [x], perm=(0, 2, 1, 3))
    elif x.type.ndim == 3:
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0 or shape[2] % heads:
            raise ctx.error(f"input of shape {shape} does not split into num_heads = {heads} heads")
        heads_last = ctx.emit("reshape", [x], shape=(shape[0], shape[1], heads, shape[2] // heads))
    else:
        raise ctx.error(f"input must be 3-D or 4-D, got shape {shape}")
    b, s, h, d = heads_last.type.shape
    rot = int(ctx.attr("rotary_embedding_dim", 0)) or d
    if rot > d or rot % 2:
        raise ctx.error(f"rotary_embedding_dim {rot} must be even and at most the head size {d}")
    if positions is not None:
        cos, sin = ctx.emit("gather", [cos, positions], axis=0), ctx.emit("gather", [sin, positions], axis=0)
    if cos.type.shape[-1] != rot // 2 or sin.type.shape[-1] != rot // 2:
        raise ctx.error(
            f"cos/sin caches {cos.type.shape}, {sin.type.shape} do not end in"
            f" rotary_embedding_dim/2 = {rot // 2}"
        )
    cos = ctx.emit("reshape", [cos], shape=(b, s, 1, rot // 2))
    sin = ctx.emit("reshape", [sin], shape=(b, s, 1, rot // 2))
    interleaved = bool(ctx.attr("interleaved", 0))
    if interleaved:
        x1, x2 = _last_slice(ctx, heads_last, 0, rot, 2), _last_slice(ctx, heads_last, 1, rot, 2)
    else:
        x1, x2 = _last_slice(ctx, heads_last, 0, rot // 2), _last_slice(ctx, heads_last, rot // 2, rot)
    real = ctx.emit("sub", [ctx.emit("mul", [cos, x1]), ctx.emit("mul", [sin, x2])])
    imag = ctx.emit("add", [ctx.emit("mul", [sin, x1]), ctx.emit("mul", [cos, x2])])
    if interleaved:
        pairs = [ctx.emit("reshape", [part], shape=(b, s, h, rot // 2, 1)) for part in (real, imag)]
        rotated = ctx.emit("reshape", [ctx.emit("concat", pairs, axis=4)], shape=(b, s, h, rot))
    else:
        rotated = ctx.emit("concat", [real, imag], axis=3)
    if rot < d:
        rotated = ctx.emit("concat", [rotated, _last_slice(ctx, heads_last, rot, d)], axis=3)
    if x.type.ndim == 4:
        return [ctx.emit("transpose", [rotated], perm=(0, 2, 1, 3))]
    return [ctx.emit("reshape", [rotated], shape=shape)]


CONVERTERS: dict[str, OpConverter] = {
    "RMSNormalization": OpConverter(_rms_norm),
    "RotaryEmbedding": OpConverter(_rotary_embedding),
    "Swish": OpConverter(_swish),
}
