"""float16 models (weights, inputs and outputs in fp16) run: computed in float32 inside, float16 at
the model's boundaries, as the declared types say; compared with onnxruntime's float16 run."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import compiler.runtime
from compiler.pipeline import CompileOptions, compile_model

F16 = TensorProto.FLOAT16


def fp16_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float16)
    fc = (rng.standard_normal((8, 5)) * 0.3).astype(np.float16)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["m"], name="fc"),
        helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(np.array(0.5, np.float16))),
        helper.make_node("Mul", ["m", "half"], ["s"], name="scale"),
        helper.make_node("Cast", ["s"], ["y32"], to=TensorProto.FLOAT, name="to32"),
        helper.make_node("Cast", ["y32"], ["y"], to=F16, name="to16"),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16",
        [helper.make_tensor_value_info("x", F16, [2, 4, 6, 6])],
        [
            helper.make_tensor_value_info("y", F16, [2, 5]),
            helper.make_tensor_value_info("y32", TensorProto.FLOAT, [2, 5]),
        ],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(fc, "fc")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_float16_model_runs_and_returns_its_declared_dtypes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = fp16_model()
    x = np.random.default_rng(1).standard_normal((2, 4, 6, 6)).astype(np.float16)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    path = tmp_path / "fp16.temper"
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    compiled.save(path)
    module = compiler.runtime.load(path)
    got = module.run({"x": x})
    assert [i.dtype for i in module.inputs] == ["float16"]
    assert got["y"].dtype == np.float16 and got["y32"].dtype == np.float32
    np.testing.assert_allclose(got["y"].astype(np.float32), want[0].astype(np.float32), rtol=2e-2, atol=2e-3)
    np.testing.assert_allclose(got["y32"], want[1].astype(np.float32), rtol=2e-2, atol=2e-3)
