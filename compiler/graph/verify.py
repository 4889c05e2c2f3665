"""Graph verifier: run after every pass in tests (and cheaply anywhere) to catch broken invariants.

Checks: inputs are unique Vars and every reachable Var is an input; outputs match their names;
every Const's dtype is one of the IR's; every call names a registered op (or "fused"), has well-formed
attributes, and its type equals what the op's shape rule infers from its arguments. A fused call
must match its group (params, body, output type); bodies are verified recursively.
"""

from __future__ import annotations

from typing import Any

from compiler.errors import CompilerError, ShapeError
from compiler.graph.ir import Call, Const, Graph, Var
from compiler.ops import registry
from compiler.tensor_type import DTYPES


def _check_attr_value(value: Any) -> bool:
    if value is None or isinstance(value, (int, float, str)):
        return True
    if isinstance(value, tuple):
        return all(_check_attr_value(v) for v in value)
    return False


def _check_attrs(call: Call) -> None:
    if not isinstance(call.attrs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in call.attrs):
        raise CompilerError("attributes must be a tuple of (key, value) pairs", node=call.name, op=call.op)
    keys = [k for k, _ in call.attrs]
    if keys != sorted(set(keys)) or not all(isinstance(k, str) for k in keys):
        raise CompilerError(
            f"attribute keys {keys} must be unique strings in sorted order", node=call.name, op=call.op
        )
    if call.op == "fused":
        return
    for key, value in call.attrs:
        if not _check_attr_value(value):
            raise CompilerError(f"attribute {key}={value!r} is not a plain value", node=call.name, op=call.op)


def _check_fused(call: Call, group_names: set[str]) -> None:
    from compiler.graph.passes.fuse import Group

    group = call.attr("group")
    if len(call.attrs) != 1 or not isinstance(group, Group):
        raise CompilerError(
            "a fused call carries exactly one attribute: its Group", node=call.name, op="fused"
        )
    if group.name in group_names:
        raise CompilerError(f"group name {group.name!r} is used twice", node=call.name, op="fused")
    group_names.add(group.name)
    body = group.body
    if body.inputs != group.params or len(body.outputs) != 1:
        raise CompilerError(
            "group body must take the params and return one value", node=group.name, op="fused"
        )
    if len(call.args) != len(group.params):
        raise CompilerError(
            f"{len(call.args)} arguments for {len(group.params)} params", node=group.name, op="fused"
        )
    for arg, param in zip(call.args, group.params, strict=True):
        if arg.type != param.type:
            raise CompilerError(
                f"argument {arg.type} passed for {param.name}: {param.type}", node=group.name, op="fused"
            )
    if call.type != body.outputs[0].type:
        raise CompilerError(
            f"call type {call.type} != body type {body.outputs[0].type}", node=group.name, op="fused"
        )
    if any(c.op == "fused" for c in body.calls()):
        raise CompilerError("groups do not nest", node=group.name, op="fused")
    verify_graph(body)
    if group.anchor is not None and not any(c is group.anchor for c in body.calls()):
        raise CompilerError("the group's anchor is not in its body", node=group.name, op="fused")


def verify_graph(graph: Graph) -> None:
    """Raise CompilerError on the first broken invariant."""
    if not all(isinstance(v, Var) for v in graph.inputs):
        raise CompilerError("graph inputs must be Vars")
    names = [v.name for v in graph.inputs]
    if len(set(names)) != len(names):
        raise CompilerError(f"duplicate input names in {names}")
    if len(graph.outputs) != len(graph.output_names) or len(set(graph.output_names)) != len(
        graph.output_names
    ):
        raise CompilerError(f"outputs and output names {list(graph.output_names)} do not match one to one")
    inputs = {id(v) for v in graph.inputs}
    group_names: set[str] = set()
    for node in graph.nodes():
        if isinstance(node, Var):
            if id(node) not in inputs:
                raise CompilerError(f"value %{node.name} is not a graph input")
        elif isinstance(node, Const):
            if node.type.dtype not in DTYPES or node.data.shape != node.type.shape:
                raise CompilerError(f"constant @{node.name} has a bad type {node.type}")
        elif isinstance(node, Call):
            _check_attrs(node)
            if node.op == "fused":
                _check_fused(node, group_names)
                continue
            try:
                opdef = registry.get(node.op)
            except KeyError:
                raise CompilerError(f"unknown op {node.op!r}", node=node.name, op=node.op) from None
            try:
                inferred = opdef.infer([a.type for a in node.args], node.attr_dict)
            except ShapeError as e:
                raise CompilerError(f"invalid call: {e.message}", node=node.name, op=node.op) from None
            if inferred != node.type:
                raise CompilerError(
                    f"type {node.type} differs from inferred {inferred}", node=node.name, op=node.op
                )
        else:
            raise CompilerError(f"unknown node kind {type(node).__name__}")
