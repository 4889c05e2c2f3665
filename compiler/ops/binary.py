"""Binary (and ternary `where`) ops with numpy broadcasting.

Both operands share one dtype (as in ONNX), except `pow` whose exponent may differ; comparisons
return bool. `prelu` broadcasts its slope to x only (x keeps its shape).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.ops.common import (
    ANY_DTYPE,
    FLOAT,
    NUMERIC,
    broadcast_shapes,
    expect_args,
    expect_dtype,
    expect_same_dtype,
    fail,
)
from compiler.ops.registry import OpDef, Pattern, ReferenceFn, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm


def binary_infer(op: str, allowed: Sequence[str], out_dtype: str | None = None) -> Callable[..., TensorType]:
    """Same-dtype operands from `allowed`, broadcast shape; result dtype is the operands' or out_dtype."""

    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 2)
        dtype = expect_same_dtype(op, types)
        expect_dtype(op, types[0], allowed)
        return TensorType(broadcast_shapes(types[0].shape, types[1].shape), out_dtype or dtype)

    return infer


def _pow_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("pow", types, 2)
    expect_dtype("pow", types[0], NUMERIC, "base")
    expect_dtype("pow", types[1], NUMERIC, "exponent")
    return TensorType(broadcast_shapes(types[0].shape, types[1].shape), types[0].dtype)


def _where_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("where", types, 3)
    expect_dtype("where", types[0], ("bool",), "condition")
    dtype = expect_same_dtype("where", types[1:])
    return TensorType(broadcast_shapes(*(t.shape for t in types)), dtype)


def _prelu_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    expect_args("prelu", types, 2)
    expect_same_dtype("prelu", types)
    expect_dtype("prelu", types[0], (FLOAT,))
    if broadcast_shapes(types[0].shape, types[1].shape) != types[0].shape:
        raise fail(f"prelu slope {list(types[1].shape)} does not broadcast to x {list(types[0].shape)}")
    return types[0]


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C semantics, as onnxruntime does)."""
    q = np.abs(a) // np.abs(b)
    out: np.ndarray = np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))
    return out


def _add(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.add(a[0], a[1])
    return out


def _sub(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.subtract(a[0], a[1])
    return out


def _mul(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.multiply(a[0], a[1])
    return out


def _div(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    if np.issubdtype(a[0].dtype, np.integer):
        return _int_div(a[0], a[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.divide(a[0], a[1])
        return out


def _pow(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = np.power(a[0].astype(np.float64), a[1].astype(np.float64))
        return out.astype(a[0].dtype)


def _minimum(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.minimum(a[0], a[1])
    return out


def _maximum(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.maximum(a[0], a[1])
    return out


def _equal(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.equal(a[0], a[1])
    return out


def _less(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.less(a[0], a[1])
    return out


def _greater(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    out: np.ndarray = np.greater(a[0], a[1])
    return out


def _where(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    return np.where(a[0], a[1], a[2])


def _prelu(a: Sequence[np.ndarray], _: dict[str, Any]) -> np.ndarray:
    x, slope = a
    return np.where(x < 0, x * slope, x).astype(x.dtype)


# ------------------------------------------------------------------ lowering: compute definitions
def _bcast(t: te.Tensor, out: TensorType, ix: Sequence[Expr]) -> Expr:
    return t[te.broadcast_indices(out.shape, t.shape, ix)]


def _binary_compute(fn: Callable[[Expr, Expr], Expr]) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        a, b = inputs
        return te.compute(
            out.shape,
            lambda *i: fn(_bcast(a, out, i), _bcast(b, out, i)),
            name,
            tag="broadcast",
            dtype=out.dtype,
        )

    return compute


def _where_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    c, a, b = inputs
    return te.compute(
        out.shape,
        lambda *i: te.select(te.cast("bool", _bcast(c, out, i)), _bcast(a, out, i), _bcast(b, out, i)),
        name,
        tag="broadcast",
        dtype=out.dtype,
    )


def _prelu_compute(
    inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str
) -> te.Tensor:
    x, s = inputs

    def body(*i: Expr) -> Expr:
        v = _bcast(x, out, i)
        zero = te.f32(0.0) if v.dtype == "float32" else te.idx(0)
        return te.select(BinOp("<", v, zero), te.mul(_bcast(s, out, i), v), v)

    return te.compute(out.shape, body, name, tag="broadcast", dtype=out.dtype)


def _mod(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x, y = a
    out: np.ndarray = np.fmod(x, y) if attrs.get("fmod", 0) else np.mod(x, y)
    return out.astype(x.dtype)


def _mod_infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
    out = binary_infer("mod", NUMERIC)(types, attrs)
    if out.dtype.startswith("float") and not attrs.get("fmod", 0):
        raise fail("mod of floats needs fmod=1 (the sign of the dividend), as ONNX says")
    return out


def _mod_expr(x: Expr, y: Expr, fmod: bool) -> Expr:
    """fmod: the remainder with the dividend's sign (C's fmod); else the divisor's (Python's %)."""
    if x.dtype.startswith("float"):
        q = te.div(x, y)
        zero: Expr = FloatImm(0.0, x.dtype)
        truncated = te.select(BinOp("<", q, zero), te.call("ceil", q), te.call("floor", q))
        return te.sub(x, te.mul(truncated, y))
    floor_mod = BinOp("%", x, y)  # the IR's % is floor modulo: the divisor's sign
    if not fmod:
        return floor_mod
    zero = IntImm(0, x.dtype)
    signs_differ = BinOp("!=", BinOp("<", floor_mod, zero), BinOp("<", x, zero))
    return te.select(
        BinOp("and", BinOp("!=", floor_mod, zero), signs_differ), te.sub(floor_mod, y), floor_mod
    )


def _mod_compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
    a, b = inputs
    fmod = bool(attrs.get("fmod", 0))
    return te.compute(
        out.shape,
        lambda *i: _mod_expr(_bcast(a, out, i), _bcast(b, out, i), fmod),
        name,
        tag="broadcast",
        dtype=out.dtype,
    )


def _pow_expr(a: Expr, b: Expr) -> Expr:
    """pow in the base's dtype; an integer base is raised in float32 and rounded back (exact while
    the power fits float32's 24-bit mantissa, as a float64 power would be cast)."""
    if a.dtype.startswith("float"):
        return te.call("pow", a, te.cast(a.dtype, b))
    power = te.call("pow", te.cast("float32", a), te.cast("float32", b))
    return te.cast(a.dtype, te.call("round", power))


