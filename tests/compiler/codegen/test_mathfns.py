"""The transcendental functions codegen emits hold float32 accuracy relative to the value itself,
including where the value is tiny (a saturated sigmoid, exp far below 1): a model whose outputs live
there (a text detector's probabilities on a blank page) must not lose its digits. Checked against
float64 numpy, not onnxruntime, whose Sigmoid is a faster, coarser approximation in that range."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import compiler.runtime
from compiler.pipeline import CompileOptions, compile_model

REFERENCES = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Exp": np.exp,
    "Tanh": np.tanh,
}


def _unary_model(op: str, size: int) -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])],
        "unary",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    ("op", "low", "high"), [("Sigmoid", -80.0, 20.0), ("Exp", -80.0, 80.0), ("Tanh", -9.0, 9.0)]
)
def test_relative_error_is_a_few_ulps(op: str, low: float, high: float, tmp_path: Path) -> None:
    x = np.linspace(low, high, 4099, dtype=np.float32)
    compiled = compile_model(_unary_model(op, x.size), CompileOptions(opt_level=3))
    path = tmp_path / "unary.temper"
    compiled.save(path)
    y = compiler.runtime.load(path).run({"x": x})["y"]
    reference = REFERENCES[op](x.astype(np.float64))
    nonzero = np.abs(reference) > np.finfo(np.float32).tiny
    relative = np.abs(y[nonzero] - reference[nonzero]) / np.abs(reference[nonzero])
    assert float(relative.max()) < 2e-6, f"{op}: worst relative error {relative.max():.2e}"
