"""The search space: every sampled candidate is a valid schedule that computes the same result."""

from __future__ import annotations

import ctypes
import random
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.kernels import build_candidate
from compiler.pipeline import CompileOptions
from compiler.target import host_target
from compiler.tir.trace import Trace, replay
from tuner.features import N_FEATURES, extract
from tuner.space import sample, space_size
from tuner.task import extract_tasks, pack_inputs


def conv_matmul_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    fc = numpy_helper.from_array(rng.standard_normal((16 * 6 * 6, 24)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24])],
        [w, b, fc],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def run_candidate(task, trace) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    cand = build_candidate(task.workload, trace, host_target())
    inputs = task.inputs(seed=1)
    packed = pack_inputs(inputs, cand.layouts)
    out = np.zeros(cand.param_shapes[-1], cand.param_dtypes[-1])
    arrays = [packed[f"p{i}"] for i in range(len(packed))] + [out]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.so"
        path.write_bytes(cand.library)
        fn = getattr(ctypes.CDLL(str(path)), cand.symbol)
        fn.restype = ctypes.c_int32
        assert fn((ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])) == 0
    return out, task.reference(inputs)


def anchored(tasks: list) -> list:  # type: ignore[type-arg]
    """The conv/matmul tasks (the layout transforms at a blocked chain's ends are tasks too)."""
    return [t for t in tasks if t.workload.anchor_op is not None]


@pytest.fixture(scope="module")
def tasks():  # type: ignore[no-untyped-def]
    return anchored(extract_tasks(conv_matmul_model().SerializeToString(), CompileOptions()))


def test_tasks_have_weights_and_flops(tasks) -> None:  # type: ignore[no-untyped-def]
    assert [t.workload.anchor_op for t in tasks] == ["conv2d_nchwc", "matmul"]
    assert all(t.weight == 1 for t in tasks)
    conv = 2 * 16 * 6 * 6 * 8 * 9  # multiply-adds count 2; padding and the epilogue 1 per element
    assert tasks[0].flops == conv + 8 * 8 * 8 + 2 * 16 * 6 * 6


@pytest.mark.parametrize("index", [0, 1])
def test_random_candidates_compute_the_reference(tasks, index: int) -> None:  # type: ignore[no-untyped-def]
    task = tasks[index]
    rng = random.Random(index)
    seen = 0
    for _ in range(12):
        trace = sample(task.workload, rng)
        if trace is None:
            continue
        # the JSON form replays to the same schedule
        again = Trace.from_json(trace.dumps())
        assert replay(task.workload.func, again, task.workload.const_params).trace.dumps() == trace.dumps()
        got, want = run_candidate(task, again)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        seen += 1
        if seen == 4:
            break
    assert seen == 4
    assert space_size(task.workload) > 3


def _conv_model(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], **attrs: object) -> bytes:
    """Conv "conv" and a relu; a depthwise conv then feeds a dense 1x1 conv, as in MobileNet (alone,
    a depthwise conv stays planar)."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal(w).astype(np.float32), "w")]
    depthwise = attrs.get("group", 1) == x[1] == w[0] > 1
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", **attrs),
        helper.make_node("Relu", ["c"], ["r" if depthwise else "y"], name="relu"),
    ]
    if depthwise:
        nodes.append(helper.make_node("Conv", ["r", "pw"], ["y"], name="pointwise"))
        pointwise = rng.standard_normal((w[0], w[0], 1, 1)).astype(np.float32)
        weights.append(numpy_helper.from_array(pointwise, "pw"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out))],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


@pytest.mark.parametrize("layout", ["blocked", "planar"])
@pytest.mark.parametrize(
    ("x", "w", "out", "attrs"),
    [
        # depthwise, stride 2: rows of 24 outputs, vectors of 8, 24 or wider
        (
            (1, 16, 48, 48),
            (16, 1, 3, 3),
            (1, 16, 24, 24),
            {"group": 16, "strides": [2, 2], "pads": [1, 1, 1, 1]},
        ),
        # pointwise on a 7x7 plane, 64 output channels: up to 4 vectors of channels x 7 columns
        ((1, 32, 7, 7), (64, 32, 1, 1), (1, 64, 7, 7), {}),
    ],
)
def test_sampled_conv_schedules_compute_the_reference(x, w, out, attrs, layout: str) -> None:  # type: ignore[no-untyped-def]
    disabled = frozenset() if layout == "blocked" else frozenset({"alter_layout"})
    tasks = anchored(extract_tasks(_conv_model(x, w, out, **attrs), CompileOptions(disabled_passes=disabled)))
    (task,) = [t for t in tasks if "conv" in t.workload.nodes]
    assert task.workload.anchor_op == ("conv2d_nchwc" if layout == "blocked" else "conv2d")
    rng = random.Random(5)
    for _ in range(12):
        trace = sample(task.workload, rng)
        if trace is None:
            continue
        got, want = run_candidate(task, trace)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(dict(trace.decisions)))


def test_features_have_fixed_length_and_differ_between_schedules(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks[0]
    rng = random.Random(3)
    vectors = set()
    for _ in range(10):
        trace = sample(task.workload, rng)
        if trace is None:
            continue
        f = extract(replay(task.workload.func, trace, task.workload.const_params).func, task.flops, "conv2d")
        assert f.shape == (N_FEATURES,) and np.isfinite(f).all()
        vectors.add(f.tobytes())
    assert len(vectors) > 2


def test_workload_keys_follow_the_op_definition_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are keyed on what a trace means: bumping an op's definition version (a new compute
    or schedule) gives its kernels new keys, so records of the older definition stop applying."""
    import dataclasses

    from compiler.ops import registry

    model = conv_matmul_model().SerializeToString()
    before = [t.key for t in anchored(extract_tasks(model, CompileOptions()))]
    assert before == [t.key for t in anchored(extract_tasks(model, CompileOptions()))]  # stable
    conv = registry.get("conv2d_nchwc")
    monkeypatch.setitem(
        registry._REGISTRY, "conv2d_nchwc", dataclasses.replace(conv, version=conv.version + 1)
    )
    after = [t.key for t in anchored(extract_tasks(model, CompileOptions()))]
    assert after[0] != before[0] and after[1] == before[1]
