"""Ops whose output shape depends on values (NonZero, Unique, Range) import where their inputs fold to
constants (shape arithmetic, position ids, constant masks) and are refused by name where they do not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import UnsupportedOpError
from compiler.frontend.onnx import load_onnx
from compiler.graph.interpret import run_graph
from tests.compiler.frontend.onnx_check import run_ort


def _model(
    nodes: list, inits: list, out_shape: list[int | str], out_type: int = TensorProto.FLOAT
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", out_type, out_shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_position_ids_from_the_input_shape_fold() -> None:
    """Range(0, Shape(x)[1]) as transformer exports write position ids: folds, then adds to x."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
        helper.make_node("Range", ["zero", "length", "one"], ["positions"]),
        helper.make_node("Cast", ["positions"], ["positions_f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "positions_f"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
    ]
    model = _model(nodes, inits, [2, 6])
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    got = run_graph(load_onnx(model.SerializeToString()), {"x": x})["y"]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], rtol=1e-6)


def test_nonzero_and_unique_of_constants_fold() -> None:
    mask = numpy_helper.from_array(np.array([[0, 3, 0, 1, 1, 0], [2, 0, 0, 0, 5, 3]], np.int64), "mask")
    nodes = [
        helper.make_node("Unique", ["mask"], ["values"], sorted=1),
        helper.make_node("NonZero", ["mask"], ["where"]),
        helper.make_node("ReduceSum", ["values"], ["total"], keepdims=0),
        helper.make_node("Size", ["where"], ["count"]),
        helper.make_node("Add", ["total", "count"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["sum_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "sum_f"], ["y"]),
    ]
    model = _model(nodes, [mask], [2, 6])
    x = np.ones((2, 6), np.float32)
    got = run_graph(load_onnx(model.SerializeToString()), {"x": x})["y"]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"])


def test_nonzero_of_a_runtime_input_is_refused_by_name() -> None:
    nodes = [helper.make_node("NonZero", ["x"], ["y"], name="find_nonzero")]
    model = _model(nodes, [], [2, "n"], TensorProto.INT64)
    with pytest.raises(UnsupportedOpError, match=r"find_nonzero \(NonZero"):
        load_onnx(model.SerializeToString())
