"""ONNX elementwise math -> graph ops: unary functions, binary/variadic arithmetic, comparisons, casts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from compiler.frontend.context import Converter, NodeContext, OpConverter, ScanInfo
from compiler.graph.ir import Const, Expr
from compiler.tensor_type import DTYPES

# dtypes a value computed at run time may have (constants may use any dtype of the IR)
RUNTIME_DTYPES = ("float32", "float16", "int64", "int32", "bool")
# what a model's float16 tensors are computed in: float16 exists only at the model's inputs and outputs
COMPUTE_DTYPE = {"float16": "float32"}

_UNARY = {
    "Neg": "neg",
    "Abs": "abs",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Relu": "relu",
    "Erf": "erf",
    "Sin": "sin",
    "Cos": "cos",
    "HardSwish": "hard_swish",
}
# float functions with no integer form (ONNX defines them on float types only): float32 and float16
# tensors, the latter computed in float32
_FLOAT_UNARY = {
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
}
FLOAT_DTYPES = ("float32", "float16")
_BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "PRelu": "prelu",
}


def _unary(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Sequence[Expr]:
        return [ctx.emit(op, [ctx.arg(0)])]

    return convert


def _binary(op: str) -> Converter:
    def convert(ctx: NodeContext) -> Sequence[Expr]:
        return [ctx.emit(op, [ctx.arg(0), ctx.arg(1)])]

    return convert


def check_float_input(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """float32 and float16 inputs only."""
    code = info.dtype(node.input[0]) if node.input and node.input[0] else None
    if code is None or onnx_dtype_name(code) in FLOAT_DTYPES:
        return None
    dtype = onnx_dtype_name(code) or helper.tensor_dtype_to_string(code).removeprefix("TensorProto.").lower()
    return f"{node.op_type} of {dtype} tensors (supported: {', '.join(FLOAT_DTYPES)})"


def _variadic(op: str) -> Converter:
    """Min / Max / Sum: a left-to-right chain of binary ops (one input passes through)."""

    def convert(ctx: NodeContext) -> Sequence[Expr]:
        args = [ctx.arg(i) for i in range(len(ctx.inputs))]
        out = args[0]
        for a in args[1:]:
            out = ctx.emit(op, [out, a])
        return [out]

    return convert


def _mean(ctx: NodeContext) -> Sequence[Expr]:
    (total,) = _variadic("add")(ctx)
    assert total is not None
    if len(ctx.inputs) == 1:
        return [total]
    return [ctx.emit("div", [total, ctx.new_const(len(ctx.inputs), total.type.dtype)])]


def _false(ctx: NodeContext) -> Const:
    return ctx.new_const(False, "bool")


def _not(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("equal", [ctx.arg(0), _false(ctx)])]


def _less_or_equal(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("equal", [ctx.emit("greater", [ctx.arg(0), ctx.arg(1)]), _false(ctx)])]


def _greater_or_equal(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("equal", [ctx.emit("less", [ctx.arg(0), ctx.arg(1)]), _false(ctx)])]


def _and(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("where", [ctx.arg(0), ctx.arg(1), _false(ctx)])]


def _or(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("where", [ctx.arg(0), ctx.new_const(True, "bool"), ctx.arg(1)])]


def _xor(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("equal", [ctx.emit("equal", [ctx.arg(0), ctx.arg(1)]), _false(ctx)])]


def _where(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("where", [ctx.arg(0), ctx.arg(1), ctx.arg(2)])]


def _leaky_relu(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("leaky_relu", [ctx.arg(0)], alpha=float(ctx.attr("alpha", 0.01)))]


def _hard_sigmoid(ctx: NodeContext) -> Sequence[Expr]:
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    return [ctx.emit("hard_sigmoid", [ctx.arg(0)], alpha=alpha, beta=beta)]


def _gelu(ctx: NodeContext) -> Sequence[Expr]:
    return [ctx.emit("gelu", [ctx.arg(0)], approximate=ctx.attr("approximate", "none"))]


def _bound(ctx: NodeContext, i: int, what: str, default: float) -> float:
    data = ctx.const(i, what)
    if data is None:
        return default
    if data.size != 1:
        raise ctx.error(f"{what} must be a scalar, got shape {list(data.shape)}")
    return float(data.reshape(()))


def _clip(ctx: NodeContext) -> Sequence[Expr]:
    lo = _bound(ctx, 1, "Clip min", -math.inf)
    hi = _bound(ctx, 2, "Clip max", math.inf)
    return [ctx.emit("clip", [ctx.arg(0)], min=lo, max=hi)]


def onnx_dtype_name(code: int) -> str | None:
    """numpy dtype name of an ONNX TensorProto element type, or None if the IR cannot hold it."""
    try:
        name = str(np.dtype(helper.tensor_dtype_to_np_dtype(code)))
    except (KeyError, TypeError, ValueError):
        return None
    return name if name in DTYPES else None


def _cast_to(ctx: NodeContext, x: Expr, dtype: str | None) -> Sequence[Expr]:
    if dtype is None:
        raise ctx.error("cast to a dtype temper cannot represent")
    if dtype == x.type.dtype:
        return [x]
    return [ctx.emit("cast", [x], to=dtype)]


def _cast(ctx: NodeContext) -> Sequence[Expr]:
    dtype = onnx_dtype_name(int(ctx.attr("to")))
    return _cast_to(ctx, ctx.arg(0), COMPUTE_DTYPE.get(dtype or "", dtype))


def _cast_like(ctx: NodeContext) -> Sequence[Expr]:
    return _cast_to(ctx, ctx.arg(0), ctx.arg(1).type.dtype)


def _check_cast(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Cast at run time only to float32, float16, int64, int32 or bool."""
    if node.op_type != "Cast" or node.input[0] in info.consts:
        return None
    name = onnx_dtype_name(int(attrs.get("to", 0)))
    if name not in RUNTIME_DTYPES:
        target = helper.tensor_dtype_to_string(int(attrs.get("to", 0)))
        return f"Cast to {target} at run time (supported: {', '.join(RUNTIME_DTYPES)})"
    return None


