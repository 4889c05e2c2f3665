"""Relay-like text form of a graph: the primary debugging view, parsed back by parser.py.

    # @conv1.weight: f32[64, 3, 7, 7]
    def @main(%x: f32[1, 3, 224, 224]) -> (f32[1, 1000]) {
      %0 = conv2d(%x, @conv1.weight, dilations=[1, 1], groups=1, pads=[3, 3, 3, 3], strides=[2, 2])
           : f32[1, 64, 112, 112]  # /conv1/Conv   (one line in the real output)
      ...
      return (%41 as "logits")
    }

Inputs are %name, call results %0, %1, ... in topological order, constants @name (made unique
per graph; `graph_params` returns the arrays under the same names). Attributes print sorted by key;
a trailing comment keeps the source (ONNX) node name. Comment lines above `def` list every
constant's type (and value when tiny); the parser ignores comment lines.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from compiler.graph.ir import Call, Const, Graph

_BARE = re.compile(r"[A-Za-z0-9_./\-]+")
_SMALL_CONST = 4  # constants with at most this many elements show their values in the header


def quote_name(name: str) -> str:
    """A name as printed after % or @: bare when unambiguous, else a JSON string."""
    if _BARE.fullmatch(name) and not name.isdigit():
        return name
    return json.dumps(name)


def format_attr(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


def format_comment(name: str) -> str:
    if not name:
        return ""
    safe = name == name.strip() and name.isprintable() and not name.startswith('"')
    return f"  # {name if safe else json.dumps(name)}"


def const_names(graph: Graph) -> dict[int, str]:
    """id(Const) -> unique printed name (first come keeps its own name, later clashes get .1, .2 ...)."""
    names: dict[int, str] = {}
    taken: set[str] = set()
    for node in graph.nodes():
        if isinstance(node, Const) and id(node) not in names:
            base = node.name or "const"
            name, k = base, 0
            while name in taken:
                k += 1
                name = f"{base}.{k}"
            taken.add(name)
            names[id(node)] = name
    return names


def graph_params(graph: Graph) -> dict[str, np.ndarray]:
    """The constant arrays under their printed names (what `parse_graph` needs)."""
    names = const_names(graph)
    return {names[id(n)]: n.data for n in graph.nodes() if isinstance(n, Const)}


def value_names(graph: Graph, consts: dict[int, str]) -> dict[int, str]:
    """id(node) -> printed reference (%x, %0, @w)."""
    refs: dict[int, str] = {id(v): "%" + quote_name(v.name) for v in graph.inputs}
    counter = 0
    for node in graph.nodes():
        if isinstance(node, Const):
            refs[id(node)] = "@" + quote_name(consts[id(node)])
        elif isinstance(node, Call):
            refs[id(node)] = f"%{counter}"
            counter += 1
        elif id(node) not in refs:  # a Var that is not an input: printed, the verifier rejects it
            refs[id(node)] = "%" + quote_name(node.name)
    return refs


def format_call(call: Call, refs: dict[int, str]) -> str:
    """`%3 = op(args, key=value, ...) : type  # node name`; a fused call prints as @kernel_name(args)."""
    parts = [refs[id(a)] for a in call.args]
    group = call.attr("group") if call.op == "fused" else None
    if group is not None:
        op = "@" + quote_name(group.name)
    else:
        op = call.op
        parts += [f"{k}={format_attr(v)}" for k, v in call.attrs]
    return f"{refs[id(call)]} = {op}({', '.join(parts)}) : {call.type}{format_comment(call.name)}"


def format_function(name: str, graph: Graph, consts: dict[int, str]) -> list[str]:
    """`def @name(...) -> (...) { ... }` lines."""
    refs = value_names(graph, consts)
    params = ", ".join(f"{refs[id(v)]}: {v.type}" for v in graph.inputs)
    results = ", ".join(str(o.type) for o in graph.outputs)
    lines = [f"def @{quote_name(name)}({params}) -> ({results}) {{"]
    for node in graph.nodes():
        if isinstance(node, Call):
            lines.append("  " + format_call(node, refs))
    pairs = zip(graph.outputs, graph.output_names, strict=True)
    outs = ", ".join(f"{refs[id(o)]} as {json.dumps(n)}" for o, n in pairs)
    lines.append(f"  return ({outs})")
    lines.append("}")
    return lines


def const_header(graph: Graph, consts: dict[int, str]) -> list[str]:
    lines = []
    for node in graph.nodes():
        if isinstance(node, Const):
            line = f"# @{quote_name(consts[id(node)])}: {node.type}"
            if node.data.size <= _SMALL_CONST:
                line += f" = {np.array2string(node.data, separator=', ')}"
            lines.append(line.replace("\n", " "))
    return lines


def print_graph(graph: Graph) -> str:
    consts = const_names(graph)
    return "\n".join([*const_header(graph, consts), *format_function("main", graph, consts)]) + "\n"
