"""The task scheduler: every task measured once, then the next batch to the largest expected gain,
converged tasks skipped, and the model's latency estimated the way compile will build it.

The tasks are the real ones of a small model: two identical 3x3 convs big enough for Winograd (one
workload of weight 2) between two layout transforms, plus the direct twin of the Winograd conv
that tuning measures as its alternative. Measurements are fed in by hand (the scheduler only reads
their times), each with the trace of the task's default schedule.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.kernels import default_schedule
from compiler.pipeline import CompileOptions
from tuner.scheduler import TaskScheduler
from tuner.search import TaskState
from tuner.task import Task, alternative_tasks, extract_tasks

INF = float("inf")


def twin_winograd_model(c: int = 32, hw: int = 12) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), name)
        for name in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv_b"),
        helper.make_node("Relu", ["c2"], ["y"], name="relu_b"),
    ]
    shape = [1, c, hw, hw]
    graph = helper.make_graph(
        nodes,
        "twin_winograd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    data = twin_winograd_model().SerializeToString()
    return extract_tasks(data, CompileOptions()) + alternative_tasks(data, CompileOptions())


def _states(tasks: list[Task]) -> dict[str, TaskState]:
    """The tasks' fresh states by role: into (layout), wino, out (layout), direct."""
    into, wino, out, direct = (TaskState(t) for t in tasks)
    return {"into": into, "wino": wino, "out": out, "direct": direct}


def _measure(sched: TaskScheduler, state: TaskState, secs: float) -> None:
    """One round of one measurement, accounted as the tuning loop does."""
    before = state.best_secs
    state.add(secs, default_schedule(state.task.workload)[0].trace)
    sched.record_round(state, before)


def _measure_all(sched: TaskScheduler, secs: dict[str, float], states: dict[str, TaskState]) -> None:
    for role, state in states.items():
        _measure(sched, state, secs[role])


def test_the_model_gives_weighted_tasks_and_a_direct_alternative(tasks: list[Task]) -> None:
    assert [t.weight for t in tasks] == [1, 2, 1, 2]
    assert tasks[1].workload.anchor_op == "conv2d_winograd_nchwc"
    assert tasks[3].workload.anchor_op == "conv2d_nchwc" and tasks[3].alternative_of == tasks[1].key
    assert [t.alternative_of for t in tasks[:3]] == [None, None, None]


def test_every_task_is_measured_once_before_any_gets_a_second_batch(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()))
    order = []
    for _ in states:
        state = sched.next()
        assert state is not None and state.trials == 0
        order.append(state)
        _measure(sched, state, 1e-4)
    assert order == list(states.values())  # in the order of the tasks
    assert sched.next() is not None and all(s.trials == 1 for s in states.values())


def test_the_next_batch_goes_to_the_task_with_the_largest_expected_gain(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()))
    # shares of the estimated latency (weight x best): into 1e-5, wino 4e-4, out 1e-5, direct 6e-4
    _measure_all(sched, {"into": 1e-5, "wino": 2e-4, "out": 1e-5, "direct": 3e-4}, states)
    assert sched.next() is states["direct"]  # the largest share
    _measure(sched, states["direct"], 3e-4)  # a round without gain halves its expected gain
    assert states["direct"].rounds_without_gain == 1
    assert sched.next() is states["wino"]
    _measure(sched, states["wino"], 1e-4)  # halved its time: expected gain 2e-4 x 0.5
    assert states["wino"].rounds_without_gain == 0
    assert sched.next() is states["direct"]  # 6e-4 x 0.5 is still more
    _measure(sched, states["direct"], 2.9e-4)  # improved by 3 %: expected gain 5.8e-4 x 0.03
    assert sched.next() is states["wino"]  # the task that improved more goes next


def test_an_improvement_under_half_a_percent_is_no_gain(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()))
    _measure_all(sched, {"into": 1e-5, "wino": 1e-4, "out": 1e-5, "direct": 1e-4}, states)
    _measure(sched, states["wino"], 0.999e-4)
    assert states["wino"].best_secs == 0.999e-4 and states["wino"].rounds_without_gain == 1
    _measure(sched, states["wino"], 0.9e-4)
    assert states["wino"].rounds_without_gain == 0


def test_converged_tasks_are_skipped_until_every_task_has_converged(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()), patience=2)
    _measure_all(sched, {"into": 1e-5, "wino": 2e-4, "out": 1e-5, "direct": 3e-4}, states)
    for _ in range(2):
        _measure(sched, states["direct"], 3e-4)
    assert sched.converged(states["direct"])
    picked = set()
    while (state := sched.next()) is not None:  # each remaining task converges after two more rounds
        assert state is not states["direct"], "a converged task gets no batch while others remain"
        picked.add(id(state))
        _measure(sched, state, state.best_secs)
    assert picked == {id(states[r]) for r in ("into", "wino", "out")}
    assert all(sched.converged(s) for s in states.values())


def test_failed_first_measurements_still_count_as_measured(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()))
    _measure_all(sched, {"into": INF, "wino": INF, "out": INF, "direct": INF}, states)
    state = sched.next()
    assert state is not None and state.trials == 1  # no task is asked for again as unmeasured
    assert sched.estimated_latency() == INF


def test_a_task_whose_measurements_keep_failing_converges(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()), patience=2)
    _measure_all(sched, {"into": INF, "wino": 2e-4, "out": 1e-5, "direct": 3e-4}, states)
    for _ in range(2):
        _measure(sched, states["into"], INF)
    assert sched.converged(states["into"])
    # and while it is live, its share counts like the slowest measured task, not as a whole second
    fresh = _states(tasks)
    again = TaskScheduler(list(fresh.values()), patience=5)
    _measure_all(again, {"into": INF, "wino": 2e-4, "out": 1e-5, "direct": 3e-4}, fresh)
    picks = []
    for _ in range(6):
        state = again.next()
        assert state is not None
        picks.append(state)
        _measure(again, state, INF if state is fresh["into"] else state.best_secs)
    assert any(p is not fresh["into"] for p in picks)


def test_estimated_latency_counts_weights_and_the_better_of_winograd_and_direct(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()))
    assert sched.estimated_latency() == INF  # nothing measured yet
    _measure(sched, states["into"], 1e-5)
    _measure(sched, states["wino"], 2e-4)
    _measure(sched, states["out"], 3e-5)
    # the direct twin not measured (or failed): the Winograd kernel's time counts, twice
    assert sched.estimated_latency() == pytest.approx(1e-5 + 2 * 2e-4 + 3e-5)
    _measure(sched, states["direct"], INF)
    assert sched.estimated_latency() == pytest.approx(1e-5 + 2 * 2e-4 + 3e-5)
    _measure(sched, states["direct"], 1.5e-4)  # faster: compile keeps it, and so does the estimate
    assert sched.estimated_latency() == pytest.approx(1e-5 + 2 * 1.5e-4 + 3e-5)
    _measure(sched, states["wino"], 1e-4)
    assert sched.estimated_latency() == pytest.approx(1e-5 + 2 * 1e-4 + 3e-5)


def test_a_model_kernel_never_measured_leaves_the_estimate_infinite(tasks: list[Task]) -> None:
    states = _states(tasks)
    sched = TaskScheduler(list(states.values()))
    for role in ("wino", "out", "direct"):
        _measure(sched, states[role], 1e-4)
    assert sched.estimated_latency() == INF


def test_without_tasks_there_is_nothing_to_tune() -> None:
    sched = TaskScheduler([])
    assert sched.next() is None
    assert sched.estimated_latency() == 0.0