def _with_floats(op: str, **defaults: float) -> Converter:
    """An activation whose ONNX float attributes (with their defaults) become the op's attributes."""

    def convert(ctx: NodeContext) -> Sequence[Expr]:
        attrs = {k: float(ctx.attr(k, v)) for k, v in defaults.items()}
        return [ctx.emit(op, [ctx.arg(0)], **attrs)]

    return convert


def _mod(ctx: NodeContext) -> Sequence[Expr]:
    x, y = ctx.arg(0), ctx.arg(1)
    fmod = int(ctx.attr("fmod", 0))
    if fmod or not x.type.dtype.startswith("float"):
        return [ctx.emit("mod", [x, y], fmod=fmod)]
    # Floats with fmod=0 (allowed from opset 28): the remainder takes the divisor's sign, as numpy's
    # mod; from the truncated remainder, moved by one divisor where the signs differ.
    r = ctx.emit("mod", [x, y], fmod=1)
    zero = ctx.new_const(np.zeros((), np.float32), name=f"{ctx.name}.zero")
    same_sign = ctx.emit("equal", [ctx.emit("less", [r, zero]), ctx.emit("less", [y, zero])])
    moved = ctx.emit("where", [same_sign, r, ctx.emit("add", [r, y])])
    return [ctx.emit("where", [ctx.emit("equal", [r, zero]), r, moved])]


def _shrink(ctx: NodeContext) -> Sequence[Expr]:
    """x + bias below -lambd, x - bias above lambd, 0 between (and for NaN, as onnxruntime)."""
    x = ctx.arg(0)
    lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))

    def scalar(value: float, what: str) -> Const:
        return ctx.new_const(np.float32(value), name=f"{ctx.name}.{what}")

    shift = scalar(bias, "bias")
    below = ctx.emit("less", [x, scalar(-lambd, "low")])
    above = ctx.emit("greater", [x, scalar(lambd, "high")])
    inner = ctx.emit("where", [above, ctx.emit("sub", [x, shift]), scalar(0.0, "zero")])
    return [ctx.emit("where", [below, ctx.emit("add", [x, shift]), inner])]


def _isinf(ctx: NodeContext) -> Sequence[Expr]:
    flags = {k: int(ctx.attr(k, 1)) for k in ("detect_positive", "detect_negative")}
    return [ctx.emit("isinf", [ctx.arg(0)], **flags)]


CONVERTERS: dict[str, OpConverter] = {
    **{onnx_op: OpConverter(_unary(op)) for onnx_op, op in _UNARY.items()},
    **{onnx_op: OpConverter(_unary(op), check_float_input) for onnx_op, op in _FLOAT_UNARY.items()},
    **{onnx_op: OpConverter(_binary(op)) for onnx_op, op in _BINARY.items()},
    "LeakyRelu": OpConverter(_leaky_relu),
    "HardSigmoid": OpConverter(_hard_sigmoid),
    "Gelu": OpConverter(_gelu),
    "Clip": OpConverter(_clip),
    "Shrink": OpConverter(_shrink, check_float_input),
    "Softplus": OpConverter(_unary("softplus")),
    "Mish": OpConverter(_unary("mish")),
    "Softsign": OpConverter(_unary("softsign")),
    "Elu": OpConverter(_with_floats("elu", alpha=1.0)),
    "Celu": OpConverter(_with_floats("celu", alpha=1.0)),
    "Selu": OpConverter(
        _with_floats("selu", alpha=1.67326319217681884765625, gamma=1.05070102214813232421875)
    ),
    "ThresholdedRelu": OpConverter(_with_floats("thresholded_relu", alpha=1.0)),
    "Floor": OpConverter(_unary("floor")),
    "Ceil": OpConverter(_unary("ceil")),
    "Round": OpConverter(_unary("round")),
    "Sign": OpConverter(_unary("sign")),
    "IsNaN": OpConverter(_unary("isnan")),
    "IsInf": OpConverter(_isinf),
    "Mod": OpConverter(_mod),
    "Cast": OpConverter(_cast, _check_cast),
    "CastLike": OpConverter(_cast_like),
    "Min": OpConverter(_variadic("minimum")),
    "Max": OpConverter(_variadic("maximum")),
    "Sum": OpConverter(_variadic("add")),
    "Mean": OpConverter(_mean),
    "Where": OpConverter(_where),
    "Not": OpConverter(_not),
    "And": OpConverter(_and),
    "Or": OpConverter(_or),
    "Xor": OpConverter(_xor),
    "LessOrEqual": OpConverter(_less_or_equal),
    "GreaterOrEqual": OpConverter(_greater_or_equal),
}
