"""Small helpers to build graph IR by hand in tests (types come from the ops' shape rules)."""

from __future__ import annotations

from typing import Any

import numpy as np

from compiler.graph.ir import Call, Const, Expr, Graph, Var, attrs_of
from compiler.ops.registry import get
from compiler.tensor_type import TensorType

_rng = np.random.default_rng(7)


def var(name: str, *shape: int, dtype: str = "float32") -> Var:
    return Var(name, TensorType(shape, dtype))


def const(name: str, *shape: int, value: float | None = None) -> Const:
    if value is not None:
        return Const(name, np.full(shape, value, dtype=np.float32))
    return Const(name, _rng.standard_normal(shape).astype(np.float32))


def call(op: str, *args: Expr, name: str = "", **attrs: Any) -> Call:
    frozen = attrs_of(attrs)
    return Call(op, args, frozen, get(op).infer([a.type for a in args], dict(frozen)), name or op)


def graph(inputs: list[Var], *outputs: Expr) -> Graph:
    return Graph(tuple(inputs), tuple(outputs), tuple(f"out{i}" for i in range(len(outputs))))


def feeds(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype) for v in g.inputs}


CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1}