BINARY_COMPUTES: dict[str, Callable[[Expr, Expr], Expr]] = {
    "add": te.add,
    "sub": te.sub,
    "mul": te.mul,
    "div": te.div,  # integer div in the IR is truncating like ONNX only for non-negative values
    "pow": lambda a, b: _pow_expr(a, b),
    "minimum": te.minimum,
    "maximum": te.maximum,
    "equal": lambda a, b: BinOp("==", a, b),
    "less": lambda a, b: BinOp("<", a, b),
    "greater": lambda a, b: BinOp(">", a, b),
}


# The broadcasting binary ops with a plain compute: (name, operand dtypes, numpy reference, result
# dtype: None for the operands'). Their compute is BINARY_COMPUTES[name].
BINARY_OPS: tuple[tuple[str, Sequence[str], ReferenceFn, str | None], ...] = (
    ("add", NUMERIC, _add, None),
    ("sub", NUMERIC, _sub, None),
    ("mul", NUMERIC, _mul, None),
    ("div", NUMERIC, _div, None),
    ("minimum", NUMERIC, _minimum, None),
    ("maximum", NUMERIC, _maximum, None),
    ("equal", ANY_DTYPE, _equal, "bool"),
    ("less", NUMERIC, _less, "bool"),
    ("greater", NUMERIC, _greater, "bool"),
)
for _name, _dtypes, _reference, _out_dtype in BINARY_OPS:
    register(
        OpDef(
            _name,
            Pattern.BROADCAST,
            binary_infer(_name, _dtypes, _out_dtype),
            _reference,
            compute=_binary_compute(BINARY_COMPUTES[_name]),
        )
    )
register(OpDef("pow", Pattern.BROADCAST, _pow_infer, _pow, compute=_binary_compute(BINARY_COMPUTES["pow"])))
# where(cond: bool, a, b): a where cond else b, all three broadcast together
register(OpDef("where", Pattern.BROADCAST, _where_infer, _where, compute=_where_compute))
# mod(x, y), attrs: fmod (0: the divisor's sign, integers only; 1: the dividend's sign)
register(OpDef("mod", Pattern.BROADCAST, _mod_infer, _mod, compute=_mod_compute))
# prelu(x, slope): slope broadcasts to x's shape
register(OpDef("prelu", Pattern.BROADCAST, _prelu_infer, _prelu, compute=_prelu_compute))
