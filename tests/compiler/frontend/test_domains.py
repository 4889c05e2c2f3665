"""Ops of other domains than ONNX's own (the com.microsoft fused ops onnxruntime's optimizer writes
into a file it saves) are refused with one error that lists every such node, by name and op."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from compiler.errors import UnsupportedOpError
from compiler.frontend.onnx import load_onnx
from tests.models import builders


def test_every_node_of_another_domain_is_listed() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("FastGelu", ["x"], ["a"], name="gelu_fused", domain="com.microsoft"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            helper.make_node("BiasGelu", ["b", "x"], ["y"], name="bias_gelu", domain="com.microsoft"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    with pytest.raises(UnsupportedOpError) as caught:
        load_onnx(model.SerializeToString())
    message = str(caught.value)
    assert message.startswith("2 unsupported node(s)")
    assert "gelu_fused (FastGelu" in message and "bias_gelu (BiasGelu" in message
    assert "domain 'com.microsoft' is not supported" in message
    assert "relu" not in message.split(". Supported")[0]


def test_a_file_onnxruntime_optimized_names_its_fused_nodes(tmp_path: Path) -> None:
    """A BERT layer saved by onnxruntime after its extended optimizations holds com.microsoft fused
    ops (the attention, layer norms, GELU): each is named in the one error."""
    source = builders.bert_layer(seq=16, hidden=64, heads=4, ffn=128)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(source.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(tmp_path / "optimized.onnx")
    fused = [n for n in optimized.graph.node if n.domain == "com.microsoft"]
    assert fused, "onnxruntime wrote no fused op"
    with pytest.raises(UnsupportedOpError) as caught:
        load_onnx(optimized.SerializeToString())
    message = str(caught.value)
    assert message.startswith(f"{len(fused)} unsupported node(s)")
    for node in fused:
        assert f"({node.op_type}" in message


def test_a_quantized_model_of_integer_ops_is_named_as_such() -> None:
    """QOperator-format ops (QLinearMatMul, QLinearConv): QDQ and dynamically quantized models
    convert (tests/compiler/frontend/test_convert_quant.py)."""
    consts = [
        helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]),
        helper.make_tensor("z", TensorProto.UINT8, [], [128]),
        helper.make_tensor("w", TensorProto.UINT8, [4, 3], [130] * 12),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
            helper.make_node("QLinearMatMul", ["q", "s", "z", "w", "s", "z", "s", "z"], ["m"], name="matmul"),
            helper.make_node("DequantizeLinear", ["m", "s", "z"], ["y"], name="dequant"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="quantized models are not supported yet") as caught:
        load_onnx(model.SerializeToString())
    message = str(caught.value)
    assert "matmul (QLinearMatMul" in message and "integers feed QLinearMatMul" in message
