"""ONNX Attention (opsets 23-25) as the ops temper has: matmuls, a softmax and masks.

What the current torch exporter writes for `scaled_dot_product_attention` from opset 23 on. Inputs are
[batch, heads, seq, head] (4-D) or [batch, seq, heads * head] (3-D, split by q_num_heads and
kv_num_heads). Grouped-query attention repeats each key/value head for its query heads; a past key
and value are prepended along the sequence (and returned as the present ones). The bias added to the
scaled scores is built at compile time wherever it can be (causal and sliding-window masks, constant
masks) and otherwise from the mask input at run time: a boolean mask becomes 0 / -inf, a float mask is
added as is. A query row whose every key is masked gives zeros, as the operator defines. Scores may be
soft-capped; `qk_matmul_output` returns the scores at the stage `qk_matmul_output_mode` names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from compiler.frontend.context import NodeContext, OpConverter
from compiler.graph.ir import Const, Expr

_NEG_INF = np.float32(-np.inf)


def _heads_first(ctx: NodeContext, x: Expr, heads: int | None, what: str) -> Expr:
    """[B, S, heads * D] -> [B, heads, S, D]; 4-D inputs are already in that layout."""
    if x.type.ndim == 4:
        return x
    if x.type.ndim != 3:
        raise ctx.error(f"{what} must be 3-D or 4-D, got shape {x.type.shape}")
    if not heads or x.type.shape[2] % heads:
        raise ctx.error(
            f"{what} of shape {x.type.shape} does not split into q_num_heads/kv_num_heads = {heads} heads"
        )
    b, s, hidden = x.type.shape
    split = ctx.emit("reshape", [x], shape=(b, s, heads, hidden // heads))
    return ctx.emit("transpose", [split], perm=(0, 2, 1, 3))


def _repeat_heads(ctx: NodeContext, x: Expr, times: int) -> Expr:
    """[B, H, S, D] -> [B, H * times, S, D], each head repeated `times` times in a row (np.repeat)."""
    if times == 1:
        return x
    b, h, s, d = x.type.shape
    wide = ctx.emit("expand", [ctx.emit("reshape", [x], shape=(b, h, 1, s, d))], shape=(b, h, times, s, d))
    return ctx.emit("reshape", [wide], shape=(b, h * times, s, d))


def _static_bias(ctx: NodeContext, q_len: int, kv_len: int, past: int) -> np.ndarray | None:
    """The causal / sliding-window part of the bias, [q_len, kv_len] (None when neither applies)."""
    causal = bool(ctx.attr("is_causal", 0))
    left, right = int(ctx.attr("left_window_size", -1)), int(ctx.attr("right_window_size", -1))
    if not causal and left < 0 and right < 0:
        return None
    i = np.arange(q_len).reshape(q_len, 1) + past
    j = np.arange(kv_len).reshape(1, kv_len)
    allowed = np.ones((q_len, kv_len), dtype=bool)
    if causal:
        allowed &= j <= i
    if left >= 0:
        allowed &= i - j <= left
    if right >= 0:
        allowed &= j - i <= right
    return np.where(allowed, np.float32(0), _NEG_INF).astype(np.float32)


def _mask_bias(ctx: NodeContext, mask: Expr, kv_len: int) -> Expr:
    """The mask input as an additive bias, padded to the key length (padding: masked)."""
    short = kv_len - mask.type.shape[-1]
    if short < 0:
        raise ctx.error(f"attn_mask {mask.type.shape} is longer than the {kv_len} keys")
    if mask.type.dtype == "bool":
        if isinstance(mask, Const):
            bias_data = np.where(mask.data, np.float32(0), _NEG_INF).astype(np.float32)
            bias: Expr = ctx.new_const(bias_data, name=f"{ctx.name}.mask_bias")
        else:
            zero = ctx.new_const(np.float32(0), name=f"{ctx.name}.zero")
            neg = ctx.new_const(_NEG_INF, name=f"{ctx.name}.neg_inf")
            bias = ctx.emit("where", [mask, zero, neg])
    else:
        bias = mask
    if short:
        fill = ctx.full((*bias.type.shape[:-1], short), _NEG_INF)
        bias = ctx.emit("concat", [bias, fill], axis=bias.type.ndim - 1)
    return bias


def _attention(ctx: NodeContext) -> Sequence[Expr]:
    if ctx.optional(6) is not None:
        raise ctx.error("Attention with nonpad_kv_seqlen (an external KV cache) is not supported")
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    q = _heads_first(ctx, ctx.arg(0), q_heads, "Q")
    k = _heads_first(ctx, ctx.arg(1), kv_heads, "K")
    v = _heads_first(ctx, ctx.arg(2), kv_heads, "V")
    three_d = ctx.arg(0).type.ndim == 3
    past_key, past_value = ctx.optional(4), ctx.optional(5)
    if (past_key is None) != (past_value is None):
        raise ctx.error("past_key and past_value must be given together")
    past = 0
    if past_key is not None and past_value is not None:
        past = past_key.type.shape[2]
        k = ctx.emit("concat", [past_key, k], axis=2)
        v = ctx.emit("concat", [past_value, v], axis=2)
    present_key, present_value = k, v
    b, h, q_len, d = q.type.shape
    kv_h, kv_len = k.type.shape[1], k.type.shape[2]
    if h % kv_h or v.type.shape[1] != kv_h:
        raise ctx.error(f"{h} query heads do not divide into {kv_h} key/value heads")
    k, v = _repeat_heads(ctx, k, h // kv_h), _repeat_heads(ctx, v, h // kv_h)

    scale = ctx.attr("scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    root = ctx.new_const(np.float32(math.sqrt(scale)), name=f"{ctx.name}.scale")
    kt = ctx.emit("transpose", [ctx.emit("mul", [k, root])], perm=(0, 1, 3, 2))
    scores = ctx.emit("matmul", [ctx.emit("mul", [q, root]), kt])
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    if softcap > 0:
        cap = ctx.new_const(np.float32(softcap), name=f"{ctx.name}.softcap")
        scores = ctx.emit("mul", [ctx.emit("tanh", [ctx.emit("div", [scores, cap])]), cap])
    capped = scores

    bias: Expr | None = None
    mask = ctx.optional(3)
    static = _static_bias(ctx, q_len, kv_len, past)
    if mask is not None:
        bias = _mask_bias(ctx, mask, kv_len)
    if static is not None:
        static_const = ctx.new_const(static, name=f"{ctx.name}.causal")
        bias = static_const if bias is None else ctx.emit("add", [bias, static_const])
    if bias is not None:
        scores = ctx.emit("add", [scores, bias])
    with_bias = scores
    probs = ctx.emit("softmax", [scores], axis=3)
    if bias is not None and _may_mask_a_whole_row(bias):
        # softmax of a row of -inf is NaN; the operator defines that row's weights as zeros
        row_max = ctx.emit("reduce_max", [bias], axes=(bias.type.ndim - 1,), keepdims=1)
        neg = ctx.new_const(_NEG_INF, name=f"{ctx.name}.neg_inf_row")
        zero = ctx.new_const(np.float32(0), name=f"{ctx.name}.zero_row")
        probs = ctx.emit("where", [ctx.emit("equal", [row_max, neg]), zero, probs])
    y = ctx.emit("matmul", [probs, v])
    if three_d:
        y = ctx.emit("transpose", [y], perm=(0, 2, 1, 3))
        y = ctx.emit("reshape", [y], shape=(b, q_len, h * v.type.shape[3]))
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    qk_output = {0: capped, 1: capped, 2: with_bias, 3: probs}.get(mode)
    if qk_output is None:
        raise ctx.error(f"qk_matmul_output_mode {mode} is not one of 0-3")
    return [y, present_key, present_value, qk_output][: max(len(ctx.node.output), 1)]


def _may_mask_a_whole_row(bias: Expr) -> bool:
    """Whether some row of the bias could be all -inf (always, unless it is a constant without one)."""
    if not isinstance(bias, Const):
        return True
    return bool(np.any(np.all(np.isneginf(bias.data), axis=-1)))


CONVERTERS: dict[str, OpConverter] = {"Attention": OpConverter(_attention)}
