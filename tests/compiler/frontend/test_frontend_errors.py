"""Frontend failures are typed, complete and name what is wrong; dynamic dims and folding work."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.errors import ModelError, ShapeError, UnsupportedOpError
from compiler.frontend.onnx import load_onnx, without_large_weights
from compiler.graph.ir import Const, Var
from compiler.limits import Limits
from tests.compiler.frontend.onnx_check import check_against_ort, make_model, single_op

FLOAT = TensorProto.FLOAT


def small_conv_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    model, _ = single_op(
        "Conv",
        {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)},
        {"w": np.ones((4, 3, 3, 3), np.float32)},
    )
    return model


# ---- malformed input --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"not an onnx model at all \xff\xfe", b"\x08\x07\x12"])
def test_garbage_bytes_are_a_model_error(data: bytes) -> None:
    with pytest.raises(ModelError):
        load_onnx(data)


def test_truncated_bytes_are_a_model_error() -> None:
    data = small_conv_model().SerializeToString()
    for cut in (1, 10, len(data) // 3, len(data) // 2, len(data) - 1):
        with pytest.raises(ModelError):
            load_onnx(data[:cut])


def test_missing_file_is_a_model_error(tmp_path) -> None:
    with pytest.raises(ModelError, match="cannot read"):
        load_onnx(tmp_path / "nope.onnx")


def test_loads_from_path_bytes_and_proto(tmp_path) -> None:
    model = small_conv_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for source in (path, str(path), model.SerializeToString(), model):
        graph = load_onnx(source)
        assert [c.op for c in graph.calls()] == ["conv2d"]


def test_checker_failure_is_a_model_error() -> None:
    model = small_conv_model()
    model.graph.node[0].input[0] = "undefined_value"
    with pytest.raises(ModelError, match="checker"):
        load_onnx(model.SerializeToString())


@pytest.mark.parametrize("opset", [5, 6, 29, 1000])
def test_unsupported_opset_is_named(opset: int) -> None:
    x = helper.make_tensor_value_info("x", FLOAT, [2])
    y = helper.make_tensor_value_info("y", FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    with pytest.raises(ModelError, match=f"opset {opset}"):
        load_onnx(model)


# ---- unsupported nodes: one error listing all of them -----------------------------------------------


def test_every_unsupported_node_is_listed_once() -> None:
    nodes = [
        helper.make_node("MyCustomOp", ["x"], ["a"], name="custom", domain="com.example"),
        helper.make_node("Bernoulli", ["a"], ["b"], name="coin"),
        helper.make_node(
            "Resize",
            ["b", "", "scales"],
            ["c"],
            name="resize_crop",
            coordinate_transformation_mode="tf_crop_and_resize",
        ),
        helper.make_node("Cast", ["c"], ["d"], name="to_double", to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["d"], ["e"], to=TensorProto.FLOAT),
        helper.make_node("MaxPool", ["e"], ["f", "idx"], name="pool", kernel_shape=[2, 2]),
        helper.make_node("Relu", ["f"], ["y"], name="fine"),
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [1, 1, 4, 4])]
    outputs = [
        helper.make_tensor_value_info("y", FLOAT, None),
        helper.make_tensor_value_info("idx", TensorProto.INT64, None),
    ]
    scales = helper.make_tensor("scales", FLOAT, [4], [1, 1, 2, 2])
    graph = helper.make_graph(nodes, "g", inputs, outputs, [scales])
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        ir_version=8,
    )
    for o in model.graph.output:  # the checker wants output shapes; their values do not matter here
        o.type.tensor_type.shape.dim.add().dim_value = 1
    with pytest.raises(UnsupportedOpError) as info:
        load_onnx(model)
    err = info.value
    assert [n[0] for n in err.nodes] == ["custom", "coin", "resize_crop", "to_double", "pool"]
    assert err.nodes[0] == ("custom", "MyCustomOp", 1)
    assert err.nodes[1] == ("coin", "Bernoulli", 17)
    text = str(err)
    fragments = ("com.example", "Bernoulli", "tf_crop_and_resize", "DOUBLE", "Indices", "Supported ONNX ops")
    for fragment in fragments:
        assert fragment in text


def test_unsupported_input_dtype_is_listed() -> None:
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (TensorProto.DOUBLE, [2])}, ["y"])
    with pytest.raises(UnsupportedOpError, match="DOUBLE"):
        load_onnx(model)


def test_ops_outside_the_vocabulary_fold_on_constants() -> None:
    # Range is not a graph op, but on constants it folds (with Floor) to a Reshape target.
    nodes = [
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Floor", ["half"], ["h"]),
        helper.make_node("Cast", ["h"], ["hi"], to=TensorProto.INT64),
        helper.make_node("Concat", ["hi", "r"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"),
    ]
    consts = {
        "start": np.array(3, np.int64),
        "limit": np.array(5, np.int64),
        "delta": np.array(1, np.int64),
        "half": np.array([2.5], np.float32),
    }
    model = make_model(nodes, {"x": (FLOAT, [2, 3, 4])}, ["y"], consts)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    graph = check_against_ort(model, {"x": x})
    assert [(c.op, c.attr("shape")) for c in graph.calls()] == [("reshape", (2, 3, 4))]


def test_shape_subgraph_folds_to_constants() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node(
            "ConstantOfShape", ["s"], ["ones"], value=helper.make_tensor("v", FLOAT, [1], [1.0])
        ),
        helper.make_node("Mul", ["x", "ones"], ["scaled"]),
        helper.make_node("Flatten", ["scaled"], ["y"]),
        helper.make_node("Add", ["flat", "y"], ["z"]),
    ]
    consts = {
        "zero": np.array(0, np.int64),
        "axes": np.array([0], np.int64),
        "minus1": np.array([-1], np.int64),
    }
    model = make_model(nodes, {"x": (FLOAT, ["N", 3, 4])}, ["z"], consts)
    x = np.random.default_rng(0).standard_normal((5, 3, 4)).astype(np.float32)
    graph = check_against_ort(model, {"x": x}, shapes={"x": [5, 3, 4]})
    assert sorted(c.op for c in graph.calls()) == ["add", "mul", "reshape", "reshape"]


def test_required_constant_input_that_is_not_constant() -> None:
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape")],
        {"x": (FLOAT, [2, 3]), "shape": (TensorProto.INT64, [2])},
        ["y"],
    )
    with pytest.raises(ShapeError, match="the_reshape") as info:
        load_onnx(model)
    assert "compile time" in str(info.value)


def test_shape_error_names_the_node() -> None:
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")],
        {"a": (FLOAT, ["N"]), "b": (FLOAT, ["M"])},
        ["y"],
    )
    with pytest.raises(ShapeError, match="bad_add") as info:
        load_onnx(model, {"a": [3], "b": [4]})
    assert info.value.node == "bad_add"


@pytest.mark.parametrize(
    ("shape", "image", "block", "attrs", "message"),
    [
        ((1, 10, 12), (6, 8), (2, 2), {"strides": [2, 2]}, "not a multiple of the block's 2x2"),
        ((1, 12, 10), (6, 8), (2, 2), {"strides": [2, 2]}, "holds 10 blocks.*has 3x4"),
        ((1, 9, 4), (2, 2), (3, 3), {}, "larger than the padded image"),
        ((1, 4, 4), (5, 5), (2, 2), {"strides": [0, 1]}, "positive"),
        ((1, 2**20, 1), (1024, 1024), (1024, 1024), {}, "one-hot kernel.*elements"),
    ],
)
def test_col2im_geometry_errors_name_the_node(
    shape: tuple[int, ...], image: tuple[int, ...], block: tuple[int, ...], attrs: dict, message: str
) -> None:
    """Blocks that do not fit the image, and a kernel past the size limit, are refused before any
    array is made."""
    consts = {"i": np.array(image, np.int64), "b": np.array(block, np.int64)}
    model, _ = single_op("Col2Im", {"x": np.zeros(shape, np.float32)}, consts, opset=18, **attrs)
    with pytest.raises(ShapeError, match=message) as info:
        load_onnx(model)
    assert info.value.node == "node"


def test_col2im_of_a_3d_image_is_unsupported() -> None:
    consts = {"i": np.array((3, 3, 3), np.int64), "b": np.array((2, 2, 2), np.int64)}
    model, _ = single_op("Col2Im", {"x": np.zeros((1, 8, 8), np.float32)}, consts, opset=18)
    with pytest.raises(UnsupportedOpError, match="Col2Im of a 3-D image") as info:
        load_onnx(model)
    assert info.value.nodes == [("node", "Col2Im", 18)]


def test_volumetric_grid_sampling_is_unsupported() -> None:
    x, grid = np.zeros((1, 2, 3, 4, 5), np.float32), np.zeros((1, 2, 2, 2, 3), np.float32)
    model, _ = single_op("GridSample", {"x": x, "g": grid}, opset=20)
    with pytest.raises(UnsupportedOpError, match="GridSample of a 5-D input") as info:
        load_onnx(model)
    assert info.value.nodes == [("node", "GridSample", 20)]


@pytest.mark.parametrize(
    ("theta", "size", "consts", "message"),
    [
        ((1, 3, 4), (1, 2, 3, 4, 5), True, "AffineGrid of a 3-D grid"),
        ((1, 2, 3), (1, 2, 4, 4), False, "AffineGrid with a size computed at run time"),
    ],
)
def test_affine_grids_temper_cannot_build_are_unsupported(
    theta: tuple[int, ...], size: tuple[int, ...], consts: bool, message: str
) -> None:
    """Volumetric affine grids, and a size only known at run time (it decides the grid's shape)."""
    sizes = {"s": np.array(size, np.int64)}
    inputs = {"t": np.zeros(theta, np.float32), **({} if consts else sizes)}
    model, _ = single_op("AffineGrid", inputs, sizes if consts else None, opset=20)
    with pytest.raises(UnsupportedOpError, match=message) as info:
        load_onnx(model)
    assert info.value.nodes == [("node", "AffineGrid", 20)]


def test_a_grid_of_another_batch_names_the_node() -> None:
    """A grid of another batch than the input, known only once the dims are bound, is refused by
    name before anything is compiled."""
    model = make_model(
        [helper.make_node("GridSample", ["x", "g"], ["y"], name="node")],
        {"x": (FLOAT, ["N", 2, 4, 4]), "g": (FLOAT, ["M", 3, 3, 2])},
        ["y"],
        opset=20,
    )
    with pytest.raises(ShapeError, match=r"got x \[2, 2, 4, 4\], grid \[1, 3, 3, 2\]") as info:
        load_onnx(model, {"x": [2, 2, 4, 4], "g": [1, 3, 3, 2]})
    assert info.value.node == "node"


@pytest.mark.parametrize(
    ("shape", "size", "message"),
    [
        ((4, 6), 3, r"LRN input must be \[N, C, D1, ...\], got \[4, 6\]"),
        ((1, 4, 3, 3), 0, "size must be a positive"),
    ],
)
def test_lrn_errors_name_the_node(shape: tuple[int, ...], size: int, message: str) -> None:
    model, _ = single_op("LRN", {"x": np.zeros(shape, np.float32)}, {}, size=size)
    with pytest.raises(ShapeError, match=message) as info:
        load_onnx(model)
    assert (info.value.node, info.value.op) == ("node", "LRN")


def _lstm(x_shape: tuple[int, ...], hidden: int = 4, directions: int = 1, **attrs: object) -> onnx.ModelProto:
    w = np.zeros((directions, 4 * hidden, x_shape[-1]), np.float32)
    r = np.zeros((directions, 4 * hidden, hidden), np.float32)
    model, _ = single_op(
        "LSTM", {"x": np.zeros(x_shape, np.float32)}, {"W": w, "R": r}, hidden_size=hidden, **attrs
    )
    return model


def test_recurrences_longer_than_the_unroll_limit_are_refused() -> None:
    """Each time step becomes graph ops of its own: the steps of all the model's recurrent layers
    together are bounded like any allocation (two directions count twice)."""
    model = _lstm((40, 1, 3))
    with pytest.raises(ShapeError, match=r"40 time steps.*at most 32 steps in all, 0 taken") as info:
        load_onnx(model, limits=Limits(recurrence_steps=32))
    assert (info.value.node, info.value.op) == ("node", "LSTM")
    load_onnx(model, limits=Limits(recurrence_steps=40))
    with pytest.raises(ShapeError, match=r"\(bidirectional\).*at most 79"):
        load_onnx(
            _lstm((40, 1, 3), directions=2, direction="bidirectional"), limits=Limits(recurrence_steps=79)
        )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [40, 1, 3])
    layers = [
        helper.make_node("LSTM", ["x", "W", "R"], [f"y{i}"], name=f"lstm{i}", hidden_size=4) for i in range(2)
    ]
    weights = [
        onnx.numpy_helper.from_array(np.zeros((1, 16, 3), np.float32), "W"),
        onnx.numpy_helper.from_array(np.zeros((1, 16, 4), np.float32), "R"),
    ]
    outputs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [40, 1, 1, 4]) for i in range(2)]
    two = helper.make_model(
        helper.make_graph(layers, "g", [x], outputs, weights), opset_imports=[helper.make_opsetid("", 17)]
    )
    with pytest.raises(ShapeError, match="40 taken before this node") as info:
        load_onnx(two, limits=Limits(recurrence_steps=79))
    assert info.value.node == "lstm1"


