"""The layout-alteration pass: which ops run blocked, where transforms go, unchanged numerics."""

from __future__ import annotations

import pytest

from compiler.graph.ir import Call, Graph
from compiler.graph.passes import PassContext, alter_conv_layout, optional_passes, run_passes
from compiler.graph.passes.alter_layout import (
    DEPTHWISE_CHAIN,
    depthwise_chains,
    group_block,
    layout_report,
    narrow_block,
    output_block,
    why_planar,
    widened_groups,
)
from tests.compiler.graph.graph_builders import CONV, call, const, graph, var
from tests.compiler.graph.test_graph_passes import check_pass, ops

B = 8


def conv(x, cout: int, k: int = 3, name: str = "conv", **attrs):  # type: ignore[no-untyped-def]
    a = {**CONV, "pads": (k // 2,) * 4, **attrs}
    cin = x.type.shape[1] // a["groups"]
    return call("conv2d", x, const(f"{name}.w", cout, cin, k, k), name=name, **a)


def bias_relu(x, name: str):  # type: ignore[no-untyped-def]
    b = const(f"{name}.b", 1, x.type.shape[1], 1, 1)
    return call("relu", call("add", x, b, name=f"{name}.add"), name=f"{name}.relu")


def transforms(g: Graph) -> list[tuple[str, str]]:
    return [(c.attr("src_layout"), c.attr("dst_layout")) for c in g.calls() if c.op == "layout_transform"]


def test_a_chain_runs_blocked_with_one_transform_at_each_end() -> None:
    x = var("x", 1, 16, 10, 10)
    y = bias_relu(conv(x, 16, name="c1"), "c1")
    z = call("add", bias_relu(conv(y, 32, name="c2"), "c2"), conv(y, 32, k=1, name="c3"), name="residual")
    g = graph([x], call("relu", z, name="out"))
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert ops(out).count("conv2d_nchwc") == 3 and "conv2d" not in ops(out)
    assert transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    packed = [c.args[1] for c in out.calls() if c.op == "conv2d_nchwc"]
    assert [w.type.shape for w in packed] == [(2, 2, 3, 3, 8, 8), (4, 2, 3, 3, 8, 8), (4, 2, 1, 1, 8, 8)]
    assert all(".OIHW8i8o" in w.name for w in packed)
    # the epilogues (bias in the blocked layout, relu, residual) stay with their convs
    assert all(c.type.ndim == 5 for c in out.calls() if c.op in ("add", "relu"))


def test_an_rgb_stem_reads_its_input_in_blocks_of_three_channels() -> None:
    x = var("x", 1, 3, 12, 12)
    g = graph([x], bias_relu(conv(x, 16, k=7, name="stem", strides=(2, 2)), "stem"))
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert transforms(out) == [("NCHW", "NCHW3c"), ("NCHW8c", "NCHW")]


def test_depthwise_and_whole_block_groups_run_blocked_others_say_why_not() -> None:
    x = var("x", 1, 16, 9, 9)
    dw = conv(x, 16, k=5, name="dw", groups=16, strides=(2, 2))
    grouped = conv(bias_relu(dw, "dw"), 16, name="g", groups=2)
    g = graph([x], grouped)
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert ops(out).count("conv2d_nchwc") == 2
    narrow = conv(x, 4, name="narrow")
    assert why_planar(narrow, B) == "its 4 output channels would be mostly padding in blocks of 8"
    assert why_planar(conv(x, 12, name="padded"), B) is None
    groups8 = conv(x, 16, name="g8", groups=8)
    assert "8 groups of 2 input channels are not whole blocks of 8" in str(why_planar(groups8, B))
    assert why_planar(dw, B) is None
    assert why_planar(call("relu", x), B) == "not a conv2d"


@pytest.mark.parametrize(("k", "stride"), [(3, 1), (5, 2), (7, 1)])
def test_a_chain_of_depthwise_convs_alone_stays_planar_one_beside_a_dense_conv_runs_blocked(
    k: int, stride: int
) -> None:
    """A depthwise conv does a few products per value: blocked, the transforms at its chain's ends
    would cost more than it saves. Beside a dense conv (MobileNet's blocks) it runs blocked."""
    x = var("x", 1, 16, 12, 12)
    first = bias_relu(conv(x, 16, k=k, name="dw1", groups=16, strides=(stride, stride)), "dw1")
    pool = call(
        "max_pool2d", first, kernel=(2, 2), strides=(1, 1), pads=(0, 0, 1, 1), dilations=(1, 1), ceil_mode=0
    )
    alone = call("relu", conv(pool, 16, k=3, name="dw2", groups=16))
    g = graph([x], alone)
    assert all(why_planar(c, B) is None for c in g.calls() if c.op == "conv2d")  # each could run blocked
    assert {c.name for c in g.calls() if id(c) in depthwise_chains(g, B)} == {"dw1", "dw2"}
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert ops(out).count("conv2d") == 2 and not transforms(out)
    report = layout_report(out, B, ran=True)
    assert report["planar_convs"] == {"dw1": DEPTHWISE_CHAIN, "dw2": DEPTHWISE_CHAIN}
    assert report["blocked_convs"] == 0 and report["layout_transforms"] == 0

    # the same depthwise conv feeding a dense 1x1 conv: one chain, blocked throughout
    mixed = graph([x], conv(first, 24, k=1, name="pw"))
    assert not depthwise_chains(mixed, B)
    out = alter_conv_layout(mixed, B)
    check_pass(mixed, out, atol=1e-4)
    assert ops(out).count("conv2d_nchwc") == 2 and "conv2d" not in ops(out)
    assert transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]

    # a depthwise chain apart from a dense one (a planar op between them) stays planar on its own
    apart = graph([x], conv(call("transpose", first, perm=(0, 1, 3, 2)), 24, k=1, name="pw"))
    out = alter_conv_layout(apart, B)
    check_pass(apart, out, atol=1e-4)
    assert [c.name for c in out.calls() if c.op == "conv2d"] == ["dw1"]
    assert [c.name for c in out.calls() if c.op == "conv2d_nchwc"] == ["pw"]


def test_groups_half_a_block_wide_run_blocked_as_whole_block_groups_with_block_diagonal_weights() -> None:
    """RegNet's groups of 8 channels on a 16-lane target: pairs of groups become one group of a block,
    its weight zero between the pair; groups a quarter of a block wide would do 4x the work and stay
    planar."""
    x = var("x", 1, 32, 9, 9)
    y = bias_relu(conv(x, 32, k=1, name="a"), "a")
    z = bias_relu(conv(y, 32, name="b", groups=8), "b")  # groups of 4 channels, 2 per block of 8
    g = graph([x], conv(z, 32, k=1, name="c"))
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    grouped = [c for c in out.calls() if c.op == "conv2d_nchwc" and c.name == "b"]
    assert len(grouped) == 1 and grouped[0].attr("groups") == 4
    assert ".groups4" in grouped[0].args[1].name
    assert transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]  # the chain stays blocked
    assert widened_groups(conv(x, 32, name="q", groups=16), B) is None  # groups of 2: 4x the work
    assert widened_groups(conv(x, 64, name="wider", groups=8), B) is not None  # 8 outputs per group
    assert widened_groups(conv(x, 48, name="uneven", groups=8), B) is None  # 6: not whole output blocks


