"""Helpers for frontend tests: build one-off ONNX models and compare temper's graph with onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from compiler.frontend.onnx import load_onnx
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Graph
from compiler.graph.verify import verify_graph

IR_VERSION = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 11}


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, tuple[int, Sequence[int | str] | None]],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A checked model: inputs map name -> (TensorProto dtype, dims); output types come from ONNX
    shape inference."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, dt, dims) for n, (dt, dims) in inputs.items()],
        [helper.make_value_info(n, onnx.TypeProto()) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION[opset]
    )
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out in inferred.graph.output:  # ops defined as functions (GroupNormalization) stay untyped:
        if not out.type.HasField("tensor_type"):  # those keep their first input's type and shape
            out.type.CopyFrom(inferred.graph.input[0].type)
    return inferred


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds)), strict=True))


def check_against_ort(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    shapes: Mapping[str, Sequence[int]] | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> Graph:
    """Load with temper, verify, run the reference interpreter and compare every output with onnxruntime."""
    graph = load_onnx(model.SerializeToString(), shapes)
    verify_graph(graph)
    ours = run_graph(graph, feeds)
    theirs = run_ort(model, feeds)
    for name, expected in theirs.items():
        got = ours[name]
        assert got.shape == expected.shape, (name, got.shape, expected.shape)
        assert got.dtype == expected.dtype, (name, got.dtype, expected.dtype)
        np.testing.assert_allclose(got, expected, atol=atol, rtol=rtol, err_msg=name)
    return graph


def single_op(
    op_type: str,
    inputs: Mapping[str, np.ndarray],
    initializers: Mapping[str, np.ndarray] | None = None,
    n_outputs: int = 1,
    opset: int = 17,
    input_order: Sequence[str] | None = None,
    **attrs: Any,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of one node named 'node' over runtime `inputs` and constant `initializers`, with feeds.
    `input_order` gives the node's input list ('' for an omitted optional input)."""
    initializers = dict(initializers or {})
    order = list(input_order) if input_order is not None else [*inputs, *initializers]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, order, outs, name="node", **attrs)
    dtypes = {
        np.dtype(np.float32): TensorProto.FLOAT,
        np.dtype(np.int64): TensorProto.INT64,
        np.dtype(np.int32): TensorProto.INT32,
        np.dtype(np.bool_): TensorProto.BOOL,
    }
    spec = {n: (dtypes[v.dtype], list(v.shape)) for n, v in inputs.items()}
    return make_model([node], spec, outs, initializers, opset), dict(inputs)