def test_recurrent_weights_that_do_not_fit_the_input_name_the_node() -> None:
    w = np.zeros((1, 16, 5), np.float32)  # 5 inputs; X has 3
    r = np.zeros((1, 16, 4), np.float32)
    model, _ = single_op("LSTM", {"x": np.zeros((2, 1, 3), np.float32)}, {"W": w, "R": r}, hidden_size=4)
    with pytest.raises(ShapeError, match=r"LSTM W must be \[1, 16, 3\].*got \[1, 16, 5\]"):
        load_onnx(model)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"activations": ["HardSigmoid", "Tanh", "Tanh"]}, "LSTM activations"),
        ({"clip": 3.0}, "LSTM clip"),
        ({"input_forget": 1}, "LSTM input_forget"),
    ],
)
def test_unsupported_recurrent_variants_are_refused_up_front(attrs: dict, message: str) -> None:
    with pytest.raises(UnsupportedOpError, match=message):
        load_onnx(_lstm((2, 1, 3), **attrs))


@pytest.mark.parametrize("lengths", [[3, 0], [4, 2], [3]])
def test_sequence_lengths_outside_the_steps_of_x_are_refused_with_their_lengths(lengths: list[int]) -> None:
    """Each of the batch's sequences needs a length from 1 to X's steps (padded ones run, see
    tests/compiler/test_compiled_ops.py)."""
    w, r = np.zeros((1, 16, 3), np.float32), np.zeros((1, 16, 4), np.float32)
    consts = {"W": w, "R": r, "B": np.zeros((1, 32), np.float32), "lens": np.array(lengths, np.int32)}
    model, _ = single_op("LSTM", {"x": np.zeros((3, 2, 3), np.float32)}, consts, hidden_size=4)
    shown = ", ".join(map(str, lengths))
    with pytest.raises(
        ShapeError,
        match=rf"sequence_lens \[{shown}\] must give each of the 2 sequences a length within 1\.\.3",
    ):
        load_onnx(model)


