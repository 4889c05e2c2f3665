"""Run a graph with the ops' numpy references: the oracle for tests and the engine of constant folding.

Works on plain graphs and on fused graphs (a "fused" call runs its group's body).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from compiler.errors import CompilerError, ShapeError
from compiler.graph.ir import Call, Const, Expr, Graph, Var
from compiler.ops import registry
from compiler.tensor_type import TensorType


def evaluate(
    op: str, arrays: Sequence[np.ndarray], attrs: dict[str, Any], out_type: TensorType, *, name: str = ""
) -> np.ndarray:
    """One op on concrete arrays; the result is checked against (and cast to) the inferred type."""
    try:
        data = np.asarray(registry.get(op).reference(arrays, attrs))
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:
        raise ShapeError(f"cannot evaluate: {e}", node=name, op=op) from None
    if data.shape != out_type.shape:
        raise CompilerError(
            f"reference produced shape {list(data.shape)}, inferred {list(out_type.shape)}", node=name, op=op
        )
    return data.astype(out_type.dtype, copy=False)


def folded_name(args: Sequence[Expr], fallback: str) -> str:
    """A folded value keeps the name of its largest constant input (a reshaped bias stays 'fc.bias')."""
    largest = max(args, key=lambda a: a.type.size, default=None)
    return largest.name if isinstance(largest, Const) and largest.type.size > 1 else fallback


def fold(
    op: str, args: Sequence[Expr], attrs: dict[str, Any], out_type: TensorType, *, name: str = ""
) -> Const:
    """Evaluate an op whose arguments are all constants into a new constant."""
    arrays = [a.data for a in args if isinstance(a, Const)]
    if len(arrays) != len(args):
        raise CompilerError("fold needs constant arguments", node=name, op=op)
    return Const(folded_name(args, name or op), evaluate(op, arrays, attrs, out_type, name=name))


def _check_input(var: Var, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.shape != var.type.shape or str(arr.dtype) != var.type.dtype:
        raise ShapeError(f"input {var.name!r} expects {var.type}, got {arr.dtype}{list(arr.shape)}")
    return arr


def _run(graph: Graph, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    values: dict[int, np.ndarray] = {id(v): a for v, a in zip(graph.inputs, feeds, strict=True)}
    nodes = graph.nodes()
    last_use: dict[int, int] = {}
    for i, n in enumerate(nodes):
        if isinstance(n, Call):
            for a in n.args:
                last_use[id(a)] = i
    keep = {id(o) for o in graph.outputs}
    for i, n in enumerate(nodes):
        if isinstance(n, Const):
            values[id(n)] = n.data
        elif isinstance(n, Call):
            args = [values[id(a)] for a in n.args]
            if n.op == "fused":
                group = n.attr("group")
                (values[id(n)],) = _run(group.body, args)
            else:
                values[id(n)] = evaluate(n.op, args, n.attr_dict, n.type, name=n.name)
            for a in n.args:  # free intermediates after their last use (models can be large)
                if last_use.get(id(a)) == i and id(a) not in keep and not isinstance(a, (Var, Const)):
                    values.pop(id(a), None)
    return [values[id(o)] for o in graph.outputs]


def run_graph(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Evaluate every output; `inputs` maps input names to arrays of exactly the declared type."""
    missing = [v.name for v in graph.inputs if v.name not in inputs]
    if missing:
        raise ShapeError(f"missing input(s): {', '.join(missing)}")
    unknown = sorted(set(inputs) - {v.name for v in graph.inputs})
    if unknown:
        raise ShapeError(f"unknown input(s): {', '.join(unknown)}")
    feeds = [_check_input(v, inputs[v.name]) for v in graph.inputs]
    outs = _run(graph, feeds)
    return dict(zip(graph.output_names, outs, strict=True))
