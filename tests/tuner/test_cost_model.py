"""The cost model ranks held-out measured candidates far better than chance.

Measures 36 random candidates of one conv task for real, trains the XGBoost ranker on 24 and
reports the Spearman rank correlation of its predictions with the measured throughput of the other
12 (random scores have an expected correlation of 0). Seen here: 0.84-0.97.
"""

from __future__ import annotations

import random

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from compiler.pipeline import CompileOptions
from compiler.target import host_target
from compiler.tir.trace import replay
from tuner.cost_model import RandomModel, XGBoostModel
from tuner.features import extract
from tuner.measure import LocalBuilder, LocalRunner, MeasureInput, MeasureOptions, measure
from tuner.space import sample
from tuner.task import extract_tasks


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_xgboost_ranks_held_out_candidates() -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 28, 28])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    # the direct conv's schedule space (a Winograd conv's is too small to rank 36 candidates from)
    options = CompileOptions(disabled_passes=frozenset({"conv_algorithm"}))
    (task,) = [t for t in extract_tasks(model.SerializeToString(), options) if t.workload.anchor_op]
    draws = random.Random(0)
    traces = {}
    while len(traces) < 80:  # enough held-out candidates that a few noisy timings cannot flip the ranking
        t = sample(task.workload, draws)
        if t is not None:
            traces[t.dumps()] = t
    cands = list(traces.values())
    # longer repeats than the tuner's default: this shared machine's speed drifts within seconds
    runner = LocalRunner(MeasureOptions(repeats=5, min_repeat_secs=0.01))
    results = measure(LocalBuilder(target=host_target()), runner, [MeasureInput(task, t) for t in cands])
    assert all(run.ok for _, run in results), [run.error_message for _, run in results if not run.ok]
    y = np.array([task.flops / np.median(run.run_secs) for _, run in results])
    feats = [
        extract(
            replay(task.workload.func, t, task.workload.const_params).func,
            task.flops,
            task.workload.info.anchor_block,
        )
        for t in cands
    ]
    order = np.random.default_rng(1).permutation(len(cands))
    train, held = order[:50], order[50:]
    xgb = XGBoostModel(min_samples=8)
    xgb.update([feats[i] for i in train], y[train], ["conv"] * len(train))
    rho = _spearman(xgb.predict([feats[i] for i in held]), y[held])
    # chance level: the mean over many random rankings (one draw alone reached 0.66 here)
    rho_random = float(
        np.mean([_spearman(RandomModel(s).predict([feats[i] for i in held]), y[held]) for s in range(20)])
    )
    print(f"rank correlation on held-out candidates: xgboost {rho:.2f}, random {rho_random:.2f}")
    # well above chance; not a fixed high bar: timings on a shared 2-core machine are noisy, and a
    # Spearman rank over 30 candidates varies by about 0.2 from noise alone
    assert rho > 0.4 and rho > rho_random + 0.25
