"""ONNX reductions built on temper's reduce ops: ReduceProd, ReduceLogSum, ReduceLogSumExp.

They read their axes as the older reductions (compiler/frontend/convert_nn.py) do, with the same
helper: an attribute before opset 18, an input from 18 on (a compile-time constant), negative axes
counted from the end, and empty axes with noop_with_empty_axes leaving the input unreduced (the
op's other arithmetic still applies, as in ONNX's definition).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from compiler.frontend.context import NodeContext, OpConverter, ScanInfo
from compiler.frontend.convert_math import check_float_input
from compiler.frontend.convert_nn import reduce_axes
from compiler.graph.ir import Expr

# the first opset whose reductions take their axes as an input (ReduceSum's since 13)
AXES_INPUT_OPSET = 18


def _keepdims(ctx: NodeContext) -> dict[str, Any]:
    return {"keepdims": int(ctx.attr("keepdims", 1))}


def _reduce_prod(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axes = reduce_axes(ctx, x)
    if axes is None:
        return [x]
    return [ctx.emit("reduce_prod", [x], axes=axes, **_keepdims(ctx))]


def _reduce_log_sum(ctx: NodeContext) -> Sequence[Expr]:
    x = ctx.arg(0)
    axes = reduce_axes(ctx, x)
    total = x if axes is None else ctx.emit("reduce_sum", [x], axes=axes, **_keepdims(ctx))
    return [ctx.emit("log", [total])]


def _reduce_log_sum_exp(ctx: NodeContext) -> Sequence[Expr]:
    """log(sum(exp(x - m))) + m, m the maximum over the axes: exp cannot overflow and the sum is at
    least 1. An infinite m is taken as 0 instead, so that a row of -inf gives -inf (its sum is 0) and
    a row holding +inf gives inf, where x - m would be NaN."""
    x = ctx.arg(0)
    axes = reduce_axes(ctx, x)
    if axes is None:  # log(exp(x)) is x
        return [x]
    peak = ctx.emit("reduce_max", [x], axes=axes, keepdims=1)
    infinite = ctx.emit("isinf", [peak], detect_positive=1, detect_negative=1)
    zero = ctx.new_const(np.float32(0.0), name=f"{ctx.name}.zero")
    shift = ctx.emit("where", [infinite, zero, peak])
    terms = ctx.emit("exp", [ctx.emit("sub", [x, shift])])
    total = ctx.emit("reduce_sum", [terms], axes=axes, **_keepdims(ctx))
    if total.type.shape != shift.type.shape:
        shift = ctx.emit("reshape", [shift], shape=total.type.shape)
    return [ctx.emit("add", [ctx.emit("log", [total]), shift])]


def _runtime_input(node: onnx.NodeProto, index: int, info: ScanInfo) -> bool:
    return len(node.input) > index and bool(node.input[index]) and node.input[index] not in info.consts


def check_constant_axes(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Axes known at compile time."""
    if info.opset >= AXES_INPUT_OPSET and _runtime_input(node, 1, info):
        return f"{node.op_type} axes computed at run time (temper needs them when it compiles)"
    return None


def _check_float_reduction(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """float32 and float16 inputs only; axes known at compile time."""
    return check_float_input(node, attrs, info) or check_constant_axes(node, attrs, info)


CONVERTERS: dict[str, OpConverter] = {
    "ReduceProd": OpConverter(_reduce_prod, check_constant_axes),
    "ReduceLogSum": OpConverter(_reduce_log_sum, _check_float_reduction),
    "ReduceLogSumExp": OpConverter(_reduce_log_sum_exp, _check_float_reduction),
}