# ---- dynamic dims -----------------------------------------------------------------------------------


def dynamic_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["y"]),
        helper.make_node("Identity", ["ids"], ["ids_out"]),
    ]
    inputs = {
        "x": (FLOAT, ["N", 3, "H", "W"]),
        "bias": (FLOAT, [1, 3, 1, 1]),
        "ids": (TensorProto.INT64, ["N", None]),
    }
    return make_model(nodes, inputs, ["y", "ids_out"])


def test_unbound_dims_are_all_listed_in_one_error() -> None:
    with pytest.raises(ShapeError) as info:
        load_onnx(dynamic_model())
    text = str(info.value)
    for fragment in (
        "'x' dim 0 'N'",
        "'x' dim 2 'H'",
        "'x' dim 3 'W'",
        "'ids' dim 0 'N'",
        "'ids' dim 1 '?'",
        "--shape x=",
    ):
        assert fragment in text
    assert "'bias'" not in text


def test_bound_dims_run_like_onnxruntime() -> None:
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((2, 3, 5, 7)).astype(np.float32),
        "bias": rng.standard_normal((1, 3, 1, 1)).astype(np.float32),
        "ids": np.arange(6, dtype=np.int64).reshape(2, 3),
    }
    graph = check_against_ort(dynamic_model(), feeds, shapes={"x": (2, 3, 5, 7), "ids": [2, 3]})
    assert all(isinstance(v, Var) for v in graph.inputs)
    assert graph.outputs[1] is graph.inputs[2]  # Identity passes the value through
    assert graph.inputs[0].type.shape == (2, 3, 5, 7)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"x": [2, 3, 5], "ids": [2, 3]}, "rank"),
        ({"x": [2, 4, 5, 7], "ids": [2, 3]}, "dim 1 is 3"),
        ({"x": [2, 3, 5, 7], "ids": [3, 3]}, "'N' is bound to 2"),
        ({"x": [2, 3, 5, 7], "ids": [2, 3], "nope": [1]}, "unknown input"),
        ({"x": [2, 3, 0, 7], "ids": [2, 3]}, "positive"),
    ],
)
def test_bad_bindings_are_shape_errors(shapes: dict[str, list[int]], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        load_onnx(dynamic_model(), shapes)


def test_graph_output_may_be_a_constant() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, {"x": (FLOAT, [2, 3])}, ["s", "y"])
    graph = check_against_ort(model, {"x": np.ones((2, 3), np.float32)})
    assert isinstance(graph.outputs[0], Const)
    assert graph.output_names == ("s", "y")


