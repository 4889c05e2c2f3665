"""The text form: readable, and print -> parse -> print is the identity (on real models too)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler.errors import CompilerError
from compiler.frontend.onnx import load_onnx
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Call, Const, Graph
from compiler.graph.parser import parse_graph
from compiler.graph.passes import run_passes
from compiler.graph.printer import graph_params, print_graph
from compiler.graph.verify import verify_graph
from tests.compiler.graph.graph_builders import CONV, call, const, feeds, graph, var
from tests.models import builders


def round_trip(g: Graph) -> Graph:
    text = print_graph(g)
    parsed = parse_graph(text, graph_params(g))
    assert print_graph(parsed) == text
    verify_graph(parsed)
    return parsed


@pytest.mark.parametrize(
    ("name", "model", "shapes"),
    [
        ("resnet18", lambda: builders.resnet18(image=32, classes=10), {"input": [1, 3, 32, 32]}),
        ("mobilenet_v2", lambda: builders.mobilenet_v2(image=32, classes=10), None),
        ("bert_layer", lambda: builders.bert_layer(seq=8, hidden=32, heads=2, ffn=64), None),
        ("mlp", lambda: builders.mlp(), None),
    ],
)
def test_round_trip_on_real_models(name: str, model, shapes) -> None:
    g = load_onnx(model(), shapes)
    parsed = round_trip(g)
    optimized, _ = run_passes(g, 2)
    assert len(parsed.calls()) == len(g.calls())
    if name == "mlp":
        x = feeds(g)
        np.testing.assert_array_equal(run_graph(parsed, x)["logits"], run_graph(g, x)["logits"])
    assert optimized is not None


def test_printed_form_is_readable() -> None:
    x = var("x", 1, 3, 8, 8)
    w = const("conv1.weight", 4, 3, 3, 3)
    conv = call("conv2d", x, w, name="/conv1/Conv", **CONV)
    text = print_graph(graph([x], call("relu", conv, name="/relu/Relu")))
    assert text.splitlines()[0] == "# @conv1.weight: f32[4, 3, 3, 3]"
    assert "def @main(%x: f32[1, 3, 8, 8]) -> (f32[1, 4, 8, 8]) {" in text
    assert (
        "  %0 = conv2d(%x, @conv1.weight, dilations=[1, 1], groups=1, pads=[1, 1, 1, 1], strides=[1, 1])"
        " : f32[1, 4, 8, 8]  # /conv1/Conv" in text
    )
    assert '  return (%1 as "out0")' in text


def test_awkward_names_and_attribute_values_round_trip() -> None:
    a = var("0", 2, 3)
    b = var("input:0 with space", 2, 2)
    w1 = Const("w", np.ones((3,), np.float32))
    w2 = Const("w", np.zeros((3,), np.float32))  # same name, different constant
    s = call("add", a, w1, name='has "quotes" # and hash')
    t = call("mul", s, w2, name="  padded  ")
    u = call("clip", t, min=-math.inf, max=6.0, name="line\nbreak")
    v = call("leaky_relu", u, alpha=1e-05)
    p = call("pad", b, pads=(0, 1, 0, 0), mode="constant", value=-0.0)
    q = call("sub", v, p)
    g = Graph((a, b), (q, a, w2), ("out/1", "same as input", "const"))
    text = print_graph(g)
    assert "@w.1" in text and '%"0"' in text and '%"input:0 with space"' in text
    assert "min=-inf" in text and "alpha=1e-05" in text
    parsed = round_trip(g)
    assert parsed.output_names == g.output_names
    assert [c.name for c in parsed.calls()] == [c.name for c in g.calls()]
    assert parsed.outputs[1] is parsed.inputs[0]
    assert isinstance(parsed.outputs[2], Const) and parsed.outputs[2].name == "w.1"
    x = feeds(g)
    for k, val in run_graph(parsed, x).items():
        np.testing.assert_array_equal(val, run_graph(g, x)[k])


def test_shared_constant_is_one_parameter() -> None:
    x = var("x", 4)
    c = const("c", 4)
    g = graph([x], call("add", call("mul", x, c), c))
    parsed = round_trip(g)
    mul, add = parsed.calls()
    assert mul.args[1] is add.args[1]
    assert list(graph_params(g)) == ["c"]


def test_calls_with_nested_and_none_attributes_round_trip() -> None:
    x = var("x", 2)
    odd = Call("relu", (x,), (("a", ((1, 2), ())), ("b", None), ("c", 's"q')), x.type, "odd")
    g = graph([x], odd)
    text = print_graph(g)
    assert 'a=[[1, 2], []], b=none, c="s\\"q"' in text
    parsed = parse_graph(text, {})
    assert parsed.calls()[0].attrs == odd.attrs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("def @main(%x: f32[2]) -> (f32[2]) {\n  %0 = relu(%y) : f32[2]\n}", "before it is defined"),
        ("def @main(%x: q32[2]) -> (f32[2]) {\n}", "unknown dtype"),
        ("def @main(%x: f32[2]) -> (f32[2]) {\n  %0 = add(%x, @nope) : f32[2]\n}", "no parameter"),
        ("def @main(%x: f32[2]) -> (f32[2]) {\n  %0 = relu(%x) : f32[2] extra\n}", "unexpected"),
        ("def @main(%x: f32[2]) -> (f32[2]) {\n  %0 = relu(%x) $ f32[2]\n}", "unexpected character"),
    ],
)
def test_parse_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(CompilerError, match=message):
        parse_graph(text, {})