def test_groups_of_whole_half_blocks_run_in_half_blocks_between_transforms() -> None:
    """RegNet's groups of 24 channels on a 16-lane target: not whole blocks of 16, but of 8, so the
    grouped conv runs in NCHW8c (weights packed in blocks of 8), converted at its boundaries, while
    the dense convs around it stay in NCHW16c. Groups of 12 are not whole half blocks either."""
    x = var("x", 1, 72, 9, 9)
    y = bias_relu(conv(x, 72, k=1, name="a"), "a")
    z = bias_relu(conv(y, 72, name="b", groups=3, strides=(2, 2)), "b")
    g = graph([x], conv(z, 64, k=1, name="c"))
    out = alter_conv_layout(g, 16)
    check_pass(g, out, atol=1e-4)
    (grouped,) = [c for c in out.calls() if c.name == "b"]
    assert grouped.op == "conv2d_nchwc" and grouped.type.shape == (1, 9, 5, 5, 8)
    assert grouped.args[1].type.shape == (9, 3, 3, 3, 8, 8) and ".OIHW8i8o" in grouped.args[1].name
    assert ("NCHW", "NCHW8c") in transforms(out) and ("NCHW8c", "NCHW") in transforms(out)
    assert [c.type.shape[4] for c in out.calls() if c.op == "conv2d_nchwc" and c.name != "b"] == [16, 16]
    assert group_block(conv(x, 72, name="g24", groups=3), 16) == 8
    assert group_block(conv(x, 72, name="g24", groups=3), 8) == 0  # whole blocks of 8 already
    assert group_block(conv(x, 72, name="g12", groups=6), 16) == 0
    assert "6 groups of 12 input channels" in str(why_planar(conv(x, 72, name="g12", groups=6), 16))


