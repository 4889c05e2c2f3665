"""The model guard: no tensor anywhere in a model makes temper read a file, allocate without bound or
trust a malformed field; every refusal is a typed error naming where it is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import CompilerError, ModelError, ShapeError
from compiler.frontend.guard import check_model, declared_bytes
from compiler.frontend.onnx import load_onnx
from compiler.graph.ir import Call, Const
from compiler.limits import FOLD_ELEMENTS, Limits
from compiler.pipeline import CompileOptions, compile_model

FLOAT = TensorProto.FLOAT
SECRET = b"the server's private bytes " * 4


def external(name: str, location: str, length: int = 16) -> TensorProto:
    """A tensor whose bytes are claimed to live at `location`."""
    t = TensorProto(name=name, data_type=TensorProto.UINT8, dims=[length])
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def model_of(
    nodes: list[onnx.NodeProto], initializers: list[TensorProto] = (), **extra: object
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "main",
        [helper.make_tensor_value_info("x", FLOAT, [16])],
        [helper.make_tensor_value_info("y", FLOAT, [16])],
        list(initializers),
    )
    for key, value in extra.items():
        getattr(graph, key).extend(value)  # type: ignore[arg-type]
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def relu() -> onnx.NodeProto:
    return helper.make_node("Relu", ["x"], ["y"], name="relu")


def branch(nodes: list[onnx.NodeProto], initializers: list[TensorProto] = ()) -> onnx.GraphProto:
    out = helper.make_tensor_value_info("b_out", FLOAT, [16])
    return helper.make_graph(nodes, "branch", [], [out], list(initializers))


# Every place a tensor can sit in a model, each holding one that names `location`.
PLACES: dict[str, Callable[[str], onnx.ModelProto]] = {
    "initializer": lambda loc: model_of([relu()], [external("w", loc)]),
    "constant_value": lambda loc: model_of(
        [helper.make_node("Constant", [], ["c"], name="const", value=external("v", loc)), relu()]
    ),
    "constant_sparse_value": lambda loc: model_of(
        [
            helper.make_node(
                "Constant",
                [],
                ["c"],
                name="sparse_const",
                sparse_value=helper.make_sparse_tensor(
                    external("vals", loc, 2), numpy_helper.from_array(np.array([0, 3], np.int64)), [16]
                ),
            ),
            relu(),
        ]
    ),
    "sparse_initializer": lambda loc: model_of(
        [relu()],
        sparse_initializer=[
            helper.make_sparse_tensor(
                external("s", loc, 2), numpy_helper.from_array(np.array([1, 2], np.int64)), [16]
            )
        ],
    ),
    "if_branch_initializer": lambda loc: model_of(
        [
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                name="if",
                then_branch=branch([helper.make_node("Identity", ["t"], ["b_out"])], [external("t", loc)]),
                else_branch=branch([helper.make_node("Identity", ["x"], ["b_out"])]),
            )
        ]
    ),
    "loop_body_constant": lambda loc: model_of(
        [
            helper.make_node(
                "Loop",
                ["", "cond"],
                ["y"],
                name="loop",
                body=branch([helper.make_node("Constant", [], ["b_out"], value=external("k", loc))]),
            )
        ]
    ),
    "scan_body_attribute": lambda loc: model_of(
        [
            helper.make_node(
                "Scan",
                ["x"],
                ["y"],
                name="scan",
                num_scan_inputs=1,
                body=branch(
                    [helper.make_node("Custom", [], ["b_out"], domain="x.y", weights=external("q", loc))]
                ),
            )
        ]
    ),
    "custom_node_tensor_attribute": lambda loc: model_of(
        [
            relu(),
            helper.make_node(
                "Mine", ["x"], ["z"], name="mine", domain="com.example", table=external("a", loc)
            ),
        ]
    ),
    "tensors_attribute": lambda loc: model_of(
        [
            relu(),
            helper.make_node(
                "Mine", ["x"], ["z"], name="many", domain="com.example", tables=[external("b", loc)]
            ),
        ]
    ),
    "function_body": lambda loc: _with_function(loc),
}


def _with_function(loc: str) -> onnx.ModelProto:
    model = model_of([relu()])
    fn = helper.make_function(
        "com.example",
        "Fn",
        ["a"],
        ["b"],
        [helper.make_node("Constant", [], ["b"], value=external("f", loc))],
        [helper.make_opsetid("", 17)],
    )
    model.functions.append(fn)
    return model


@pytest.mark.parametrize("place", sorted(PLACES))
def test_external_data_anywhere_is_refused_the_same_whether_the_file_exists(
    place: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secret.db").write_bytes(SECRET)
    monkeypatch.chdir(tmp_path)
    messages = []
    for location in ("secret.db", "no-such-file.db"):
        with pytest.raises(ModelError, match="external file") as info:
            load_onnx(PLACES[place](location).SerializeToString())
        messages.append(str(info.value).replace(location, "<file>"))
    assert messages[0] == messages[1]


def test_external_data_error_names_where_the_tensor_is() -> None:
    with pytest.raises(ModelError) as info:
        load_onnx(PLACES["loop_body_constant"]("f.bin").SerializeToString())
    assert "node 'loop'" in str(info.value) and "attribute 'body'" in str(info.value)


def test_a_proto_object_is_guarded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "secret.db").write_bytes(SECRET)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match="external file"):
        load_onnx(PLACES["constant_value"]("secret.db"))


# ---- external data from a path: inside the model's directory only -----------------------------------


def _saved_with_external_weights(directory: Path) -> tuple[Path, np.ndarray]:
    weight = np.arange(64, dtype=np.float32).reshape(4, 16) / 7
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["w", "x"], ["y"])],
        "main",
        [helper.make_tensor_value_info("x", FLOAT, [16])],
        [helper.make_tensor_value_info("y", FLOAT, [4])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = directory / "model.onnx"
    onnx.save_model(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    return path, weight


def test_a_model_file_reads_its_own_external_weights(tmp_path: Path) -> None:
    path, weight = _saved_with_external_weights(tmp_path)
    consts = [a for c in load_onnx(path).calls() for a in c.args if isinstance(a, Const)]
    assert any(np.array_equal(c.data, weight) for c in consts)


def test_external_weights_refused_when_asked(tmp_path: Path) -> None:
    path, _ = _saved_with_external_weights(tmp_path)
    with pytest.raises(ModelError, match="external file"):
        load_onnx(path, external_data=False)
    with pytest.raises(ModelError, match="external file"):
        compile_model(path, CompileOptions(external_data=False))


@pytest.mark.parametrize("escape", ["../secret.db", "sub/../../secret.db", "ABSOLUTE", "link.db"])
def test_external_data_never_leaves_the_model_directory(tmp_path: Path, escape: str) -> None:
    (tmp_path / "secret.db").write_bytes(SECRET)
    models = tmp_path / "models"
    models.mkdir()
    (models / "link.db").symlink_to(tmp_path / "secret.db")
    location = str(tmp_path / "secret.db") if escape == "ABSOLUTE" else escape
    path = models / "m.onnx"
    onnx.save(PLACES["initializer"](location), path)
    with pytest.raises(ModelError, match="directory"):
        load_onnx(path)


def test_external_data_past_the_end_of_its_file(tmp_path: Path) -> None:
    (tmp_path / "short.bin").write_bytes(b"\0" * 8)
    path = tmp_path / "m.onnx"
    onnx.save(PLACES["initializer"]("short.bin"), path)
    with pytest.raises(ModelError, match="past the end"):
        load_onnx(path)


# ---- malformed fields -------------------------------------------------------------------------------


def test_non_utf8_name_is_a_model_error() -> None:
    data = model_of([helper.make_node("Relu", ["x"], ["y"], name="NAMEX")]).SerializeToString()
    with pytest.raises(ModelError, match="UTF-8"):
        load_onnx(data.replace(b"NAMEX", b"NAM\xff\xfe"))


@pytest.mark.parametrize("dtype", [999, 0])
def test_unknown_initializer_dtype(dtype: int) -> None:
    t = numpy_helper.from_array(np.zeros(16, np.float32), "w")
    t.data_type = dtype
    with pytest.raises(CompilerError, match="dtype"):
        load_onnx(model_of([relu()], [t]).SerializeToString())


@pytest.mark.parametrize("elem_type", [999, 0])
def test_unknown_input_dtype(elem_type: int) -> None:
    model = model_of([relu()])
    model.graph.input[0].type.tensor_type.elem_type = elem_type
    with pytest.raises(CompilerError, match="dtype"):
        load_onnx(model.SerializeToString())


@pytest.mark.parametrize(
    ("dims", "error"),
    [([4, 2], "holds 64 bytes"), ([-4, -4], "negative"), ([1 << 40], "limit"), ([10**12, 10**12], "limit")],
)
def test_initializer_dims_must_match_data_and_limits(dims: list[int], error: str) -> None:
    t = numpy_helper.from_array(np.zeros(16, np.float32), "w")
    del t.dims[:]
    t.dims.extend(dims)
    with pytest.raises(ShapeError, match=error):
        load_onnx(model_of([relu()], [t]).SerializeToString())


def test_typed_field_count_must_match_dims() -> None:
    t = helper.make_tensor("w", FLOAT, [16], np.zeros(16, np.float32).tolist())
    del t.float_data[-3:]
    with pytest.raises(ShapeError, match="13 values"):
        load_onnx(model_of([relu()], [t]).SerializeToString())


def test_graph_nesting_and_node_count_limits() -> None:
    inner = model_of([relu()])
    for _ in range(4):
        wrapped = helper.make_node("If", ["c"], ["y"], then_branch=branch([], []), else_branch=inner.graph)
        inner = model_of([wrapped])
    with pytest.raises(ModelError, match="nested"):
        check_model(inner, Limits(graph_depth=3))
    check_model(inner, Limits(graph_depth=5))
    with pytest.raises(ModelError, match="more than 3 nodes"):
        check_model(inner, Limits(nodes=3))


# ---- what the model computes ------------------------------------------------------------------------


def _constant_of_shape(dims: list[int]) -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array(dims, np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill")]
    graph = helper.make_graph(
        nodes, "main", [], [helper.make_tensor_value_info("big", FLOAT, ["a", "b"])], [shape]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_constant_of_shape_of_2_40_is_refused_before_allocating() -> None:
    with pytest.raises(ShapeError, match="node 'fill'"):
        load_onnx(_constant_of_shape([1 << 20, 1 << 20]).SerializeToString())


def test_a_large_constant_is_computed_at_run_time_not_folded() -> None:
    graph = load_onnx(_constant_of_shape([4, FOLD_ELEMENTS]).SerializeToString())
    (out,) = graph.outputs
    assert isinstance(out, Call) and out.op == "expand"
    small = load_onnx(_constant_of_shape([4, 8]).SerializeToString())
    assert isinstance(small.outputs[0], Const)


def test_folding_an_op_outside_the_vocabulary_is_sized_first() -> None:
    ints = {
        k: numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("a", 0), ("b", 1 << 40), ("d", 1))
    }
    graph = helper.make_graph(
        [helper.make_node("Range", ["a", "b", "d"], ["r"], name="range")],
        "main",
        [],
        [helper.make_tensor_value_info("r", TensorProto.INT64, ["n"])],
        list(ints.values()),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(ShapeError, match="node 'range'"):
        load_onnx(model.SerializeToString())


def test_total_value_elements_limit() -> None:
    model = model_of([relu()])
    with pytest.raises(ShapeError, match="limit is 20"):
        load_onnx(model.SerializeToString(), limits=Limits(total_value_elements=20))


def test_a_declared_dim_of_minus_one_is_dynamic() -> None:
    model = model_of([relu()])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "n"
    with pytest.raises(ShapeError, match="not bound"):
        load_onnx(model.SerializeToString())
    graph = load_onnx(model.SerializeToString(), {"x": [16]})
    assert graph.inputs[0].type.shape == (16,)


def test_a_chain_of_thousands_of_ops_compiles() -> None:
    nodes, prev = [], "x"
    for i in range(2000):
        nodes.append(helper.make_node("Add", [prev, "x"], [f"t{i}"]))
        prev = f"t{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    compiled = compile_model(model_of(nodes).SerializeToString(), CompileOptions())
    assert len(compiled.kernels) > 1


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="nodes"):
        Limits(nodes=0)


def test_guard_accepts_every_tensor_kind_onnx_writes() -> None:
    arrays = [
        np.zeros((2, 3), d)
        for d in (np.float32, np.float16, np.int64, np.int8, np.uint8, np.bool_, np.float64)
    ]
    inits = [numpy_helper.from_array(a, f"t{k}") for k, a in enumerate(arrays)]
    inits.append(helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"b"]))
    inits.append(
        helper.make_tensor(
            "h", TensorProto.FLOAT16, [2], np.ones(2, np.float16).view(np.uint16).tolist(), raw=False
        )
    )
    assert check_model(model_of([relu()], inits)) == []


def test_declared_bytes_comes_from_dims_and_dtype() -> None:
    """What the skeleton check sizes initializers by: dims x dtype, sub-byte types rounded up to whole
    bytes, 0 for strings (their size is not in the dims)."""
    assert declared_bytes(numpy_helper.from_array(np.zeros((3, 4), np.float32), "w")) == 48
    assert declared_bytes(numpy_helper.from_array(np.zeros((5,), np.float16), "h")) == 10
    assert declared_bytes(helper.make_tensor("typed", TensorProto.INT64, [2, 3], list(range(6)))) == 48
    assert declared_bytes(helper.make_tensor("i4", TensorProto.INT4, [3], [1, 2, 3])) == 2
    assert declared_bytes(helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"b"])) == 0
    assert declared_bytes(helper.make_tensor("scalar", TensorProto.FLOAT, [], [1.0])) == 4
