"""The search of one task: TaskState accounts for measurements, and `propose` returns distinct,
unmeasured candidates, best predicted first, that replay to legal kernels computing the reference.

The tasks are real: a matmul+relu (a space of dozens of schedules) and a small relu (a space of one).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.kernels import default_schedule
from compiler.pipeline import CompileOptions
from compiler.tir.trace import Trace, replay
from tests.tuner.test_space import run_candidate
from tuner.cost_model import RandomModel
from tuner.features import N_FEATURES
from tuner.records import trace_hash
from tuner.search import Candidate, TaskState, candidate, propose
from tuner.task import Task, extract_tasks


def _model(node: str, x: list[int], y: list[int], weight: tuple[int, int] | None = None) -> bytes:
    inits: list[onnx.TensorProto] = []
    inputs = ["x"]
    if weight is not None:
        rng = np.random.default_rng(0)
        inits.append(numpy_helper.from_array(rng.standard_normal(weight).astype(np.float32), "w"))
        inputs.append("w")
    nodes = [
        helper.make_node(node, inputs, ["h"], name="op"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        node.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def matmul() -> Task:
    (task,) = extract_tasks(_model("MatMul", [8, 32], [8, 24], weight=(32, 24)), CompileOptions())
    assert task.workload.anchor_op == "matmul"
    return task


@pytest.fixture(scope="module")
def relu() -> Task:
    """Relu after Relu: one elementwise kernel, scheduled by the generic rule, which decides nothing."""
    (task,) = extract_tasks(_model("Relu", [5], [5]), CompileOptions())
    return task


class KnownRanking:
    """A cost model whose ranking the test can recompute: a fixed weighted sum of the features."""

    def update(
        self, features: Sequence[np.ndarray], throughputs: Sequence[float], groups: Sequence[str]
    ) -> None:
        return None

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        return np.array([self.score(f) for f in features])

    @staticmethod
    def score(features: np.ndarray) -> float:
        return float(features.astype(np.float64) @ np.arange(1, len(features) + 1))


def _hashes(cands: list[Candidate]) -> list[str]:
    return [c.hash for c in cands]


def test_proposals_are_distinct_and_replay_to_their_own_trace(matmul: Task) -> None:
    cands = propose(TaskState(matmul), RandomModel(0), 8, random.Random(0))
    assert len(cands) == 8
    assert len(set(_hashes(cands))) == 8
    for c in cands:
        assert c.hash == trace_hash(c.trace.to_json())
        assert c.features.shape == (N_FEATURES,)
        again = Trace.from_json(c.trace.dumps())  # as the database stores it
        assert (
            replay(matmul.workload.func, again, matmul.workload.const_params).trace.dumps() == c.trace.dumps()
        )


def test_a_proposed_candidate_computes_the_reference(matmul: Task) -> None:
    (best,) = propose(TaskState(matmul), RandomModel(0), 1, random.Random(3))
    got, want = run_candidate(matmul, best.trace)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_measured_candidates_are_never_proposed_again(matmul: Task) -> None:
    state = TaskState(matmul)
    rng = random.Random(1)
    seen: set[str] = set()
    for round_ in range(3):
        cands = propose(state, RandomModel(round_), 6, rng)
        assert cands and not set(_hashes(cands)) & seen
        for k, c in enumerate(cands):
            state.add(1e-5 * (k + 1), c.trace)
        seen |= set(_hashes(cands))
    assert state.measured == seen and state.trials == len(seen)


def test_the_same_seed_proposes_the_same_candidates(matmul: Task) -> None:
    def run(seed: int) -> list[str]:
        return _hashes(propose(TaskState(matmul), RandomModel(0), 5, random.Random(seed)))

    assert run(4) == run(4)
    assert run(4) != run(5)


def test_the_best_predicted_come_first_and_epsilon_explores(matmul: Task) -> None:
    model = KnownRanking()
    ranked = propose(TaskState(matmul), model, 96, random.Random(2), epsilon=0.0)
    scores = [model.score(c.features) for c in ranked]
    assert scores == sorted(scores, reverse=True)
    assert len(ranked) > 8 and scores[3] > scores[4] and scores[1] > scores[2]  # no ties at the cuts below
    greedy = propose(TaskState(matmul), model, 4, random.Random(2), epsilon=0.0)
    assert _hashes(greedy) == _hashes(ranked[:4])  # the same pool: its four best
    mixed = propose(TaskState(matmul), model, 4, random.Random(2), epsilon=0.5)
    assert _hashes(mixed[:2]) == _hashes(ranked[:2])  # half greedy ...
    assert set(_hashes(mixed[2:])) <= set(_hashes(ranked[2:]))  # ... half drawn from the rest


def test_an_exhausted_space_proposes_nothing(relu: Task) -> None:
    state = TaskState(relu)
    (only,) = propose(state, RandomModel(0), 8, random.Random(0))
    assert only.trace.dumps() == default_schedule(relu.workload)[0].trace.dumps()
    state.add(1e-6, only.trace)
    assert propose(state, RandomModel(0), 8, random.Random(0)) == []


def test_task_state_keeps_the_best_and_a_bounded_elite(matmul: Task) -> None:
    state = TaskState(matmul)
    cands = propose(state, RandomModel(0), 20, random.Random(6))
    times = [float(t) for t in np.random.default_rng(0).permutation(20) + 1]
    news = [
        state.add(secs * 1e-6, c.trace, record_id=k)
        for k, (secs, c) in enumerate(zip(times, cands, strict=True))
    ]
    assert news[0] and news == [secs == min(times[: k + 1]) for k, secs in enumerate(times)]
    assert state.best_secs == 1e-6 and state.best_record_id == times.index(1.0)
    assert [secs for secs, _ in state.elite] == [k * 1e-6 for k in range(1, 17)]  # the 16 fastest, sorted
    assert state.elite[0][1] == dict(cands[times.index(1.0)].trace.decisions)
    assert state.secs_by_hash[cands[0].hash] == times[0] * 1e-6


def test_a_failed_measurement_counts_as_a_trial_but_never_as_a_parent(matmul: Task) -> None:
    state = TaskState(matmul)
    (c,) = propose(state, RandomModel(0), 1, random.Random(7))
    assert not state.add(float("inf"), c.trace)
    assert state.trials == 1 and c.hash in state.measured
    assert state.best_secs == float("inf") and state.best_record_id is None and not state.elite
    assert c.hash not in _hashes(propose(state, RandomModel(0), 8, random.Random(7)))


def test_candidate_describes_a_schedule(matmul: Task) -> None:
    sch, _ = default_schedule(matmul.workload)
    c = candidate(matmul, sch)
    assert c.trace == sch.trace and c.hash == trace_hash(sch.trace.to_json())
    assert c.features.shape == (N_FEATURES,) and np.isfinite(c.features).all()