def test_a_dense_conv_to_half_a_block_of_channels_writes_half_blocks_that_the_next_conv_reads() -> None:
    """MNASNet-0.5's projection to 8 channels on a 16-lane target: padded to a block it would be
    mostly zeros, so it writes NCHW8c, its bias with it, and the next conv reads that as its input
    block: no layout transform between them, where planar it took one on each side."""
    x = var("x", 1, 16, 9, 7)
    y = bias_relu(conv(x, 16, name="a"), "a")
    narrow = conv(y, 8, k=1, name="narrow")
    projected = call("add", narrow, const("narrow.b", 1, 8, 1, 1), name="narrow.add")
    g = graph([x], bias_relu(conv(projected, 32, k=1, name="expand"), "expand"))
    out = alter_conv_layout(g, 16)
    check_pass(g, out, atol=1e-4)
    assert transforms(out) == [("NCHW", "NCHW16c"), ("NCHW16c", "NCHW")]
    by_name = {c.name: c for c in out.calls()}
    assert by_name["narrow"].op == "conv2d_nchwc" and by_name["narrow"].type.shape == (1, 1, 9, 7, 8)
    assert ".OIHW16i8o" in by_name["narrow"].args[1].name
    assert by_name["narrow.add"].type.shape == (1, 1, 9, 7, 8)
    assert by_name["expand"].args[0] is by_name["narrow.add"]
    assert ".OIHW8i16o" in by_name["expand"].args[1].name
    assert narrow_block(narrow, 16) == 8 and output_block(narrow, 16) == 8 and why_planar(narrow, 16) is None
    assert narrow_block(narrow, 8) == 0 and output_block(narrow, 8) == 8  # a whole block already
    assert narrow_block(conv(y, 24, name="n24"), 16) == 0  # padded to 32: within the padding allowed
    four = conv(y, 4, name="n4")
    assert narrow_block(four, 16) == 0
    assert "its 4 output channels would be mostly padding" in str(why_planar(four, 16))
    assert narrow_block(conv(y, 8, name="g8", groups=8), 16) == 0  # grouped


def test_a_narrow_conv_read_by_a_planar_op_is_converted_from_its_half_blocks() -> None:
    x = var("x", 1, 16, 6, 6)
    y = bias_relu(conv(x, 16, name="a"), "a")
    g = graph([x], call("softmax", conv(y, 8, k=1, name="narrow"), axis=1, name="probs"))
    out = alter_conv_layout(g, 16)
    check_pass(g, out, atol=1e-4)
    assert transforms(out) == [("NCHW", "NCHW16c"), ("NCHW8c", "NCHW")]


def test_squeeze_excitation_global_pooling_and_concat_stay_blocked() -> None:
    x = var("x", 1, 16, 8, 8)
    y = bias_relu(conv(x, 16, name="c1"), "c1")
    pooled = call("reduce_mean", y, axes=(2, 3), keepdims=1, name="pool")
    scale = call("sigmoid", conv(call("relu", conv(pooled, 8, k=1, name="se1")), 16, k=1, name="se2"))
    excited = call("mul", y, scale, name="excite")
    joined = call("concat", excited, y, axis=1, name="cat")
    g = graph([x], conv(joined, 8, name="c2"))
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    blocked_ops = {c.op for c in out.calls() if c.type.ndim == 5}
    assert {"reduce_mean", "mul", "sigmoid", "concat", "conv2d_nchwc"} <= blocked_ops


def test_a_value_read_by_blocked_and_planar_ops_is_converted_once() -> None:
    x = var("x", 1, 8, 6, 6)
    y = conv(x, 16, name="c1")
    flat = call("reshape", y, shape=(1, 16 * 36), name="flat")
    g = graph([x], conv(y, 8, name="c2"), flat, call("max_pool2d", y, kernel=(2, 2), strides=(2, 2),
              pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=0))  # fmt: skip
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    # c1 for the reshape, c2 and the (blocked) pool for the outputs
    assert transforms(out).count(("NCHW8c", "NCHW")) == 3
    assert next(c for c in out.calls() if c.op == "max_pool2d").type.ndim == 5
    for c in out.calls():
        if c.op == "layout_transform":
            assert not (isinstance(c.args[0], Call) and c.args[0].op == "layout_transform")


