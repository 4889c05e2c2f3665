"""The pointwise_conv_rows pass: blocked 1x1 convs over small planes run over one row of pixels,
their epilogue on the same view; everything else keeps its rows. Numerics through the interpreter
and, compiled, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import compiler.runtime
from compiler.graph.ir import Call
from compiler.graph.passes import alter_conv_layout, fuse_ops, simplify
from compiler.graph.passes.fuse import groups_of
from compiler.graph.passes.pointwise_rows import MAX_PLANE, pointwise_conv_rows, why_rows
from compiler.pipeline import CompileOptions, compile_model
from tests.compiler.frontend.onnx_check import make_model, run_ort
from tests.compiler.graph.graph_builders import CONV, call, const, graph, var
from tests.compiler.graph.test_graph_passes import check_pass, ops

B = 8
POINTWISE = {**CONV, "pads": (0, 0, 0, 0)}


def conv(x, cout: int, k: int = 1, name: str = "conv", **attrs):  # type: ignore[no-untyped-def]
    a = {**POINTWISE, "pads": (k // 2,) * 4, **attrs}
    cin = x.type.shape[1] // a["groups"]
    return call("conv2d", x, const(f"{name}.w", cout, cin, k, k), name=name, **a)


def blocked_convs(g):  # type: ignore[no-untyped-def]
    return [c for c in g.calls() if c.op == "conv2d_nchwc"]


def test_a_bottleneck_tail_runs_over_one_row_with_its_epilogue_in_the_kernel() -> None:
    x = var("x", 1, 32, 7, 7)
    residual = var("res", 1, 64, 7, 7)
    y = call("add", conv(x, 64), const("b", 64, 1, 1))
    g = alter_conv_layout(graph([x, residual], call("relu", call("add", y, residual))), B)
    out = simplify(pointwise_conv_rows(g))
    check_pass(g, out)
    (c,) = blocked_convs(out)
    assert c.type.shape == (1, 8, 1, 49, B) and c.args[0].type.shape == (1, 4, 1, 49, B)
    relu = next(n for n in out.calls() if n.op == "relu")
    assert relu.type.shape == (1, 8, 1, 49, B)  # the epilogue moved onto the row
    kernels = [gr.ops for gr in groups_of(fuse_ops(out)) if any(op != "reshape" for op in gr.ops)]
    assert ["conv2d_nchwc", "add", "add", "relu"] in kernels
    # the reshapes the pass added stay out of the conv's kernel (the flatten is an alias of the
    # input's memory; the reshape back feeds the layout transform to NCHW)
    fused = [gr.ops for gr in groups_of(fuse_ops(out))]
    assert ["reshape"] in fused and not any("reshape" in k and "conv2d_nchwc" in k for k in fused)


def test_consecutive_pointwise_convs_share_the_row_view() -> None:
    x = var("x", 1, 32, 14, 14)
    g = alter_conv_layout(graph([x], conv(call("relu", conv(x, 48, name="a")), 24, name="b")), B)
    out = simplify(pointwise_conv_rows(g))
    check_pass(g, out)
    # the first conv's reshape back and the second's flatten cancelled out
    assert ops(out) == [
        "layout_transform",
        "reshape",
        "conv2d_nchwc",
        "relu",
        "conv2d_nchwc",
        "reshape",
        "layout_transform",
    ]
    assert all(c.type.shape[2:4] == (1, 196) for c in blocked_convs(out))


@pytest.mark.parametrize(
    ("shape", "k", "attrs", "why"),
    [
        ((1, 32, 7, 7), 3, {}, "not a 1x1 conv"),
        ((1, 32, 14, 14), 1, {"strides": (2, 2)}, "strided"),
        ((1, 32, 7, 7), 1, {"pads": (1, 1, 1, 1)}, "padded"),
        ((1, 32, 28, 28), 1, {}, "more than"),
        ((1, 32, 1, 49), 1, {}, "one row already"),
    ],
)
def test_other_convs_keep_their_rows_with_a_reason(shape, k: int, attrs: dict, why: str) -> None:  # type: ignore[no-untyped-def]
    x = var("x", *shape)
    g = alter_conv_layout(graph([x], call("relu", conv(x, 16, k=k, **attrs))), B)
    (c,) = blocked_convs(g)
    assert why in (why_rows(c) or "")
    out = pointwise_conv_rows(g)
    assert out is g


def test_grouped_pointwise_convs_keep_their_rows() -> None:
    x = var("x", 1, 32, 7, 7)
    g = alter_conv_layout(graph([x], conv(x, 32, groups=2)), B)
    (c,) = blocked_convs(g)
    assert why_rows(c) == "grouped"


def test_the_largest_plane_is_the_bar() -> None:
    side = int(MAX_PLANE**0.5)
    for size, rows in ((side, True), (side + 1, False)):
        x = var("x", 1, 16, size, size)
        (c,) = blocked_convs(alter_conv_layout(graph([x], conv(x, 16)), B))
        assert (why_rows(c) is None) == rows, size
    assert why_rows(Call("relu", (var("x", 2),), (), var("x", 2).type, "r")) == "not a blocked conv2d"


def test_an_epilogue_broadcasting_along_one_axis_keeps_the_planes_shape() -> None:
    x = var("x", 1, 16, 7, 7)
    rows = const("rows", 1, 16, 7, 1)  # one value per row: no view of the flat row holds it
    g = alter_conv_layout(graph([x], call("mul", conv(x, 16), rows)), B)
    out = simplify(pointwise_conv_rows(g))
    check_pass(g, out)
    assert ops(out)[-1] != "reshape" and any(c.type.shape[2:4] == (1, 49) for c in blocked_convs(out))


def _bottleneck_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """1x1 conv -> relu -> 3x3 conv -> relu -> 1x1 conv -> + input -> relu, on a 7x7 plane: the
    tail of a ResNet bottleneck, with a plane whose rows do not hold whole register tiles."""
    rng = np.random.default_rng(3)

    def w(o: int, i: int, k: int) -> np.ndarray:
        return (rng.standard_normal((o, i, k, k)) / np.sqrt(i * k * k)).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["c3", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = {
        "w1": w(24, 64, 1),
        "b1": rng.standard_normal(24).astype(np.float32),
        "w2": w(24, 24, 3),
        "w3": w(64, 24, 1),
        "b3": rng.standard_normal(64).astype(np.float32),
    }
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [1, 64, 7, 7])}, ["y"], inits)
    return model, {"x": rng.standard_normal((1, 64, 7, 7)).astype(np.float32)}


def test_compiled_row_convs_match_onnxruntime_and_the_manifest_names_the_pass(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, feeds = _bottleneck_model()
    want = run_ort(model, feeds)["y"]
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3))
    assert "pointwise_conv_rows" in compiled.manifest["passes"]
    path = tmp_path / "m.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run(feeds)["y"]
    assert got.shape == (1, 64, 7, 7)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    plain = compile_model(
        model.SerializeToString(),
        CompileOptions(opt_level=3, disabled_passes=frozenset({"pointwise_conv_rows"})),
    )
    assert "pointwise_conv_rows" not in plain.manifest["passes"]
    plain.save(path)
    np.testing.assert_allclose(compiler.runtime.load(path).run(feeds)["y"], want, rtol=1e-4, atol=1e-4)
