"""Models of every opset from 7 to the newest ONNX defines import: they are converted to a native
opset first, their node names stay what the file says, and the manifest records what it declared."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import ModelError, ShapeError, UnsupportedOpError
from compiler.frontend.onnx import NATIVE_OPSETS, SUPPORTED_OPSETS, load_onnx
from compiler.graph.interpret import run_graph
from compiler.pipeline import CompileOptions, compile_model

IR = {7: 3, 8: 3, 9: 4, 10: 5, 11: 6, 12: 7}


def _model(opset: int) -> onnx.ModelProto:
    """Conv -> BN -> Clip(0, 6) -> Squeeze -> Split -> ReduceSum -> Add -> Softmax, each spelled as
    its opset spells it (attributes before 11/13, inputs after)."""
    rng = np.random.default_rng(opset)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
        *(
            numpy_helper.from_array(v.astype(np.float32), n)
            for n, v in (
                ("scale", rng.uniform(0.5, 1.5, 4)),
                ("bias", rng.standard_normal(4)),
                ("mean", rng.standard_normal(4) * 0.1),
                ("var", rng.uniform(0.5, 1.5, 4)),
            )
        ),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
    ]
    if opset < 11:
        nodes.append(helper.make_node("Clip", ["b"], ["r"], min=0.0, max=6.0, name="clip"))
    else:
        inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
        nodes.append(helper.make_node("Clip", ["b", "lo", "hi"], ["r"], name="clip"))
    if opset < 13:
        nodes += [
            helper.make_node("Squeeze", ["r"], ["s"], axes=[0], name="squeeze"),
            helper.make_node("Split", ["s"], ["p", "q"], axis=0, split=[2, 2], name="split"),
            helper.make_node("ReduceSum", ["p"], ["t"], axes=[0], keepdims=1, name="sum"),
        ]
    else:
        inits += [
            numpy_helper.from_array(np.array([0], np.int64), "ax0"),
            numpy_helper.from_array(np.array([2, 2], np.int64), "halves"),
        ]
        nodes += [
            helper.make_node("Squeeze", ["r", "ax0"], ["s"], name="squeeze"),
            helper.make_node("Split", ["s", "halves"], ["p", "q"], axis=0, name="split"),
            helper.make_node("ReduceSum", ["p", "ax0"], ["t"], keepdims=1, name="sum"),
        ]
    nodes += [
        helper.make_node("Add", ["t", "q"], ["a"]),  # unnamed: the file's index names it
        helper.make_node("Softmax", ["a"], ["y"], axis=-1, name="softmax"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])]
    if IR.get(opset, 8) < 4:  # initializers were graph inputs too then
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(
        nodes,
        f"opset{opset}",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 6])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR.get(opset, 8)
    )


OPSETS = [7, 8, 9, 10, 11, 12, 13, 17, 21, 22, 23, 25, SUPPORTED_OPSETS.stop - 1]


@pytest.mark.parametrize("opset", OPSETS)
def test_every_opset_imports_and_matches_onnxruntime(opset: int) -> None:
    model = _model(opset)
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    graph = load_onnx(model.SerializeToString())
    (got,) = run_graph(graph, {"x": x}).values()
    if opset <= 21:  # what the installed onnxruntime runs
        (want,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (native,) = run_graph(load_onnx(_model(13).SerializeToString()), {"x": x}).values()
    assert got.shape == native.shape


def test_names_and_the_declared_opset_survive_conversion() -> None:
    model = _model(11)
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=0))
    assert compiled.manifest["onnx_opset"] == 11
    names = {n for k in compiled.manifest["kernels"] for n in k["nodes"]}
    assert {"conv", "clip", "softmax", "Add_6"} <= names  # Add_6: the unnamed node's index in the file
    assert not any(n.startswith("Constant") for n in names)
    assert compile_model(_model(13).SerializeToString(), CompileOptions()).manifest["onnx_opset"] == 13


def test_an_unsupported_node_of_an_old_model_is_named_as_in_the_file() -> None:
    model = _model(11)
    model.graph.node.insert(0, helper.make_node("Det", ["x"], ["d"], name="my_det"))
    with pytest.raises(UnsupportedOpError, match="my_det"):
        load_onnx(model.SerializeToString())


def test_a_node_the_converter_cannot_carry_is_named() -> None:
    """Opset 7's BatchNormalization with spatial=0 has no later form: the error names the node."""
    ones = numpy_helper.from_array(np.ones(3, np.float32), "ones")
    graph = helper.make_graph(
        [
            helper.make_node(
                "BatchNormalization", ["x", "ones", "ones", "ones", "ones"], ["y"], name="my_bn", spatial=0
            )
        ],
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 2, 2])],
        [ones],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)], ir_version=4)
    with pytest.raises(ModelError, match="my_bn"):
        load_onnx(model.SerializeToString())


def test_a_node_the_converter_rewrites_keeps_its_name() -> None:
    """Upsample (opset 9) becomes Resize in the conversion; its error still names the user's node."""
    graph = helper.make_graph(
        [helper.make_node("Upsample", ["x", "scales"], ["y"], name="my_upsample")],
        "up",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2]),
            helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=4)
    with pytest.raises(ShapeError, match="my_upsample"):
        load_onnx(model.SerializeToString())


def test_native_opsets_are_not_converted() -> None:
    assert NATIVE_OPSETS.start == 13 and SUPPORTED_OPSETS.start == 7


@pytest.mark.parametrize("opset", [7, 9])
def test_upsample_of_old_opsets_becomes_resize(opset: int) -> None:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])]
    inits = []
    if opset == 7:
        node = helper.make_node(
            "Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 2.0], mode="nearest", name="up"
        )
    else:
        node = helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest", name="up")
        inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")]
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [4]))
    graph = helper.make_graph(
        [node], "up", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR[opset])
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)
    (got,) = run_graph(load_onnx(model.SerializeToString()), {"x": x}).values()
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(2, axis=3))
