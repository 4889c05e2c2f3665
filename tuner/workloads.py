"""Workloads that describe themselves: rebuild a task's kernel from its database description.

A workload's description keeps the fused group's body as graph IR text (the group's parameters are
graph inputs, so no constant data is needed) and which parameters are constants. That is enough to
lower it again on any machine, replay any of its records and compute their features: the cost model
then warm-starts from every record of the target, not only those of the model being tuned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compiler.errors import CompilerError
from compiler.graph.parser import parse_graph
from compiler.graph.passes.fuse import Group
from compiler.graph.printer import print_graph
from compiler.kernels import Workload, lower_group
from compiler.ops import registry
from compiler.ops.registry import Pattern
from compiler.target import Target, host_target
from tuner.task import Task

DESCRIPTION_VERSION = 1


def describe(name: str, group: Group, const_params: frozenset[str], anchor_op: str | None) -> dict[str, Any]:
    return {
        "version": DESCRIPTION_VERSION,
        "name": name,
        "ops": [c.op for c in group.body.calls()],
        "anchor": anchor_op,
        "body": print_graph(group.body),
        "const_params": sorted(const_params),
    }


_DESCRIPTION_FIELDS: dict[str, type | tuple[type, ...]] = {
    "version": int,
    "name": str,
    "ops": list,
    "anchor": (str, type(None)),
    "body": str,
    "const_params": list,
}


def check_description(key: str, description: Mapping[str, Any]) -> str | None:
    """Why an imported workload description cannot be stored under `key` (None when it can): it must
    have exactly the fields temper writes, and lowering its body must give a workload of that key,
    so that nothing stored under a key describes another computation."""
    if set(description) != set(_DESCRIPTION_FIELDS):
        return f"description must have exactly the fields {sorted(_DESCRIPTION_FIELDS)}"
    for name, kind in _DESCRIPTION_FIELDS.items():
        value = description[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"description field {name!r} has the wrong type"
    texts = [description["name"], description["body"], *description["ops"], *description["const_params"]]
    if description["anchor"] is not None:
        texts.append(description["anchor"])
    if not all(isinstance(t, str) and _is_text(t) for t in texts):
        return "description holds a value that is not UTF-8 text"
    if description["version"] != DESCRIPTION_VERSION:
        return f"description version {description['version']} is not {DESCRIPTION_VERSION} (another temper?)"
    workload = rebuild(description, host_target())
    if workload is None:
        return "description does not lower to a kernel"
    if workload.key != key:
        return f"description is of workload {workload.key!r}, not of its key"
    return None


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def rebuild_task(description: Mapping[str, Any], target: Target) -> Task | None:
    """A described workload as a task to measure (its group body is the reference); None as rebuild."""
    workload = rebuild(description, target)
    if workload is None:
        return None
    body = parse_graph(description["body"], {})
    group = Group(str(description.get("name", "kernel")), body.inputs, body, None)
    return Task(workload.func.name, workload, group, 1, workload.flops)


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
        group = Group(str(description.get("name", "kernel")), body.inputs, body, anchor)
        consts = frozenset(int(p[1:]) for p in description.get("const_params", []))
        return lower_group(group, group.name, target, consts)
    except (CompilerError, KeyError, ValueError, TypeError, IndexError, RecursionError):
        return None
