"""Small models shared by pipeline and tuner tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_conv_model() -> onnx.ModelProto:
    """conv(+bias) -> relu -> global average pool -> flatten -> gemm: one anchor of each kind."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "w"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "fc"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