def test_graphs_without_blockable_convs_or_without_a_block_are_unchanged() -> None:
    x = var("x", 1, 16, 6, 6)
    g = graph([x], conv(x, 16))
    assert alter_conv_layout(g, 0) is g
    h = graph([x], conv(x, 4))
    assert alter_conv_layout(h, B) is h


def test_channels_that_do_not_fill_blocks_are_padded_and_divisions_stay_planar() -> None:
    x = var("x", 1, 12, 7, 7)
    y = bias_relu(conv(x, 12, name="c1"), "c1")  # planar 12 -> 2 blocks, 4 padded lanes
    dw = call("sigmoid", conv(y, 12, k=3, name="dw", groups=12))
    z = call("div", dw, const("scale", 1, 12, 1, 1, value=2.0), name="div")
    g = graph([x], conv(z, 12, k=1, name="c2"))
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert ops(out).count("conv2d_nchwc") == 3
    assert [c.attr("groups") for c in out.calls() if c.op == "conv2d_nchwc"] == [1, 16, 1]
    assert transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW"), ("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    back = [c for c in out.calls() if c.op == "layout_transform" and c.attr("dst_layout") == "NCHW"]
    assert all(c.attr("channels") == 12 and c.type.shape[1] == 12 for c in back)
    assert next(c for c in out.calls() if c.op == "div").type.ndim == 4  # padding / padding would be NaN


def test_a_quantization_of_padded_channels_stays_blocked() -> None:
    """Division by one nonzero scale, rounding, clipping and the cast to bytes keep the padding lanes
    finite: a QDQ network's 24-channel tensors stay blocked between its convs."""
    x = var("x", 1, 12, 7, 7)
    y = bias_relu(conv(x, 12, name="c1"), "c1")
    q = call("round", call("div", y, const("scale", value=0.05), name="q"), name="round")
    q = call("clip", call("add", q, const("zero", value=3.0)), min=0.0, max=255.0)
    stored = call("cast", q, to="uint8", name="bytes")
    dq = call(
        "mul", call("sub", call("cast", stored, to="float32"), const("z", value=3.0)), const("s", value=0.05)
    )
    g = graph([x], conv(dq, 12, k=1, name="c2"))
    out = alter_conv_layout(g, B)
    check_pass(g, out, atol=1e-4)
    assert transforms(out) == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    assert all(c.type.ndim == 5 for c in out.calls() if c.op in ("div", "round", "cast"))
    zero = call("div", y, const("zero_scale", value=0.0), name="by_zero")  # 0 / 0 in the padding
    assert (
        next(
            c for c in alter_conv_layout(graph([x], conv(zero, 12, k=1)), B).calls() if c.op == "div"
        ).type.ndim
        == 4
    )


def test_the_pass_is_listed_and_can_be_disabled() -> None:
    assert "alter_layout" in [n for n, _ in run_passes.__globals__["PASSES_BY_LEVEL"][3]]
    assert "alter_layout" in optional_passes()
    x = var("x", 1, 16, 6, 6)
    g = graph([x], conv(x, 16))
    on, ran = run_passes(g, 2, context=PassContext(channel_block=B))
    assert "alter_layout" in ran and "conv2d_nchwc" in {op for c in on.calls() for op in c.attr("group").ops}
    off, ran = run_passes(g, 2, context=PassContext(channel_block=B), disabled={"alter_layout"})
    assert "alter_layout" not in ran and "conv2d_nchwc" not in {
        op for c in off.calls() for op in c.attr("group").ops
    }
    with pytest.raises(ValueError, match=r"cannot disable pass 'fuse_ops'.*alter_layout"):
        run_passes(g, 3, disabled={"fuse_ops"})
    with pytest.raises(ValueError, match="cannot disable pass 'no_such_pass'"):
        run_passes(g, 3, disabled={"no_such_pass"})


def test_the_blocked_graph_prints_and_parses_back() -> None:
    from compiler.frontend.onnx import load_onnx
    from compiler.graph.passes import fold_batch_norm
    from tests.compiler.graph.test_graph_printer_parser import round_trip
    from tests.models import builders

    g = fold_batch_norm(load_onnx(builders.mobilenet_v2(image=32, classes=10)))
    out = alter_conv_layout(g, B)
    assert "conv2d_nchwc" in ops(out) and "layout_transform" in ops(out)
    parsed = round_trip(out)
    check_pass(g, parsed, atol=1e-4)
