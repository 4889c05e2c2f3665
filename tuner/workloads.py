"""Workloads that describe themselves: rebuild a task's kernel from its database description.

A workload's description keeps the fused group's body as graph IR text (the group's parameters are
graph inputs, so no constant data is needed) and which parameters are constants. That is enough to
lower it again on any machine, replay any of its records and compute their features: the cost model
then warm-starts from every record of the target, not only those of the model being tuned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compiler.errors import CompilerError
from compiler.graph.ir import Call, Graph
from compiler.graph.parser import parse_graph
from compiler.graph.printer import print_graph
from compiler.kernels import Workload, lower_group
from compiler.ops import registry
from compiler.ops.registry import Pattern
from compiler.target import Target

DESCRIPTION_VERSION = 1


@dataclass(frozen=True, slots=True, eq=False)
class _Group:
    """The parts of compiler.graph.passes.fuse.Group that lowering reads."""

    name: str
    params: tuple[Any, ...]
    body: Graph
    anchor: Call | None


def describe(name: str, group: Any, const_params: frozenset[str], anchor_op: str | None) -> dict[str, Any]:
    return {
        "version": DESCRIPTION_VERSION,
        "name": name,
        "ops": [c.op for c in group.body.calls()],
        "anchor": anchor_op,
        "body": print_graph(group.body),
        "const_params": sorted(const_params),
    }


def rebuild(description: Mapping[str, Any], target: Target) -> Workload | None:
    """Lower a described workload again (None if the description is too old or does not parse)."""
    if description.get("version") != DESCRIPTION_VERSION or "body" not in description:
        return None
    try:
        body = parse_graph(description["body"], {})
        anchor = next(
            (c for c in body.calls() if registry.get(c.op).pattern in (Pattern.ANCHOR, Pattern.REDUCTION)),
            None,
        )
        group = _Group(description.get("name", "kernel"), body.inputs, body, anchor)
        consts = frozenset(int(p[1:]) for p in description.get("const_params", []))
        return lower_group(group, group.name, target, consts)
    except (CompilerError, KeyError, ValueError):
        return None
