"""Unary elementwise ops: out[i] = f(x[i]), same shape as the input.

Float ops take float32 only; sign/abs/relu/clip also take integers because shape computations use
them (those are folded at compile time). References compute in float64 where that is cheaper than
being careful, and return exactly the inferred dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, NUMERIC, expect_args, expect_dtype, float_attr, str_attr
from compiler.ops.registry import OpDef, Pattern, ReferenceFn, register
from compiler.tensor_type import DTYPES, TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm

# dtypes a runtime `cast` may produce or consume (folded casts may use any dtype of the IR)
CAST_DTYPES = tuple(DTYPES)


def unary_infer(
    op: str, allowed: Sequence[str], float_attrs: Sequence[str] = ()
) -> Callable[..., TensorType]:
    """Infer function of a shape-preserving unary op taking `allowed` dtypes."""

    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 1)
        expect_dtype(op, types[0], allowed)
        for key in float_attrs:
            float_attr(attrs, key)
        return types[0]

    return infer


def _f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64)


_erf = np.frompyfunc(math.erf, 1, 1)


def erf64(x: np.ndarray) -> np.ndarray:
    """Exact (libm) erf on float64; numpy has none."""
    return np.asarray(_erf(x), dtype=np.float64)


def _neg(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.negative(a[0])
    return out


def _abs(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.abs(a[0])
    return out


def _exp(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    with np.errstate(over="ignore"):
        out: np.ndarray = np.exp(a[0])
        return out


def _log(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.log(a[0])
        return out


def _sqrt(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        out: np.ndarray = np.sqrt(a[0])
        return out


def _reciprocal(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    with np.errstate(divide="ignore"):
        out: np.ndarray = np.reciprocal(a[0])
        return out


def _tanh(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.tanh(a[0])
    return out


def _sigmoid(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.exp(-np.logaddexp(0.0, -_f64(a[0]))).astype(a[0].dtype)
    return out


def _relu(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.maximum(a[0], np.zeros((), a[0].dtype))
    return out


def _sin(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.sin(_f64(a[0])).astype(a[0].dtype)
    return out


def _cos(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.cos(_f64(a[0])).astype(a[0].dtype)
    return out


def _erf_ref(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    return erf64(_f64(a[0])).astype(a[0].dtype)


def _in_float64(fn: Callable[[np.ndarray], np.ndarray]) -> ReferenceFn:
    """A reference computed by numpy in float64 and rounded once to the input's dtype (the rounding
    is the only error the compiled code is allowed); NaN outside the domain and overflow to inf
    come quietly, as the compiled code gives them."""

    def reference(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(_f64(a[0]))).astype(a[0].dtype)

    return reference


# tan, the inverse trigonometric and the hyperbolic functions: graph op -> its float64 numpy function.
# Each lowers to one call of the same name (inline float32 code: compiler/codegen/mathfns.py).
FLOAT64_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}


def _leaky_relu(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    return np.where(x < 0, x * np.float32(attrs["alpha"]), x).astype(x.dtype)


def _clip(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    lo, hi = attrs["min"], attrs["max"]
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        lo = info.min if lo == -math.inf else math.ceil(lo)
        hi = info.max if hi == math.inf else math.floor(hi)
    out: np.ndarray = np.minimum(np.maximum(x, x.dtype.type(lo)), x.dtype.type(hi))
    return out


def _hard_sigmoid(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = _f64(a[0])
    out: np.ndarray = np.clip(attrs["alpha"] * x + attrs["beta"], 0.0, 1.0).astype(a[0].dtype)
    return out


def _hard_swish(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    x = _f64(a[0])
    return (x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)).astype(a[0].dtype)


def _gelu(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = _f64(a[0])
    if attrs["approximate"] == "tanh":
        y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    else:
        y = 0.5 * x * (1.0 + erf64(x / math.sqrt(2.0)))
    return y.astype(a[0].dtype)


def _gelu_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("gelu", types, 1)
    expect_dtype("gelu", types[0], (FLOAT,))
    str_attr(attrs, "approximate", ("none", "tanh"))
    return types[0]


def _cast_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("cast", types, 1)
    to = str_attr(attrs, "to", CAST_DTYPES)
    return TensorType(types[0].shape, to)


def _cast(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return a[0].astype(attrs["to"])


# ------------------------------------------------------------------ lowering: compute definitions
def _unary_compute(fn: Callable[[Expr, dict[str, Any]], Expr]) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        return te.compute(out.shape, lambda *i: fn(x[i], attrs), name, tag="elemwise", dtype=out.dtype)

    return compute


def _fc(v: float, like: Expr) -> Expr:
    return FloatImm(float(v), like.dtype) if like.dtype.startswith("float") else te.idx(int(v))


def _sigmoid_expr(x: Expr) -> Expr:
    if x.dtype == "float32":  # one inline function (compiler/codegen/mathfns.py), cheaper than exp's path
        return te.call("sigmoid", x)
    return te.div(_fc(1.0, x), te.add(_fc(1.0, x), te.call("exp", te.sub(_fc(0.0, x), x))))


def _clip_expr(x: Expr, attrs: dict[str, Any]) -> Expr:
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is not None and not math.isinf(lo):
        x = te.maximum(x, _fc(lo, x))
    if hi is not None and not math.isinf(hi):
        x = te.minimum(x, _fc(hi, x))
    return x


def _gelu_expr(x: Expr, attrs: dict[str, Any]) -> Expr:
    half = te.mul(_fc(0.5, x), x)
    if attrs.get("approximate", "none") == "tanh":
        inner = te.mul(
            _fc(math.sqrt(2.0 / math.pi), x), te.add(x, te.mul(_fc(0.044715, x), te.mul(x, te.mul(x, x))))
        )
        return te.mul(half, te.add(_fc(1.0, x), te.call("tanh", inner)))
    return te.mul(half, te.add(_fc(1.0, x), te.call("erf", te.mul(x, _fc(1.0 / math.sqrt(2.0), x)))))


def _intrinsic_call(name: str) -> Callable[[Expr, dict[str, Any]], Expr]:
    """The compute of a function code generation emits whole: one call of `name`."""
    return lambda x, a: te.call(name, x)


UNARY_COMPUTES: dict[str, Callable[[Expr, dict[str, Any]], Expr]] = {
    "neg": lambda x, a: te.sub(_fc(0, x), x),
    "abs": lambda x, a: (
        te.call("fabs", x)
        if x.dtype.startswith("float")
        else te.select(BinOp("<", x, _fc(0, x)), te.sub(_fc(0, x), x), x)
    ),
    "exp": lambda x, a: te.call("exp", x),
    "log": lambda x, a: te.call("log", x),
    "sqrt": lambda x, a: te.call("sqrt", x),
    "reciprocal": lambda x, a: te.div(_fc(1.0, x), x),
    "tanh": lambda x, a: te.call("tanh", x),
    "sigmoid": lambda x, a: _sigmoid_expr(x),
    "relu": lambda x, a: te.maximum(x, _fc(0, x)),
    "erf": lambda x, a: te.call("erf", x),
    "sin": lambda x, a: te.call("sin", x),
    "cos": lambda x, a: te.call("cos", x),
    "leaky_relu": lambda x, a: te.select(
        BinOp("<", x, _fc(0, x)), te.mul(_fc(a.get("alpha", 0.01), x), x), x
    ),
    "clip": _clip_expr,
    "hard_sigmoid": lambda x, a: te.maximum(
        _fc(0, x),
        te.minimum(_fc(1, x), te.add(te.mul(_fc(a.get("alpha", 0.2), x), x), _fc(a.get("beta", 0.5), x))),
    ),
    "hard_swish": lambda x, a: te.mul(
        x, te.maximum(_fc(0, x), te.minimum(_fc(1, x), te.add(te.mul(_fc(1.0 / 6.0, x), x), _fc(0.5, x))))
    ),
    "gelu": _gelu_expr,
    **{name: _intrinsic_call(name) for name in FLOAT64_FUNCTIONS},
}


def _cast_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    (x,) = inputs
    return te.compute(out.shape, lambda *i: te.cast(out.dtype, x[i]), name, tag="elemwise", dtype=out.dtype)


# The unary ops with a plain elementwise compute: (name, dtypes, numpy reference, attributes).
# Their compute is UNARY_COMPUTES[name]; the attributes are documented there.
UNARY_OPS: tuple[tuple[str, tuple[str, ...], ReferenceFn, tuple[str, ...]], ...] = (
    ("neg", NUMERIC, _neg, ()),
    ("abs", NUMERIC, _abs, ()),
    ("exp", (FLOAT,), _exp, ()),
    ("log", (FLOAT,), _log, ()),
    ("sqrt", (FLOAT,), _sqrt, ()),
    ("reciprocal", (FLOAT,), _reciprocal, ()),
    ("tanh", (FLOAT,), _tanh, ()),
    ("sigmoid", (FLOAT,), _sigmoid, ()),
    ("relu", NUMERIC, _relu, ()),
    ("erf", (FLOAT,), _erf_ref, ()),
    ("sin", (FLOAT,), _sin, ()),
    ("cos", (FLOAT,), _cos, ()),
    ("leaky_relu", (FLOAT,), _leaky_relu, ("alpha",)),  # slope for x < 0
    ("clip", NUMERIC, _clip, ("min", "max")),  # -inf / inf when the ONNX model leaves them out
    ("hard_sigmoid", (FLOAT,), _hard_sigmoid, ("alpha", "beta")),  # max(0, min(1, alpha * x + beta))
    ("hard_swish", (FLOAT,), _hard_swish, ()),
    *((name, (FLOAT,), _in_float64(fn), ()) for name, fn in FLOAT64_FUNCTIONS.items()),
)
for _name, _dtypes, _reference, _attrs in UNARY_OPS:
    register(
        OpDef(
            _name,
            Pattern.ELEMWISE,
            unary_infer(_name, _dtypes, _attrs),
            _reference,
            compute=_unary_compute(UNARY_COMPUTES[_name]),
        )
    )
# attrs: approximate ("none" | "tanh")
register(OpDef("gelu", Pattern.ELEMWISE, _gelu_infer, _gelu, compute=_unary_compute(UNARY_COMPUTES["gelu"])))
# attrs: to (dtype name, e.g. "float32", "int64", "bool")
register(OpDef("cast", Pattern.ELEMWISE, _cast_infer, _cast, compute=_cast_compute))
