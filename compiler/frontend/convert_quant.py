"""ONNX quantization ops, their integers carried in float32: QuantizeLinear / DequantizeLinear of QDQ
models, and DynamicQuantizeLinear / MatMulInteger / ConvInteger of dynamically quantized ones.

A QDQ model (what onnxruntime's static quantization writes by default) is a float model whose
tensors pass through QuantizeLinear -> DequantizeLinear pairs: each pair rounds a tensor to the
8-bit grid of its scale and zero point and back, and the weights are stored as 8-bit integers behind
a DequantizeLinear. temper computes such a model in float32 with the rounding kept exactly: a
QuantizeLinear yields its integers as float32 values (every 8- and 16-bit integer is exact in
float32), a DequantizeLinear maps them back, and a constant DequantizeLinear (a weight) is folded
at compile time. The integers therefore never need a tensor type of their own, which is why a
QuantizeLinear may only feed DequantizeLinear nodes and ops that merely move values (the support
check says so up front), never a graph output.

Dynamic quantization (onnxruntime's quantize_dynamic, common for transformers) quantizes each
activation at run time over its own range (DynamicQuantizeLinear: scale, zero point and integers)
and multiplies integers by the int8 weights exactly (MatMulInteger / ConvInteger, int32 results).
temper computes the same integers in float32: the products of 8-bit integers and their sums are
exact there up to 2^24, beyond which a sum may round by a unit in its last place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from compiler.frontend.context import NodeContext, OpConverter, ScanInfo
from compiler.frontend.convert_nn import window_geometry
from compiler.graph.ir import Const, Expr

# the integer grids temper carries in float32: element type -> (lowest, highest)
GRIDS: dict[int, tuple[int, int]] = {
    onnx.TensorProto.UINT8: (0, 255),
    onnx.TensorProto.INT8: (-128, 127),
    onnx.TensorProto.UINT16: (0, 65535),
    onnx.TensorProto.INT16: (-32768, 32767),
}
# what a QuantizeLinear's integers may flow through before their DequantizeLinear: ops that move or
# pick values without arithmetic (a grid value stays a grid value)
MOVERS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Identity", "Cast"})
# the ops that take such integers: QDQ's DequantizeLinear, dynamic quantization's integer products
INTEGER_CONSUMERS = frozenset({"DequantizeLinear", "MatMulInteger", "ConvInteger"})


def _grid(ctx: NodeContext) -> tuple[int, int]:
    """The integer range of the zero point's type (as the model declares it: temper carries 8- and
    16-bit constants in float32), else of output_dtype, else uint8's."""
    code = ctx.declared_type(2) or int(ctx.attr("output_dtype", 0)) or onnx.TensorProto.UINT8
    if code not in GRIDS:
        name = onnx.TensorProto.DataType.Name(code)
        raise ctx.error(f"quantization to {name} (supported: {', '.join(_grid_names())})")
    return GRIDS[code]


def _grid_names() -> list[str]:
    return [onnx.TensorProto.DataType.Name(c) for c in GRIDS]


