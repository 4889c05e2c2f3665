"""The op catalog (`temper ops`) says what the importer does: a listed op imports at both ends of its
opset range and not before it, an op the catalog leaves out is refused, and the table and JSON carry
every op."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import ModelError, UnsupportedOpError
from compiler.frontend.catalog import NOTES, OpSupport, ops_table, supported_ops
from compiler.frontend.onnx import SUPPORTED_OPSETS, import_model

OPS = supported_ops()
BY_NAME = {op.name: op for op in OPS}
X = helper.make_tensor_type_proto(TensorProto.FLOAT, [1, 4, 4, 4])
# ops of one required input that one float input does not make valid ONNX of: ConstantOfShape reads a
# shape, DFT a signal whose last axis holds 1 or 2 parts, EyeLike a matrix, Resize needs scales or
# sizes, Split (from opset 18) num_outputs, DynamicQuantizeLinear has three outputs, and ONNX infers no
# output type for a MeanVarianceNormalization without axes (the importer spells them out;
# tests/compiler/frontend/test_convert_signal.py imports DFT at both ends)
NOT_ONE_INPUT = {
    "ConstantOfShape",
    "DFT",
    "DynamicQuantizeLinear",
    "EyeLike",
    "MeanVarianceNormalization",
    "Resize",
    "Split",
}


def _one_input(schema: onnx.defs.OpSchema) -> bool:
    required = [i for i in schema.inputs if i.option != onnx.defs.OpSchema.FormalParameterOption.Optional]
    return len(required) == 1 and not any(a.required for a in schema.attributes.values())


def _one_node(
    node: onnx.NodeProto,
    opset: int,
    out: onnx.TypeProto | None = None,
    inits: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    """A model of `node` on a float input x [1, 4, 4, 4] and the constants `inits`; its output y
    typed as ONNX infers it at `opset` unless `out` says."""
    if out is None:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        types = {"x": X, **{t.name: helper.make_tensor_type_proto(t.data_type, t.dims) for t in inits}}
        out = onnx.shape_inference.infer_node_outputs(schema, node, types, {t.name: t for t in inits})["y"]
    graph = helper.make_graph(
        [node], "g", [helper.make_value_info("x", X)], [helper.make_value_info("y", out)], list(inits)
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _model(op: str, opset: int, out: onnx.TypeProto | None = None) -> onnx.ModelProto:
    """One node `op` on the float input."""
    return _one_node(helper.make_node(op, ["x"], ["y"], name="the_node"), opset, out)


UNARY = [
    op.name
    for op in OPS
    if "float32" in op.dtypes
    and op.name not in NOT_ONE_INPUT
    and _one_input(onnx.defs.get_schema(op.name, op.max_opset, ""))
]


def test_the_catalog_is_the_frontends_converter_table_sorted() -> None:
    assert [op.name for op in OPS] == sorted(op.name for op in OPS)
    assert len(UNARY) > 40  # the import tests below cover most of the catalog
    for op in OPS:
        assert SUPPORTED_OPSETS.start <= op.min_opset <= op.max_opset < SUPPORTED_OPSETS.stop
        assert op.domain == "ai.onnx" and op.dtypes


@pytest.mark.parametrize("name", UNARY)
def test_a_listed_op_imports_at_both_ends_of_its_opsets_and_not_before(name: str) -> None:
    op = BY_NAME[name]
    for opset in (op.min_opset, op.max_opset):
        imported = import_model(_model(name, opset))
        assert imported.opset == opset and imported.graph.outputs
    if op.min_opset > SUPPORTED_OPSETS.start:  # ONNX has no such op in the opset before
        out = _model(name, op.min_opset).graph.output[0].type
        with pytest.raises(ModelError, match="checker"):
            import_model(_model(name, op.min_opset - 1, out))


@pytest.mark.parametrize(
    ("op", "inputs", "initializers", "attrs", "spelled_since"),
    [
        ("Conv", ["x", "w"], [("w", [2, 4, 3, 3])], {"pads": [1, 1, 1, 1]}, None),
        ("MatMul", ["x", "w"], [("w", [4, 3])], {}, None),
        ("Add", ["x", "w"], [("w", [4])], {}, None),
        ("Resize", ["x", "", "scales"], [("scales", [4])], {"mode": "nearest"}, 13),  # roi optional
    ],
)
def test_a_listed_op_with_constant_inputs_imports(
    op: str,
    inputs: list[str],
    initializers: list[tuple[str, list[int]]],
    attrs: dict[str, object],
    spelled_since: int | None,
) -> None:
    """From the first opset that spells the node this way to the newest."""
    inits = [numpy_helper.from_array(np.ones(shape, np.float32), name) for name, shape in initializers]
    node = helper.make_node(op, inputs, ["y"], name="the_node", **attrs)
    for opset in (spelled_since or BY_NAME[op].min_opset, BY_NAME[op].max_opset):
        assert import_model(_one_node(node, opset, inits=inits)).graph.outputs


def _unlisted() -> list[str]:
    """Default-domain ops outside the catalog that one float input makes a valid ONNX model of."""
    names = []
    for schema in onnx.defs.get_all_schemas():
        if schema.domain or schema.name in BY_NAME or schema.deprecated or not _one_input(schema):
            continue
        try:
            onnx.checker.check_model(_model(schema.name, SUPPORTED_OPSETS.stop - 1))
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, KeyError):
            continue
        names.append(schema.name)
    return sorted(names)


UNLISTED = _unlisted()


def test_ops_outside_the_catalog_exist_to_be_refused() -> None:
    assert len(UNLISTED) > 5 and {"NonZero", "Unique"} <= set(UNLISTED)


@pytest.mark.parametrize("name", UNLISTED)
def test_an_op_outside_the_catalog_is_refused_on_run_time_inputs(name: str) -> None:
    with pytest.raises(UnsupportedOpError, match="the_node"):
        import_model(_model(name, SUPPORTED_OPSETS.stop - 1))


def test_an_invented_op_is_refused_and_the_error_lists_exactly_the_catalog() -> None:
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="the_node", domain="com.example")
    model = _one_node(node, 17, out=X)
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOpError) as caught:
        import_model(model)
    listed = str(caught.value).split("Supported ONNX ops: ", 1)[1]
    assert listed.split(", ") == [op.name for op in OPS]


def test_the_table_has_one_row_per_op_and_the_folding_note() -> None:
    table = ops_table(OPS)
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| op ")]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [op.name for op in OPS]
    conv = next(row for row in rows if row.startswith("| Conv |"))
    assert f"{BY_NAME['Conv'].min_opset}–{BY_NAME['Conv'].max_opset}" in conv and "float32" in conv
    assert "3-D: as 2-D convs over the frames" in conv  # from its support check's docstring
    transposed = next(row for row in rows if row.startswith("| ConvTranspose |"))
    assert "3-D: one group" in transposed
    assert all(note in table for note in NOTES)


def test_json_round_trips() -> None:
    data = json.loads(json.dumps([op.to_json() for op in OPS]))
    assert [OpSupport(**{**d, "dtypes": tuple(d["dtypes"])}) for d in data] == OPS
    assert set(data[0]) == {"name", "domain", "min_opset", "max_opset", "dtypes", "restriction"}
