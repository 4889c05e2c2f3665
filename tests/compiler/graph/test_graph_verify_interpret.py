"""The verifier rejects each broken invariant; the interpreter checks its inputs and runs fused graphs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from compiler.errors import CompilerError, ShapeError
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Call, Graph, Var
from compiler.graph.passes import partition
from compiler.graph.passes.fuse import groups_of
from compiler.graph.verify import verify_graph
from compiler.tensor_type import TensorType
from tests.compiler.graph.graph_builders import CONV, call, const, feeds, graph, var


def sample() -> Graph:
    x = var("x", 1, 3, 5, 5)
    conv = call("conv2d", x, const("w", 2, 3, 3, 3), **CONV)
    return graph([x], call("relu", call("add", conv, const("b", 1, 2, 1, 1))))


def test_valid_graphs_pass() -> None:
    verify_graph(sample())
    verify_graph(partition(sample()))
    verify_graph(partition(sample(), fuse=False))


def broken_graphs() -> dict[str, Graph]:
    x = var("x", 2, 3)
    y = var("y", 2, 3)
    relu = call("relu", x)
    return {
        "differs from inferred": graph([x], Call("relu", (x,), (), TensorType((3, 2), "float32"))),
        "unknown op": graph([x], Call("frobnicate", (x,), (), x.type)),
        "sorted order": graph([x], Call("leaky_relu", (x,), (("b", 1), ("alpha", 0.1)), x.type)),
        "plain value": graph([x], Call("leaky_relu", (x,), (("alpha", [0.1]),), x.type)),
        "invalid call": graph([x], Call("leaky_relu", (x,), (), x.type)),
        "not a graph input": graph([x], call("add", x, y)),
        "duplicate input": Graph((x, Var("x", x.type)), (relu,), ("out",)),
        "one to one": Graph((x,), (relu,), ("a", "b")),
    }


@pytest.mark.parametrize("problem", list(broken_graphs()))
def test_broken_graphs_are_rejected(problem: str) -> None:
    with pytest.raises(CompilerError, match=problem):
        verify_graph(broken_graphs()[problem])


def test_broken_fused_calls_are_rejected() -> None:
    fused = partition(sample())
    call_ = fused.outputs[0]
    group = call_.attr("group")
    wrong_arg = Call("fused", (var("z", 1, 3, 5, 6), *call_.args[1:]), call_.attrs, call_.type, call_.name)
    with pytest.raises(CompilerError, match="argument"):
        verify_graph(Graph((wrong_arg.args[0],), (wrong_arg,), ("out",)))
    lost_anchor = dataclasses.replace(group, anchor=call("relu", var("q", 2)))
    bad = Call("fused", call_.args, (("group", lost_anchor),), call_.type, call_.name)
    with pytest.raises(CompilerError, match="anchor"):
        verify_graph(Graph(fused.inputs, (bad,), ("out",)))
    twice = Graph(fused.inputs, (call_, Call("fused", call_.args, call_.attrs, call_.type)), ("a", "b"))
    with pytest.raises(CompilerError, match="twice"):
        verify_graph(twice)


def test_interpreter_checks_inputs() -> None:
    g = sample()
    good = feeds(g)
    with pytest.raises(ShapeError, match="missing"):
        run_graph(g, {})
    with pytest.raises(ShapeError, match="unknown"):
        run_graph(g, {**good, "extra": np.zeros(1)})
    with pytest.raises(ShapeError, match="expects f32"):
        run_graph(g, {"x": good["x"].astype(np.float64)})
    with pytest.raises(ShapeError, match="expects"):
        run_graph(g, {"x": good["x"][:, :2]})


def test_fused_and_plain_graphs_compute_the_same() -> None:
    g = sample()
    x = feeds(g)
    fused = partition(g)
    assert len(groups_of(fused)) == 1
    np.testing.assert_array_equal(run_graph(fused, x)["out0"], run_graph(g, x)["out0"])


def test_runtime_gather_out_of_range_is_a_shape_error() -> None:
    data = var("data", 4, 2)
    idx = var("idx", 3, dtype="int64")
    g = graph([data, idx], call("gather", data, idx, axis=0))
    ok = run_graph(g, {"data": np.ones((4, 2), np.float32), "idx": np.array([0, -1, 3])})
    assert ok["out0"].shape == (3, 2)
    with pytest.raises(ShapeError, match="out of range"):
        run_graph(g, {"data": np.ones((4, 2), np.float32), "idx": np.array([4, 0, 0])})
