"""float16 tensors at a model's edges through every store codegen emits, the masked tail of a
vectorized loop included (odd extents), against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.runtime
from compiler.pipeline import CompileOptions, compile_model


@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 5, 13, 11), (1, 8, 1, 33)])
def test_float16_conv_relu_with_odd_extents(shape: tuple[int, ...], tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    channels = shape[1]
    weight = numpy_helper.from_array(rng.standard_normal((6, channels, 3, 3)).astype(np.float16), "w")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [shape[0], 6, shape[2], shape[3]])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.standard_normal(shape).astype(np.float16)
    compiled = compile_model(model, CompileOptions(opt_level=3))
    compiled.save(tmp_path / "m.temper")
    y = compiler.runtime.load(tmp_path / "m.temper").run({"x": x})["y"]
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.dtype == np.float16 and y.shape == expected.shape
    np.testing.assert_allclose(y.astype(np.float32), expected.astype(np.float32), rtol=1e-2, atol=1e-2)
