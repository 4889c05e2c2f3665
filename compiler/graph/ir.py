"""Graph IR: a typed SSA dataflow graph with static shapes.

Nodes are frozen values compared by identity (a graph is a DAG, structural equality would be
exponential); passes build new nodes instead of mutating old ones. Every call has exactly one
output: multi-output ONNX ops are split into single-output calls by the frontend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from compiler.tensor_type import TensorType

if TYPE_CHECKING:
    from compiler.graph.passes.fuse import Group

AttrValue = int | float | str | tuple[Any, ...] | None


@dataclass(frozen=True, slots=True, eq=False)
class Var:
    """A graph input."""

    name: str
    type: TensorType


@dataclass(frozen=True, slots=True, eq=False)
class Const:
    """A constant tensor (ONNX initializer or folded value)."""

    name: str
    data: np.ndarray
    type: TensorType = field(init=False)

    def __post_init__(self) -> None:
        data = np.asarray(self.data, order="C")  # (ascontiguousarray would turn 0-d into 1-d)
        data.flags.writeable = False
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "type", TensorType(data.shape, str(data.dtype)))


def attrs_of(mapping: Mapping[str, AttrValue]) -> tuple[tuple[str, AttrValue], ...]:
    """Canonical, hashable attribute tuple: sorted keys, lists turned into tuples."""

    def freeze(v: Any) -> AttrValue:
        if isinstance(v, (list, tuple)):
            return tuple(freeze(x) for x in v)
        if isinstance(v, (np.integer, bool)):
            return int(v)
        if isinstance(v, np.floating):
            return float(v)
        if isinstance(v, bytes):
            return v.decode()
        return v  # type: ignore[no-any-return]  # anything else passes as is; the verifier rejects it

    return tuple(sorted((k, freeze(v)) for k, v in mapping.items()))


@dataclass(frozen=True, slots=True, eq=False)
class Call:
    """One operator application. `name` is the source (ONNX) node name, kept for errors,
    overrides and printing."""

    op: str
    args: tuple[Expr, ...]
    attrs: tuple[tuple[str, AttrValue | Group], ...]  # a fused call's one attribute is its Group
    type: TensorType
    name: str = ""

    def attr(self, key: str, default: AttrValue = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


Expr = Var | Const | Call


@dataclass(frozen=True, slots=True, eq=False)
class Graph:
    """A whole model: inputs, named outputs."""

    inputs: tuple[Var, ...]
    outputs: tuple[Expr, ...]
    output_names: tuple[str, ...]

    def nodes(self) -> list[Expr]:
        """All reachable nodes in topological order (inputs first, stable)."""
        return topo_order(self.outputs, self.inputs)

    def calls(self) -> list[Call]:
        return [n for n in self.nodes() if isinstance(n, Call)]

    def with_outputs(self, outputs: tuple[Expr, ...]) -> Graph:
        return Graph(self.inputs, outputs, self.output_names)


def topo_order(roots: tuple[Expr, ...], inputs: tuple[Var, ...] = ()) -> list[Expr]:
    """Post-order DFS without recursion (graphs can be thousands of nodes deep)."""
    seen: set[int] = set()
    order: list[Expr] = []
    for v in inputs:
        seen.add(id(v))
        order.append(v)
    for root in roots:
        stack: list[tuple[Expr, int]] = [(root, 0)]
        while stack:
            node, i = stack.pop()
            if id(node) in seen:
                continue
            if isinstance(node, Call) and i < len(node.args):
                stack.append((node, i + 1))
                child = node.args[i]
                if id(child) not in seen:
                    stack.append((child, 0))
                continue
            seen.add(id(node))
            order.append(node)
    return order


def users(graph: Graph) -> dict[int, list[Call]]:
    """Map id(node) -> calls that consume it."""
    out: dict[int, list[Call]] = {}
    for n in graph.calls():
        for a in n.args:
            out.setdefault(id(a), []).append(n)
    return out


def rewrite(graph: Graph, fn: Callable[[Call, tuple[Expr, ...]], Expr | None]) -> Graph:
    """Rebuild the graph bottom-up. `fn(node, new_args)` returns the replacement of a call
    whose arguments were already rewritten (or None to keep it, rebuilt on the new args)."""
    memo: dict[int, Expr] = {}
    for node in graph.nodes():
        if isinstance(node, Call):
            new_args = tuple(memo[id(a)] for a in node.args)
            replaced = fn(node, new_args)
            if replaced is None:
                if all(a is b for a, b in zip(new_args, node.args, strict=True)):
                    replaced = node
                else:
                    replaced = Call(node.op, new_args, node.attrs, node.type, node.name)
            memo[id(node)] = replaced
        else:
            memo[id(node)] = node
    return graph.with_outputs(tuple(memo[id(o)] for o in graph.outputs))