def type_clash_model(extra: list[onnx.NodeProto]) -> onnx.ModelProto:
    """Add(float, int64) passes the checker but fails strict ONNX type inference."""
    nodes = [helper.make_node("Add", ["x", "i"], ["s"], name="clash"), *extra]
    inputs = [
        helper.make_tensor_value_info("x", FLOAT, [2]),
        helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
    ]
    out = extra[-1].output[0] if extra else "s"
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(out, FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_type_errors_are_model_errors() -> None:
    with pytest.raises(ModelError, match="shape inference"):
        load_onnx(type_clash_model([]))


def test_unsupported_nodes_are_reported_before_inference_errors() -> None:
    with pytest.raises(UnsupportedOpError, match="Bernoulli"):
        load_onnx(type_clash_model([helper.make_node("Bernoulli", ["s"], ["y"], name="coin")]))


@pytest.mark.parametrize(
    ("equation", "shapes", "out", "words"),
    [
        ("ii->i", [[3, 3]], ["a"], "diagonal"),
        ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]], ["a", "b"], "3 operands"),
    ],
)
def test_einsums_temper_cannot_lower_are_named(
    equation: str, shapes: list[list[int]], out: list[str], words: str
) -> None:
    inputs = [helper.make_tensor_value_info(f"x{i}", FLOAT, s) for i, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [v.name for v in inputs], ["y"], equation=equation, name="the_einsum")
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", FLOAT, out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(ShapeError, match=words) as info:
        load_onnx(model.SerializeToString())
    assert "the_einsum" in str(info.value)


