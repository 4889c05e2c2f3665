"""Workloads that describe themselves: what temper writes rebuilds the same kernel, and a description
that was tampered with (or is not temper's) is refused before it can be stored under a key.

The descriptions are those of the real tasks of a small conv net: layout transforms, a conv with
constant weights and bias, a global pool and a matmul head.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from compiler.pipeline import CompileOptions
from compiler.target import host_target
from tests.models.builders import small_conv_model
from tuner.task import Task, extract_tasks
from tuner.workloads import DESCRIPTION_VERSION, check_description, describe, rebuild, rebuild_task


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return extract_tasks(small_conv_model().SerializeToString(), CompileOptions())


@pytest.fixture(scope="module")
def conv(tasks: list[Task]) -> Task:
    (task,) = [t for t in tasks if t.workload.anchor_op == "conv2d_nchwc"]
    return task


def _describe(task: Task) -> dict[str, Any]:
    """The description as tuning stores it (tuner.tune), after a trip through JSON as in a database."""
    description = describe(task.name, task.group, task.workload.const_params, task.workload.anchor_op)
    return json.loads(json.dumps(description))


def test_every_description_temper_writes_is_accepted_under_its_key(tasks: list[Task]) -> None:
    assert len(tasks) == 5
    for task in tasks:
        description = _describe(task)
        assert description["version"] == DESCRIPTION_VERSION
        assert description["ops"] == [c.op for c in task.group.body.calls()]
        assert check_description(task.key, description) is None, task.name


def test_a_description_names_the_constant_params_and_the_anchor(conv: Task) -> None:
    description = _describe(conv)
    assert description["anchor"] == "conv2d_nchwc"
    assert description["const_params"] == ["p1", "p2"]  # the weights and the bias
    assert description["ops"] == ["conv2d_nchwc", "add", "relu"]


def test_a_description_rebuilds_the_same_workload(tasks: list[Task]) -> None:
    for task in tasks:
        workload = rebuild(_describe(task), host_target())
        assert workload is not None, task.name
        assert workload.key == task.key and workload.flops == task.flops
        assert workload.const_params == task.workload.const_params


def test_a_rebuilt_task_has_the_same_reference(conv: Task) -> None:
    task = rebuild_task(_describe(conv), host_target())
    assert task is not None
    assert (task.key, task.weight, task.flops, task.alternative_of) == (conv.key, 1, conv.flops, None)
    inputs = conv.inputs(seed=3)
    np.testing.assert_allclose(task.reference(inputs), conv.reference(inputs), rtol=1e-6)


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda d: d.pop("ops"), "exactly the fields"),
        (lambda d: d.update(extra=1), "exactly the fields"),
        (lambda d: d.update(version="1"), "field 'version' has the wrong type"),
        (lambda d: d.update(version=True), "field 'version' has the wrong type"),
        (lambda d: d.update(const_params="p1"), "field 'const_params' has the wrong type"),
        (lambda d: d.update(anchor=7), "field 'anchor' has the wrong type"),
        (lambda d: d.update(name="conv\x00"), "not UTF-8 text"),
        (lambda d: d.update(ops=["conv2d_nchwc", "\ud800"]), "not UTF-8 text"),
        (lambda d: d.update(const_params=[1]), "not UTF-8 text"),
        (lambda d: d.update(version=DESCRIPTION_VERSION + 1), "another temper"),
        (lambda d: d.update(body="def @main() { nonsense"), "does not lower to a kernel"),
        (lambda d: d.update(body=d["body"].replace("relu(%1)", "sigmoid(%1)")), "not of its key"),
        (lambda d: d.update(const_params=["p1"]), "not of its key"),  # the bias as an input
    ],
)
def test_a_tampered_description_is_refused(conv: Task, tamper: Any, reason: str) -> None:
    description = _describe(conv)
    tamper(description)
    problem = check_description(conv.key, description)
    assert problem is not None and reason in problem


def test_another_workloads_description_is_refused_under_this_key(tasks: list[Task], conv: Task) -> None:
    (head,) = [t for t in tasks if t.workload.anchor_op == "matmul"]
    description = _describe(conv)
    description["body"] = _describe(head)["body"]  # a real kernel, but the matmul head's
    problem = check_description(conv.key, description)
    assert problem is not None and "not of its key" in problem


@pytest.mark.parametrize(
    "broken",
    [
        {"version": DESCRIPTION_VERSION + 1},  # written by another temper
        {"body": None},  # no body at all
        {"body": "def @main() { nonsense"},  # a body that does not parse
        {"body": "def @main(%p0: f32[4]) -> (f32[4]) {\n  %0 = frobnicate(%p0) : f32[4]\n  return (%0)\n}\n"},
    ],
)
def test_rebuild_gives_none_for_what_it_cannot_lower(conv: Task, broken: dict[str, Any]) -> None:
    description = {**_describe(conv), **broken}
    if description["body"] is None:
        del description["body"]
    assert rebuild(description, host_target()) is None
    assert rebuild_task(description, host_target()) is None
