"""ONNX QuantizeLinear / DequantizeLinear of QDQ models, their integers carried in float32.

A QDQ model (what onnxruntime's static quantization writes by default) is a float model whose
tensors pass through QuantizeLinear -> DequantizeLinear pairs: each pair rounds a tensor to the
8-bit grid of its scale and zero point and back, and the weights are stored as 8-bit integers behind
a DequantizeLinear. temper computes such a model in float32 with the rounding kept exactly: a
QuantizeLinear yields its integers as float32 values (every 8- and 16-bit integer is exact in
float32), a DequantizeLinear maps them back, and a constant DequantizeLinear (a weight) is folded
at compile time. The integers therefore never need a tensor type of their own, which is why a
QuantizeLinear may only feed DequantizeLinear nodes and ops that merely move values (the support
check says so up front), never a graph output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from compiler.frontend.context import NodeContext, OpConverter, ScanInfo
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
MOVERS = frozenset(
    {"DequantizeLinear", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Identity"}
)


def _grid(ctx: NodeContext, zero_point: np.ndarray | None) -> tuple[int, int]:
    code = (
        onnx.helper.np_dtype_to_tensor_dtype(zero_point.dtype)
        if zero_point is not None
        else int(ctx.attr("output_dtype", 0)) or onnx.TensorProto.UINT8
    )
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


def _operands(ctx: NodeContext, x: Expr) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    scale = ctx.const(1, f"{ctx.op_type} scale")
    zero_point = ctx.const(2, f"{ctx.op_type} zero point")
    assert scale is not None
    if int(ctx.attr("block_size", 0)):
        raise ctx.error("blocked quantization (block_size) is not supported")
    zero = _per_axis(ctx, zero_point, x.type.ndim) if zero_point is not None else np.zeros((), np.float32)
    return _per_axis(ctx, scale, x.type.ndim), zero, zero_point


def _quantize_linear(ctx: NodeContext) -> Sequence[Expr]:
    """clip(round_half_even(x / scale) + zero point) on the integer grid, as float32."""
    x = ctx.arg(0)
    scale, zero, raw_zero = _operands(ctx, x)
    low, high = _grid(ctx, raw_zero)
    if x.type.dtype != "float32":
        x = ctx.emit("cast", [x], to="float32")
    scaled = ctx.emit("div", [x, ctx.new_const(scale, name=f"{ctx.name}.scale")])
    shifted = ctx.emit("add", [ctx.emit("round", [scaled]), ctx.new_const(zero, name=f"{ctx.name}.zero")])
    return [ctx.emit("clip", [shifted], min=float(low), max=float(high))]


def _dequantize_linear(ctx: NodeContext) -> Sequence[Expr]:
    """(q - zero point) * scale, in float32; folded when q is a constant (a weight)."""
    q = ctx.arg(0)
    scale, zero, _ = _operands(ctx, q)
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
        return _check_flow(node.output[0], info)
    return None


def _check_flow(value: str, info: ScanInfo) -> str | None:
    """Why the integers of `value` cannot stay in float32 (None: they only reach DequantizeLinear)."""
    users = info.consumers.get(value, ())
    if "" in users:
        return "QuantizeLinear whose integers are a graph output"
    others = sorted({u for u in users if u not in MOVERS})
    if others:
        return f"QuantizeLinear whose integers feed {', '.join(others)} (supported: DequantizeLinear)"
    return None


CONVERTERS: dict[str, OpConverter] = {
    "QuantizeLinear": OpConverter(_quantize_linear, _check_qdq),
    "DequantizeLinear": OpConverter(_dequantize_linear, _check_qdq),
}