# ---- large weights ----------------------------------------------------------------------------------


def large_weight_model(*, weight_is_input: bool = False) -> onnx.ModelProto:
    """A MatMul by a weight above SKELETON_MIN_BYTES, then a Reshape by a small constant target."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Reshape", ["h", "target"], ["y"], name="reshape"),
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2, 256])]
    if weight_is_input:  # an initializer may also be declared as an input (its default value)
        inputs.append(helper.make_tensor_value_info("w", FLOAT, [256, 128]))
    graph = helper.make_graph(
        nodes,
        "g",
        inputs,
        [helper.make_tensor_value_info("y", FLOAT, [4, 64])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.array([4, 64]), "target")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("weight_is_input", [False, True])
def test_the_checker_and_shape_inference_see_large_weights_as_inputs(weight_is_input: bool) -> None:
    model = large_weight_model(weight_is_input=weight_is_input)
    skeleton = without_large_weights(model)
    assert [t.name for t in skeleton.graph.initializer] == ["target"]  # shape-carrying constants stay
    assert [i.name for i in skeleton.graph.input] == ["x", "w"]  # declared once
    assert skeleton.graph.node == model.graph.node and skeleton.opset_import == model.opset_import
    onnx.checker.check_model(skeleton)
    inferred = onnx.shape_inference.infer_shapes(skeleton, check_type=True, strict_mode=True).graph
    assert [d.dim_value for d in inferred.output[0].type.tensor_type.shape.dim] == [4, 64]
    assert len(model.graph.initializer) == 2  # the model itself is left alone
    small = small_conv_model()
    assert without_large_weights(small) is small


def test_a_model_with_large_weights_runs_like_onnxruntime() -> None:
    model = large_weight_model()
    x = np.random.default_rng(4).standard_normal((2, 256)).astype(np.float32)
    check_against_ort(model, {"x": x})


def test_errors_in_a_model_with_large_weights_are_still_found() -> None:
    model = large_weight_model()
    model.graph.node[0].input[0] = "undefined_value"
    with pytest.raises(ModelError, match="checker"):
        load_onnx(model.SerializeToString())
    model = large_weight_model()
    model.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(np.array([5, 64]), "target"))
    with pytest.raises(ModelError, match="node name: reshape"):  # the small target still counts
        load_onnx(model)


@pytest.mark.parametrize(
    ("op", "shape", "weight", "message"),
    [
        ("Conv", (1, 2, 3, 4, 5, 6), (2, 2, 1, 1, 1, 1), "4-D Conv"),  # 4-D spatial: no such kernel
        ("ConvTranspose", (1, 2, 3, 4, 5, 6), (2, 2, 1, 1, 1, 1), "4-D ConvTranspose"),
        ("ConvTranspose", (1, 2, 3, 4, 5), (2, 1, 1, 1, 1), "grouped 3-D ConvTranspose"),
    ],
)
def test_windows_of_unsupported_rank_are_refused_up_front(
    op: str, shape: tuple[int, ...], weight: tuple[int, ...], message: str
) -> None:
    group = {"group": 2} if "grouped" in message else {}
    model, _ = single_op(op, {"x": np.zeros(shape, np.float32)}, {"w": np.ones(weight, np.float32)}, **group)
    with pytest.raises(UnsupportedOpError, match=message) as info:
        load_onnx(model)
    assert info.value.nodes == [("node", op, 17)]


def test_a_one_hot_depth_computed_at_run_time_is_refused_up_front() -> None:
    """The depth sets the output's shape: it must be known at compile time."""
    inputs = {"i": np.zeros(3, np.int64), "d": np.array(4, np.int64)}
    model, _ = single_op("OneHot", inputs, {"v": np.array([0.0, 1.0], np.float32)}, opset=18)
    with pytest.raises(UnsupportedOpError, match="OneHot with its depth computed at run time") as info:
        load_onnx(model)
    assert info.value.nodes == [("node", "OneHot", 18)]


def test_hostile_sizes_in_new_ops_are_refused_before_any_array_is_made() -> None:
    """A OneHot depth and a 3-D ConvTranspose time stride far past any real model: a typed error
    naming the node, no allocation of that size."""
    inputs = {"i": np.zeros(3, np.int64)}
    consts = {"d": np.array(10**12, np.int64), "v": np.array([0.0, 1.0], np.float32)}
    model, _ = single_op("OneHot", inputs, consts)
    with pytest.raises(ShapeError, match="OneHot of depth") as info:
        load_onnx(model)
    assert info.value.node == "node"
    x, w = np.zeros((1, 4, 2, 2, 2), np.float32), np.ones((4, 4, 1, 1, 1), np.float32)
    model, _ = single_op("ConvTranspose", {"x": x}, {"w": w}, strides=[10**9, 1, 1])
    with pytest.raises(ShapeError) as info:
        load_onnx(model)
    assert info.value.node == "node"
