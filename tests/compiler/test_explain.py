"""`explain`: every kernel's nodes, the passes that rewrote them, the implementation chosen and why,
its schedule rule (and fallback) and schedule source, as compile builds it."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import OverrideError, UnknownNodeError
from compiler.explain import explain_model, profile_kernels
from compiler.graph.passes.alter_layout import DEPTHWISE_CHAIN
from compiler.kernels import ScheduleChoice, build_kernel, choose_rule
from compiler.pipeline import CompileOptions, build_frontier


def _model(channels: int = 32) -> bytes:
    """conv (blocked by alter_layout) + batch norm (folded) + relu, then an average pool and a 3x3
    conv big enough for Winograd."""
    rng = np.random.default_rng(0)
    c = channels
    inits = [
        numpy_helper.from_array(rng.standard_normal((c, 8, 3, 3)).astype(np.float32) * 0.1, "w1"),
        numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.1, "w2"),
        *(numpy_helper.from_array(np.full(c, v, np.float32), n) for n, v in [("s", 1.5), ("b", 0.1)]),
        *(numpy_helper.from_array(np.full(c, v, np.float32), n) for n, v in [("m", 0.2), ("v", 2.0)]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("AveragePool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Conv", ["p1", "w2"], ["y"], pads=[1, 1, 1, 1], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "explained",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 16, 16])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _kernel_of(explanation: Any, node: str) -> Any:
    return next(k for k in explanation.kernels if any(n.node == node for n in k.nodes))


def test_a_rewritten_conv_shows_its_passes_implementations_and_reasons() -> None:
    e = explain_model(_model())
    conv = _kernel_of(e, "conv1")
    assert conv.implementation == "conv2d_nchwc"
    assert "alter_layout: conv2d -> conv2d_nchwc" in conv.passes
    assert any(p.startswith("fold_batch_norm: batch_norm") for p in conv.passes)
    assert {n.node: n.onnx_op for n in conv.nodes} == {
        "conv1": "Conv",
        "bn1": "BatchNormalization",
        "relu1": "Relu",
    }
    assert "conv2d_winograd_nchwc (by conv_algorithm)" in conv.implementations
    assert any(w.startswith("alter_layout: runs blocked") for w in conv.why)
    assert any(w.startswith("conv_algorithm: stays direct") for w in conv.why)  # 8 input channels
    assert conv.rule == "conv2d_nchwc" and conv.rules == ("conv2d_nchwc", "generic") and conv.fallback is None
    assert conv.schedule["source"] == "default" and conv.decisions
    wino = _kernel_of(e, "conv2")
    assert wino.implementation == "conv2d_winograd_nchwc"
    assert "conv_algorithm: conv2d_nchwc -> conv2d_winograd_nchwc" in wino.passes
    assert any(w.startswith("conv_algorithm: Winograd F(2x2, 3x3)") for w in wino.why)
    assert "pointwise_conv_rows: keeps its rows: not a 1x1 conv" in conv.why


def test_a_pointwise_conv_over_a_small_plane_says_it_runs_as_one_row() -> None:
    rng = np.random.default_rng(1)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="pw")],
        "pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 7, 7])],
        [numpy_helper.from_array(rng.standard_normal((64, 32, 1, 1)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    conv = _kernel_of(explain_model(model), "pw")
    assert "pointwise_conv_rows: runs its 7x7 plane as one row" in conv.why
    assert "pointwise_conv_rows: runs its 7x7 plane as one row" in explain_model(model).text()


def test_a_depthwise_conv_alone_says_why_it_stays_planar() -> None:
    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=32, pads=[1, 1, 1, 1])],
        "depthwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 28, 28])],
        [numpy_helper.from_array(rng.standard_normal((32, 1, 3, 3)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    explanation = explain_model(model)
    conv = _kernel_of(explanation, "dw")
    assert conv.implementation == "conv2d" and conv.rule == "conv2d"
    (why,) = [w for w in conv.why if w.startswith("alter_layout")]
    assert why == f"alter_layout: stays NCHW: {DEPTHWISE_CHAIN}"
    assert DEPTHWISE_CHAIN in explanation.text()


def test_a_conv_to_half_a_block_of_channels_says_it_writes_half_blocks() -> None:
    rng = np.random.default_rng(3)
    weights = {"w1": (16, 16, 3, 3), "w2": (8, 16, 1, 1), "w3": (32, 8, 1, 1)}
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["a"], name="wide", pads=[1, 1, 1, 1]),
            helper.make_node("Conv", ["a", "w2"], ["n"], name="narrow"),
            helper.make_node("Conv", ["n", "w3"], ["y"], name="expand"),
        ],
        "narrow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    explanation = explain_model(model, CompileOptions(target="znver4"))  # 16 float lanes
    (why,) = [w for w in _kernel_of(explanation, "narrow").why if w.startswith("alter_layout")]
    assert why == "alter_layout: runs blocked (NCHW8c)"
    (why,) = [w for w in _kernel_of(explanation, "expand").why if w.startswith("alter_layout")]
    assert why == "alter_layout: runs blocked (NCHW16c)"


def test_a_kernel_of_an_op_family_without_a_rule_says_it_fell_back_to_the_generic_rule() -> None:
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1, name="scores")],
        "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    e = explain_model(model)
    softmax = _kernel_of(e, "scores")
    assert softmax.rule == "generic" and softmax.rules == ("generic",)
    assert softmax.fallback is not None and "has no schedule rule of its own" in softmax.fallback
    assert "fallback" in e.text() and "scores" in e.text()


def test_a_family_rule_that_cannot_apply_leaves_its_reason_in_the_provenance() -> None:
    """A workload whose anchor stage was inlined away cannot take its family's rule: the generic rule
    schedules it, and the provenance (the manifest, explain) says why."""
    fr = build_frontier(_model(), CompileOptions())
    w = next(k.workload for k in fr.kernels if k.workload.anchor_op == "conv2d_nchwc")
    orphan = replace(w, info=replace(w.info, anchor_block=None))
    _, rule, fallback = choose_rule(orphan)
    assert rule == "generic" and fallback is not None and "conv2d_nchwc rule" in fallback
    kernel = build_kernel(orphan, "orphan")
    assert kernel.provenance["rule"] == "generic" and kernel.provenance["fallback"] == fallback


class _Records:
    def __init__(self, choices: dict[str, ScheduleChoice]) -> None:
        self.choices = choices

    def lookup(self, workload_key: str, target_key: str) -> ScheduleChoice | None:
        return self.choices.get(workload_key)


def test_schedule_sources_records_and_overrides() -> None:
    model = _model()
    fr = build_frontier(model, CompileOptions())
    conv1 = next(k.workload for k in fr.kernels if "conv1" in k.workload.nodes)
    trace = build_kernel(conv1, conv1.func.name).trace
    record = ScheduleChoice(trace, {"source": "record", "record_id": 42, "measured_s": 1e-4, "model_s": 2e-4})
    e = explain_model(model, CompileOptions(), _Records({conv1.key: record}))
    conv = _kernel_of(e, "conv1")
    assert (
        conv.schedule["record_id"] == 42 and "record #42, 0.100 ms alone, 0.200 ms in the model" in e.text()
    )
    pinned = CompileOptions(
        overrides={"relu1": ScheduleChoice(trace, {"source": "override", "file": "t.json"})}
    )
    conv = _kernel_of(explain_model(model, pinned), "conv1")
    assert conv.schedule["source"] == "override" and conv.schedule["pinned_by"] == "relu1"


def test_node_filter_and_unknown_names() -> None:
    model = _model()
    e = explain_model(model, node="bn1")
    assert [n.node for k in e.kernels for n in k.nodes] == ["conv1", "bn1", "relu1"]
    by_kernel = explain_model(model, node=e.kernels[0].kernel)
    assert [k.kernel for k in by_kernel.kernels] == [e.kernels[0].kernel]
    with pytest.raises(UnknownNodeError, match="closest: conv1") as info:
        explain_model(model, node="conv_1")
    assert not isinstance(info.value, OverrideError)
    fr = build_frontier(model, CompileOptions())
    trace = build_kernel(fr.kernels[0].workload, "k").trace
    with pytest.raises(OverrideError):
        explain_model(
            model, CompileOptions(overrides={"nope": ScheduleChoice(trace, {"source": "override"})})
        )


def test_json_and_profile() -> None:
    model = _model()
    timed = profile_kernels(model, CompileOptions(), repeat=2)
    e = explain_model(model, profile=timed)
    data = json.loads(json.dumps(e.to_json()))
    assert [k["kernel"] for k in data["kernels"]] == [k.kernel for k in e.kernels]
    assert data["target"]["key"] and data["passes"][-1] == "fuse_ops"
    assert all(k["measured_s"] is not None and k["measured_s"] > 0 for k in data["kernels"])
    assert "measured" in e.text()


def test_a_node_lowered_to_several_ops_is_listed_once_with_its_implementations() -> None:
    """A Conv with a bias becomes conv2d + add under one node name: listed once, and what its conv
    could run as is still found from the op it was imported as."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="biased")],
        "biased",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    conv = _kernel_of(explain_model(model), "biased")
    assert [n.node for n in conv.nodes] == ["biased"] and "add" in conv.nodes[0].ops
    assert len(conv.passes) == len(set(conv.passes))
    assert "conv2d_winograd_nchwc (by conv_algorithm)" in conv.implementations


def test_a_recurrent_node_unrolled_into_many_ops_stays_one_short_line_per_pass() -> None:
    """A GRU over 12 steps imports as dozens of graph ops under its one node name: its nodes line
    and pass lines count the repeated ops rather than spelling out every step."""
    rng = np.random.default_rng(5)
    steps, width, hidden = 12, 6, 8
    inits = [
        numpy_helper.from_array(rng.standard_normal((1, 3 * hidden, width)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((1, 3 * hidden, hidden)).astype(np.float32), "r"),
    ]
    graph = helper.make_graph(
        [helper.make_node("GRU", ["x", "w", "r"], ["y"], hidden_size=hidden, name="gru")],
        "recurrent",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [steps, 1, 1, hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    explanation = explain_model(model)
    lines = [line for line in explanation.text().splitlines() if line.lstrip().startswith(("nodes", "pass "))]
    assert lines and any(" x" in line for line in lines)
    for line in lines:
        for side in line.split(" -> "):
            names = [op.split(" x")[0] for op in side.split("/")]
            assert len(names) == len(set(names)), line  # every op named once, with its count
        assert len(line) < 400, line
