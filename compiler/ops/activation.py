"""More unary elementwise ops, table-driven: activations of newer architectures (softplus, mish,
elu, selu, celu, softsign, thresholded_relu), rounding (floor, ceil, round: half to even, sign) and
float predicates (isnan, isinf: bool results).

Each entry is a numpy reference (computed in float64, returned in the inferred dtype) and the TIR
expression of one element; formulas are the numerically careful ones (softplus never overflows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.ops.common import FLOAT, NUMERIC, expect_args, expect_dtype
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import BinOp, Expr, FloatImm, IntImm


def _f(value: float) -> Expr:
    return FloatImm(float(value), FLOAT)


def _like(value: int, x: Expr) -> Expr:
    return FloatImm(float(value), x.dtype) if x.dtype.startswith("float") else IntImm(value, x.dtype)


def _softplus_expr(x: Expr) -> Expr:
    """max(x, 0) + log(1 + exp(-|x|)): exact for large |x| where log(1 + exp(x)) overflows."""
    return te.add(
        te.maximum(x, _f(0)), te.call("log", te.add(_f(1), te.call("exp", te.sub(_f(0), te.call("fabs", x)))))
    )


def _softplus64(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))
    return out


def _elu_expr(x: Expr, alpha: float) -> Expr:
    return te.select(BinOp(">", x, _f(0)), x, te.mul(_f(alpha), te.sub(te.call("exp", x), _f(1))))


@dataclass(frozen=True)
class Unary:
    reference: Callable[[np.ndarray, dict[str, Any]], np.ndarray]  # on float64
    expr: Callable[[Expr, dict[str, Any]], Expr]
    dtypes: tuple[str, ...] = (FLOAT,)
    result: str | None = None  # the result dtype when it is not the input's (predicates: bool)


OPS: dict[str, Unary] = {
    "softplus": Unary(lambda x, a: _softplus64(x), lambda x, a: _softplus_expr(x)),
    "mish": Unary(
        lambda x, a: x * np.tanh(_softplus64(x)), lambda x, a: te.mul(x, te.call("tanh", _softplus_expr(x)))
    ),
    "softsign": Unary(
        lambda x, a: x / (1 + np.abs(x)), lambda x, a: te.div(x, te.add(_f(1), te.call("fabs", x)))
    ),
    # attrs: alpha
    "elu": Unary(
        lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(x)), lambda x, a: _elu_expr(x, a["alpha"])
    ),
    # attrs: alpha
    "celu": Unary(
        lambda x, a: np.maximum(x, 0) + np.minimum(0, a["alpha"] * np.expm1(x / a["alpha"])),
        lambda x, a: te.add(
            te.maximum(x, _f(0)),
            te.minimum(
                _f(0), te.mul(_f(a["alpha"]), te.sub(te.call("exp", te.div(x, _f(a["alpha"]))), _f(1)))
            ),
        ),
    ),
    # attrs: alpha, gamma
    "selu": Unary(
        lambda x, a: a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(x)),
        lambda x, a: te.mul(_f(a["gamma"]), _elu_expr(x, a["alpha"])),
    ),
    # attrs: alpha
    "thresholded_relu": Unary(
        lambda x, a: np.where(x > a["alpha"], x, 0.0),
        lambda x, a: te.select(BinOp(">", x, _f(a["alpha"])), x, _f(0)),
    ),
    "floor": Unary(lambda x, a: np.floor(x), lambda x, a: te.call("floor", x)),
    "ceil": Unary(lambda x, a: np.ceil(x), lambda x, a: te.call("ceil", x)),
    "round": Unary(lambda x, a: np.round(x), lambda x, a: te.call("round", x)),  # half to even, both
    "sign": Unary(
        lambda x, a: np.sign(x),
        lambda x, a: te.select(
            BinOp(">", x, _like(0, x)),
            _like(1, x),
            te.select(BinOp("<", x, _like(0, x)), _like(-1, x), _like(0, x)),
        ),
        NUMERIC,
    ),
    "isnan": Unary(lambda x, a: np.isnan(x), lambda x, a: BinOp("!=", x, x), result="bool"),
    # attrs: detect_positive, detect_negative (0 or 1)
    "isinf": Unary(
        lambda x, a: (
            (np.isposinf(x) & bool(a["detect_positive"])) | (np.isneginf(x) & bool(a["detect_negative"]))
        ),
        lambda x, a: _isinf_expr(x, a),
        result="bool",
    ),
}


def _isinf_expr(x: Expr, attrs: dict[str, Any]) -> Expr:
    checks = []
    if attrs["detect_positive"]:
        checks.append(BinOp("==", x, _f(float("inf"))))
    if attrs["detect_negative"]:
        checks.append(BinOp("==", x, _f(float("-inf"))))
    if not checks:  # detects nothing: always false
        return BinOp("!=", _f(0), _f(0))
    return checks[0] if len(checks) == 1 else BinOp("or", checks[0], checks[1])


def _infer(name: str, op: Unary) -> Callable[[Sequence[TensorType], dict[str, Any]], TensorType]:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(name, types, 1)
        expect_dtype(name, types[0], op.dtypes)
        return TensorType(types[0].shape, op.result or types[0].dtype)

    return infer


def _reference(op: Unary) -> Callable[[Sequence[np.ndarray], dict[str, Any]], np.ndarray]:
    def reference(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
        (x,) = a
        out = op.reference(x.astype(np.float64), attrs)
        return np.asarray(out).astype(op.result or x.dtype)

    return reference


def _compute(op: Unary) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        return te.compute(out.shape, lambda *i: op.expr(x[i], attrs), name, tag="elemwise", dtype=out.dtype)

    return compute


for _name, _op in OPS.items():
    register(OpDef(_name, Pattern.ELEMWISE, _infer(_name, _op), _reference(_op), compute=_compute(_op)))
