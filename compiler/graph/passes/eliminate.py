"""Dead-code and common-subexpression elimination."""

from __future__ import annotations

import hashlib
from typing import Any

from compiler.graph.ir import Call, Const, Expr, Graph
from compiler.tensor_type import raw_bytes


def dead_code_elimination(graph: Graph) -> Graph:
    """Drop values no output needs.

    A Graph holds only its outputs, and every traversal walks back from them, so unreachable calls
    are already gone: this is the identity on the value (kept as a named step for pass lists and for
    readers who look for it). It is not listed in PASSES_BY_LEVEL for that reason.
    """
    return Graph(graph.inputs, graph.outputs, graph.output_names)


def _const_key(c: Const) -> tuple[Any, ...]:
    """dtype, shape and a digest of the bytes (hashed in place: a model's weights are hundreds of MB)."""
    return (c.type.dtype, c.type.shape, hashlib.sha256(raw_bytes(c.data)).digest())


def common_subexpression_elimination(graph: Graph) -> Graph:
    """Merge equal constants (same dtype, shape and bytes) and calls with the same op, the same
    (already merged) arguments and the same attributes."""
    consts: dict[tuple[Any, ...], Const] = {}
    calls: dict[tuple[Any, ...], Call] = {}
    memo: dict[int, Expr] = {}
    for node in graph.nodes():
        if isinstance(node, Const):
            memo[id(node)] = consts.setdefault(_const_key(node), node)  # equal digests: equal bytes
        elif isinstance(node, Call):
            args = tuple(memo[id(a)] for a in node.args)
            key = (node.op, tuple(id(a) for a in args), node.attrs)
            if key not in calls:
                same = all(a is b for a, b in zip(args, node.args, strict=True))
                calls[key] = node if same else Call(node.op, args, node.attrs, node.type, node.name)
            memo[id(node)] = calls[key]
        else:
            memo[id(node)] = node
    return graph.with_outputs(tuple(memo[id(o)] for o in graph.outputs))