def _per_axis(ctx: NodeContext, values: np.ndarray, rank: int) -> np.ndarray:
    """A scale or zero point shaped to broadcast against the tensor: per tensor (one value) or per
    channel along `axis` (a vector)."""
    flat = values.astype(np.float32).reshape(-1)
    if flat.size == 1:
        return flat.reshape(())
    axis = int(ctx.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ctx.error(f"axis {ctx.attr('axis', 1)} is outside a tensor of rank {rank}")
    view = [1] * rank
    view[axis] = flat.size
    return flat.reshape(view)


def _operands(ctx: NodeContext, x: Expr) -> tuple[np.ndarray, np.ndarray]:
    scale = ctx.const(1, f"{ctx.op_type} scale")
    zero_point = ctx.const(2, f"{ctx.op_type} zero point")
    assert scale is not None
    if int(ctx.attr("block_size", 0)):
        raise ctx.error("blocked quantization (block_size) is not supported")
    zero = _per_axis(ctx, zero_point, x.type.ndim) if zero_point is not None else np.zeros((), np.float32)
    return _per_axis(ctx, scale, x.type.ndim), zero


def _quantize_linear(ctx: NodeContext) -> Sequence[Expr]:
    """clip(round_half_even(x / scale) + zero point) on the integer grid, as float32."""
    x = ctx.arg(0)
    scale, zero = _operands(ctx, x)
    low, high = _grid(ctx)
    if x.type.dtype != "float32":
        x = ctx.emit("cast", [x], to="float32")
    scaled = ctx.emit("div", [x, ctx.new_const(scale, name=f"{ctx.name}.scale")])
    shifted = ctx.emit("add", [ctx.emit("round", [scaled]), ctx.new_const(zero, name=f"{ctx.name}.zero")])
    return [ctx.emit("clip", [shifted], min=float(low), max=float(high))]


def _dequantize_linear(ctx: NodeContext) -> Sequence[Expr]:
    """(q - zero point) * scale, in float32; folded when q is a constant (a weight)."""
    q = ctx.arg(0)
    scale, zero = _operands(ctx, q)
    if isinstance(q, Const):
        return [ctx.new_const((q.data.astype(np.float32) - zero) * scale, name=f"{ctx.name}.dequantized")]
    if q.type.dtype != "float32":
        q = ctx.emit("cast", [q], to="float32")
    if zero.any():
        q = ctx.emit("sub", [q, ctx.new_const(zero, name=f"{ctx.name}.zero")])
    return [ctx.emit("mul", [q, ctx.new_const(scale, name=f"{ctx.name}.scale")])]


def _check_qdq(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Scales and zero points known at compile time; 8- and 16-bit grids, per tensor or per axis
    (not blocked); a QuantizeLinear's integers flow only into DequantizeLinear nodes (through ops
    that move values), never to a graph output or into integer arithmetic."""
    for i in (1, 2):
        if len(node.input) > i and node.input[i] and node.input[i] not in info.consts:
            return f"{node.op_type} with its {'scale' if i == 1 else 'zero point'} computed at run time"
    if int(attrs.get("block_size", 0)):
        return f"blocked {node.op_type} (block_size)"
    if node.op_type == "QuantizeLinear":
        code = info.dtype(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        code = code or int(attrs.get("output_dtype", 0)) or onnx.TensorProto.UINT8
        if code not in GRIDS:
            name = onnx.TensorProto.DataType.Name(code)
            return f"QuantizeLinear to {name} (supported: {', '.join(_grid_names())})"
        return _check_flow(node.op_type, node.output[0], info)
    return None


def _dynamic_quantize_linear(ctx: NodeContext) -> Sequence[Expr]:
    """uint8 over x's range widened to hold 0: scale (max - min) / 255, zero point round(-min /
    scale), integers round(x / scale) + zero point, saturated; a range of zero gives scale 0 and
    integers 0, as onnxruntime gives them."""
    x = ctx.arg(0)
    every = tuple(range(x.type.ndim))

    def scalar(value: float, what: str) -> Const:
        return ctx.new_const(np.float32(value), name=f"{ctx.name}.{what}")

    low = ctx.emit(
        "minimum",
        [
            ctx.emit("neg", [ctx.emit("reduce_max", [ctx.emit("neg", [x])], axes=every, keepdims=0)]),
            scalar(0, "zero"),
        ],
    )
    high = ctx.emit("maximum", [ctx.emit("reduce_max", [x], axes=every, keepdims=0), scalar(0, "zero")])
    scale = ctx.emit("div", [ctx.emit("sub", [high, low]), scalar(255, "levels")])
    empty = ctx.emit("equal", [scale, scalar(0, "zero")])
    divisor = ctx.emit("where", [empty, scalar(1, "one"), scale])
    zero_point = ctx.emit(
        "clip", [ctx.emit("round", [ctx.emit("div", [ctx.emit("neg", [low]), divisor])])], min=0.0, max=255.0
    )
    shifted = ctx.emit("add", [ctx.emit("round", [ctx.emit("div", [x, divisor])]), zero_point])
    return [ctx.emit("clip", [shifted], min=0.0, max=255.0), scale, zero_point]


def _centred(ctx: NodeContext, q: Expr, zero: Expr | None, per_row: bool) -> Expr:
    """q - zero point in float32 (a constant q folds): a per-row zero point of A [.., M, K] is a
    column [M, 1]."""
    if q.type.dtype != "float32":
        q = ctx.emit("cast", [q], to="float32")
    if zero is None:
        return q
    if zero.type.dtype != "float32":
        zero = ctx.emit("cast", [zero], to="float32")
    if per_row and zero.type.ndim == 1 and zero.type.size > 1:
        zero = ctx.emit("reshape", [zero], shape=(zero.type.size, 1))
    return ctx.emit("sub", [q, zero])


def _matmul_integer(ctx: NodeContext) -> Sequence[Expr]:
    """(A - a_zero_point) @ (B - b_zero_point), exact integers computed in float32, as int32."""
    a = _centred(ctx, ctx.arg(0), ctx.optional(2), per_row=True)
    b = _centred(ctx, ctx.arg(1), ctx.optional(3), per_row=False)
    if a.type.ndim < 2 or b.type.ndim < 2:
        raise ctx.error(
            f"MatMulInteger of {list(a.type.shape)} and {list(b.type.shape)} (supported: 2-D or more)"
        )
    return [ctx.emit("cast", [ctx.emit("matmul", [a, b])], to="int32")]


def _conv_integer(ctx: NodeContext) -> Sequence[Expr]:
    """conv(x - x_zero_point, w - w_zero_point), exact integers computed in float32, as int32."""
    x = _centred(ctx, ctx.arg(0), ctx.optional(2), per_row=False)
    w = ctx.arg(1)
    zero = ctx.optional(3)
    if zero is not None and zero.type.size > 1:  # per output channel
        zero = ctx.emit("reshape", [zero], shape=(zero.type.size, 1, 1, 1))
    w = _centred(ctx, w, zero, per_row=False)
    if x.type.ndim != 4:
        raise ctx.error(f"ConvInteger of a {x.type.ndim - 2}-D input (supported: 2-D)")
    geom = window_geometry(ctx, x, list(w.type.shape[2:]))
    y = ctx.emit(
        "conv2d",
        [x, w],
        strides=tuple(geom["strides"]),
        pads=tuple(geom["pads"]),
        dilations=tuple(geom["dilations"]),
        groups=int(ctx.attr("group", 1)),
    )
    return [ctx.emit("cast", [y], to="int32")]


def _check_dynamic(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """DynamicQuantizeLinear's integers only reach MatMulInteger / ConvInteger (or moves); those
    take 8-bit inputs (their int32 results are exact in float32 up to 2^24)."""
    if node.op_type == "DynamicQuantizeLinear":
        integers = [node.output[i] for i in (0, 2) if len(node.output) > i and node.output[i]]
        return next((r for v in integers if (r := _check_flow(node.op_type, v, info)) is not None), None)
    return None


def _check_flow(op: str, value: str, info: ScanInfo) -> str | None:
    """Why the integers of `value` cannot stay in float32 (None: they only reach the ops that take
    them, directly or through ops that move values)."""
    users = info.consumers.get(value, ())
    if "" in users:
        return f"{op} whose integers are a graph output"
    others = sorted({u for u in users if u not in MOVERS | INTEGER_CONSUMERS})
    if others:
        taking = ", ".join(sorted(INTEGER_CONSUMERS))
        return f"{op} whose integers feed {', '.join(others)} (supported: {taking})"
    return None


CONVERTERS: dict[str, OpConverter] = {
    "QuantizeLinear": OpConverter(_quantize_linear, _check_qdq),
    "DequantizeLinear": OpConverter(_dequantize_linear, _check_qdq),
    "DynamicQuantizeLinear": OpConverter(_dynamic_quantize_linear, _check_dynamic),
    "MatMulInteger": OpConverter(_matmul_integer, _check_dynamic),
    "ConvInteger": OpConverter(_conv_integer, _check_dynamic),
}
