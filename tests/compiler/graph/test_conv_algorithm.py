"""The conv_algorithm pass: which blocked convs become Winograd, why the others stay direct, numerics."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.graph.passes import PassContext, alter_conv_layout, optional_passes, run_passes
from compiler.graph.passes.conv_algorithm import algorithm_report, choose_conv_algorithm, why_direct
from compiler.ops.conv2d_blocked import pack_weight
from compiler.ops.conv2d_winograd import matrices, transform_weight
from compiler.ops.registry import get
from tests.compiler.graph.graph_builders import CONV, call, const, graph, var
from tests.compiler.graph.test_graph_passes import check_pass, ops

B = 8


def conv(x, cout: int, k: int = 3, name: str = "conv", **attrs):  # type: ignore[no-untyped-def]
    a = {**CONV, "pads": (k // 2,) * 4, **attrs}
    cin = x.type.shape[1] // a["groups"]
    return call("conv2d", x, const(f"{name}.w", cout, cin, k, k), name=name, **a)


def blocked(*outputs, inputs):  # type: ignore[no-untyped-def]
    return alter_conv_layout(graph(inputs, *outputs), B)


@pytest.mark.parametrize("m", [2, 3, 4])
def test_the_transforms_compute_a_correlation_exactly(m: int) -> None:
    """Y = A^T [(G g G^T) * (B^T d B)] A is the 3x3 correlation of an (m+2)-wide tile, in exact
    arithmetic: checked in float64 on random tiles."""
    bt, g, at = matrices(m)
    rng = np.random.default_rng(m)
    d, w = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    y = at @ ((g @ w @ g.T) * (bt @ d @ bt.T)) @ at.T
    want = np.array([[np.sum(d[i : i + 3, j : j + 3] * w) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_the_op_matches_a_direct_convolution_with_odd_sizes_and_asymmetric_pads() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 11, 13, B)).astype(np.float32)  # 24 channels in blocks of 8
    w = rng.standard_normal((16, 24, 3, 3)).astype(np.float32)
    pads = (1, 0, 2, 1)
    direct = get("conv2d_nchwc").reference([x, pack_weight(w, B, B)], {**CONV, "pads": pads})
    for m in (2, 3, 4):
        u = transform_weight(pack_weight(w, B, B), m)
        assert u.shape == (m + 2, m + 2, 2, 3, B, B)
        got = get("conv2d_winograd_nchwc").reference([x, u], {"pads": pads, "tile": m})
        np.testing.assert_allclose(got, direct, rtol=1e-4, atol=1e-4)
    assert direct.shape == (2, 2, 12, 12, B)


@pytest.mark.parametrize(
    ("size", "dilations", "pads"),
    [
        ((11, 13), (2, 2), (2, 2, 2, 2)),
        ((12, 9), (2, 3), (1, 3, 3, 2)),
        ((28, 28), (4, 4), (4, 4, 4, 4)),
        ((7, 10), (3, 1), (3, 0, 2, 1)),
    ],
)
def test_the_dilated_op_matches_a_direct_dilated_convolution(
    size: tuple[int, int], dilations: tuple[int, int], pads: tuple[int, ...]
) -> None:
    """Tiles over the phases of the plane: planes that neither the dilation nor the tile divides,
    dilations that differ per axis, pads other than the dilation."""
    rng = np.random.default_rng(sum(size))
    x = rng.standard_normal((2, 3, *size, B)).astype(np.float32)
    w = rng.standard_normal((16, 24, 3, 3)).astype(np.float32)
    attrs = {**CONV, "pads": pads, "dilations": dilations}
    direct = get("conv2d_nchwc").reference([x, pack_weight(w, B, B)], attrs)
    op = get("conv2d_winograd_nchwc")
    for m in (2, 3, 4):
        u = transform_weight(pack_weight(w, B, B), m)
        winograd = {"pads": pads, "tile": m, "dilations": dilations}
        assert op.infer([var("x", *x.shape).type, var("u", *u.shape).type], winograd).shape == direct.shape
        np.testing.assert_allclose(op.reference([x, u], winograd), direct, rtol=1e-4, atol=1e-4)


def test_dilated_convs_become_winograd_with_tiles_counted_per_phase() -> None:
    """DeepLab's atrous backbone: a 28x28 plane dilated by 2 is four 14x14 planes, by 4 sixteen 7x7
    ones, which share one transformed weight: a 7x7 plane alone saves too little per weight byte,
    sixteen of them do, and they take F(4x4), whose 2x2 tiles per phase (8x8, one row and column
    padded) do 2304 products per channel pair where F(3x3)'s 3x3 (9x9) do 3600 and F(2x2)'s 4x4
    (8x8) 4096: the weights, 36 numbers per pair, are read once for all sixteen phases. A plane of
    28 dilated by 12 has phases of 3 rows and stays direct."""
    from compiler.graph.passes.conv_algorithm import MIN_FLOPS_SAVED_PER_BYTE, flops_saved_per_byte, tile_cost

    assert flops_saved_per_byte(512, 512, 28, 28, 2, (4, 4)) > MIN_FLOPS_SAVED_PER_BYTE
    # 4 phases of 7 rows each, in 4 tiles of 2 (the eighth row is padding): 16 tiles per axis
    assert flops_saved_per_byte(1, 1, 28, 28, 2, (4, 4)) == pytest.approx(
        (2 * 9 * 784 - 2 * 16 * 256) / (4 * 7)
    )
    assert flops_saved_per_byte(512, 512, 28, 28, 2, (12, 12)) < flops_saved_per_byte(512, 512, 28, 28, 2)
    assert tile_cost(28, 28, 4, (4, 4)) < tile_cost(28, 28, 3, (4, 4)) < tile_cost(28, 28, 2, (4, 4))
    for d, tile in ((2, "F(4x4, 3x3)"), (4, "F(4x4, 3x3)"), (12, None)):
        x = var("x", 1, 128, 28, 28)
        out = choose_conv_algorithm(
            blocked(conv(x, 128, name="c", dilations=(d, d), pads=(d,) * 4), inputs=[x])
        )
        report = algorithm_report(out, ran=True)
        if tile is None:
            assert "phases of 3x3" in report["direct"]["c"]
            continue
        assert report["winograd"] == {"c": tile}
        (c,) = [c for c in out.calls() if c.op == "conv2d_winograd_nchwc"]
        assert tuple(c.attr("dilations")) == (d, d) and c.type.shape[2:4] == (28, 28)


def test_infer_names_what_does_not_match() -> None:
    op = get("conv2d_winograd_nchwc")
    x = var("x", 1, 4, 10, 10, B).type
    u = var("u", 6, 6, 2, 4, B, B).type
    assert op.infer([x, u], {"pads": (1, 1, 1, 1), "tile": 4}).shape == (1, 2, 10, 10, B)
    with pytest.raises(Exception, match="tile must be one of"):
        op.infer([x, u], {"pads": (1, 1, 1, 1), "tile": 5})
    with pytest.raises(Exception, match="do not match"):
        op.infer([x, var("u", 4, 4, 2, 4, B, B).type], {"pads": (1, 1, 1, 1), "tile": 4})
    with pytest.raises(Exception, match="would be empty"):
        op.infer([var("x", 1, 4, 1, 1, B).type, u], {"pads": (0, 0, 0, 0), "tile": 4})
    with pytest.raises(Exception, match="needs a 3x3 filter"):
        transform_weight(np.zeros((1, 1, 5, 5, B, B), np.float32), 4)


def test_3x3_stride1_convs_with_enough_channels_become_winograd() -> None:
    x = var("x", 1, 128, 16, 16)
    y = call("relu", conv(x, 128, name="c1"), name="r1")
    z = call("add", conv(y, 128, name="c2"), y, name="residual")
    g = blocked(z, inputs=[x])
    out = choose_conv_algorithm(g)
    check_pass(g, out, atol=1e-3)
    assert ops(out).count("conv2d_winograd_nchwc") == 2 and "conv2d_nchwc" not in ops(out)
    u = [c.args[1] for c in out.calls() if c.op == "conv2d_winograd_nchwc"]
    assert [w.type.shape for w in u] == [(6, 6, 16, 16, B, B)] * 2
    assert all(w.name.endswith(".winograd4") for w in u)
    report = algorithm_report(out, ran=True)
    assert report == {"winograd": {"c1": "F(4x4, 3x3)", "c2": "F(4x4, 3x3)"}, "direct": {}}


@pytest.mark.parametrize(
    ("channels", "size", "tile"),
    [
        (32, 16, 2),  # too short a sum over channels for the rounding of F(3x3) or F(4x4)
        (64, 8, 2),  # F(3x3)'s 9 tiles on 8x8 pad to 9x9 and take more weights than its savings
        (64, 16, 3),  # too short a sum for F(4x4)
        (64, 56, 3),
        (256, 14, 3),  # F(4x4) would pad 14x14 to 16x16, with 1.44x F(3x3)'s weights
        (256, 28, 4),
        (128, 56, 4),
    ],
)
def test_the_tile_follows_the_channels_and_the_plane(channels: int, size: int, tile: int) -> None:
    x = var("x", 1, channels, size, size)
    out = choose_conv_algorithm(blocked(conv(x, 32, name="c"), inputs=[x]))
    (c,) = [c for c in out.calls() if c.op == "conv2d_winograd_nchwc"]
    assert c.attr("tile") == tile
    assert algorithm_report(out, ran=True)["winograd"] == {"c": f"F({tile}x{tile}, 3x3)"}
    assert c.args[1].type.shape[:2] == (tile + 2, tile + 2)


def test_the_tile_cost_weighs_multiplications_against_weight_bytes() -> None:
    from compiler.graph.passes.conv_algorithm import TILE_WEIGHT_BYTE_FLOPS, allowed_tiles, tile_cost

    assert allowed_tiles(32) == [2]
    assert allowed_tiles(64) == [2, 3]
    assert allowed_tiles(128) == [2, 3, 4]
    # a plane under 8 is no bar to F(4x4), the cost decides: a square one keeps the small tile (its
    # padding and weight bytes), a wide one of 7 rows takes F(4x4) (a few rows padded, many fewer tiles)
    for size in (4, 5, 6, 7):
        assert min((2, 3, 4), key=lambda m: tile_cost(size, size, m)) == 2
    assert min((2, 3, 4), key=lambda m: tile_cost(7, 56, m)) == 4
    # 14x14: 16 tiles of F(4x4) padded to 16x16, 25 of F(3x3) padded to 15x15, per channel pair
    assert tile_cost(14, 14, 4) == 36 * (2 * 16 + 4 * TILE_WEIGHT_BYTE_FLOPS)
    assert tile_cost(14, 14, 3) == 25 * (2 * 25 + 4 * TILE_WEIGHT_BYTE_FLOPS)
    for size in (28, 56, 112):  # large planes: the fewest multiplications
        assert tile_cost(size, size, 4) < tile_cost(size, size, 3) < tile_cost(size, size, 2)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda x: conv(x, 32, k=1), "its kernel is 1x1"),
        (lambda x: conv(x, 32, strides=(2, 2)), "strided"),
        (lambda x: conv(x, 32, dilations=(4, 4), pads=(4, 4, 4, 4)), "16 phases of 3x3, smaller than 4x4"),
        (lambda x: conv(x, 32, groups=4), "grouped"),
        (lambda x: conv(x, 16), "fewer than 32 input or output channels"),
    ],
)
def test_other_convs_stay_direct_with_their_reason(make, reason: str) -> None:  # type: ignore[no-untyped-def]
    x = var("x", 1, 32, 12, 12)
    g = blocked(make(x), inputs=[x])
    out = choose_conv_algorithm(g)
    assert "conv2d_winograd_nchwc" not in ops(out)
    (c,) = [c for c in out.calls() if c.op == "conv2d_nchwc"]
    assert reason in (why_direct(c) or "")
    assert reason in algorithm_report(out, ran=True)["direct"]["conv"]


def test_a_stem_and_tiny_planes_stay_direct() -> None:
    x = var("x", 1, 3, 12, 12)
    g = blocked(conv(x, 32, name="stem"), inputs=[x])
    (c,) = [c for c in g.calls() if c.op == "conv2d_nchwc"]
    assert "a network's first conv" in (why_direct(c) or "")
    x = var("x", 1, 32, 3, 3)
    g = blocked(conv(x, 32, name="tiny"), inputs=[x])
    (c,) = [c for c in g.calls() if c.op == "conv2d_nchwc"]
    assert "smaller than 4x4" in (why_direct(c) or "")
    assert why_direct(call("relu", x)) == "not a blocked conv2d"


def test_the_pass_runs_after_layout_alteration_and_can_be_disabled() -> None:
    x = var("x", 1, 32, 16, 16)
    g = graph([x], conv(x, 32, name="c"))
    _, ran = run_passes(g, 3, context=PassContext(channel_block=B))
    # right after the layout (and the integer convs, which take the quantized ones out of its choice)
    assert ran.index("conv_algorithm") == ran.index("quantized_kernels") + 1 == ran.index("alter_layout") + 2
    assert "conv_algorithm" in optional_passes()
    _, ran = run_passes(g, 3, context=PassContext(channel_block=B), disabled={"conv_algorithm"})
    assert "conv_algorithm" not in ran
    assert algorithm_report(g, ran=False)["direct"] == {}


def test_small_planes_stay_direct_when_the_weights_cost_more_than_the_multiplications_saved() -> None:
    """F(2x2) on a 7x7 plane (ResNet's last stage) saves about 13 FLOPs per byte its weights add;
    on 14x14 its 49 tiles save more than 16; the bar does not depend on the channel count."""
    from compiler.graph.passes.conv_algorithm import MIN_FLOPS_SAVED_PER_BYTE, flops_saved_per_byte

    for c in (32, 256, 512):
        assert flops_saved_per_byte(c, c, 7, 7, 2) < MIN_FLOPS_SAVED_PER_BYTE
        assert flops_saved_per_byte(c, c, 14, 14, 2) > MIN_FLOPS_SAVED_PER_BYTE
    assert flops_saved_per_byte(256, 256, 14, 14, 4) > MIN_FLOPS_SAVED_PER_BYTE  # 16 tiles of 6x6
    assert flops_saved_per_byte(448, 384, 8, 8, 4) < MIN_FLOPS_SAVED_PER_BYTE  # 4 tiles of 6x6
    # the count itself: direct 2*9*49, products 2*16*16, per 4*(16 - 9) bytes, for each channel pair
    assert flops_saved_per_byte(1, 1, 7, 7, 2) == pytest.approx((2 * 9 * 49 - 2 * 16 * 16) / (4 * 7))
    for hw, winograd in ((7, False), (14, True)):
        x = var("x", 1, 64, hw, hw)
        out = choose_conv_algorithm(blocked(conv(x, 64, name="c"), inputs=[x]))
        assert ("conv2d_winograd_nchwc" in ops(out)) is winograd, hw
        if not winograd:
            (c,) = [c for c in out.calls() if c.op == "conv2d_nchwc"]
            assert "FLOPs per byte" in algorithm_report(out, ran=True)["direct"]["c"]
            assert "7x7 output" in (why_direct(c) or "")


def test_a_conv_only_the_cost_rule_keeps_direct_is_a_candidate_that_measurements_can_make_winograd() -> None:
    """The cost rule weighs the CPU's arithmetic against its memory, which differs between CPUs: a
    conv it alone keeps direct is a Winograd candidate (tuning measures both kernels), and when
    measurements name it, the pass makes it Winograd, saying why. The structural rules (stride,
    kernel size, channels, plane) are not the measurements' to overrule."""
    from compiler.graph.passes.conv_algorithm import MEASURED_WINOGRAD, winograd_candidates

    x = var("x", 1, 64, 7, 7)
    small = conv(x, 64, name="small")  # 7x7: too few tiles for the weights' bytes
    strided = conv(small, 64, name="strided", strides=(2, 2))
    g = blocked(strided, inputs=[x])
    assert winograd_candidates(g) == {"small"}
    assert "conv2d_winograd_nchwc" not in ops(choose_conv_algorithm(g))
    out = choose_conv_algorithm(g, winograd=frozenset({"small", "strided"}))
    (wino,) = [c for c in out.calls() if c.op == "conv2d_winograd_nchwc"]
    assert wino.name == "small" and wino.attr("tile") == 2
    report = algorithm_report(out, ran=True, winograd=frozenset({"small", "strided"}))
    assert report["winograd"] == {"small": f"F(2x2, 3x3): {MEASURED_WINOGRAD}"}
    assert report["direct"] == {"strided": "strided"}
    # measured faster direct wins over the candidate list (a conv is never named in both)
    assert why_direct(
        next(c for c in g.calls() if c.name == "small"), frozenset({"small"}), frozenset({"small"})
    )
    # outputs reach about 1e3 here: F(2x2) rounds within a few ulps of that (1e-3), as in the tests above
    check_pass(g, choose_conv_algorithm(g, winograd=frozenset({"small"})), atol=1e-3)


@pytest.mark.parametrize(
    ("cpu", "bar"),
    [
        ("skylake-avx512", 16),  # two 512-bit FMAs per cycle: the bar as set
        ("znver5", 16),
        ("znver4", 8),  # one 512-bit FMA per cycle (two 256-bit halves)
        ("znver3", 8),  # 256-bit vectors, two FMAs
        ("haswell", 8),
        ("x86-64", 4),  # SSE: 128-bit vectors
    ],
)
def test_the_cost_bar_scales_with_the_targets_flops_per_cycle(cpu: str, bar: float) -> None:
    from compiler.graph.passes.conv_algorithm import flops_bar
    from compiler.target import parse_target

    assert flops_bar(parse_target(cpu)) == bar


def test_a_7x7_plane_runs_as_winograd_where_the_core_does_fewer_flops_per_weight_byte() -> None:
    """F(2x2) on a 7x7 plane saves about 13 FLOPs per byte its weights add: under the bar of a core
    starting two 512-bit FMAs per cycle, over that of a 256-bit core (which does half the arithmetic
    while the byte streams). A 5x5 plane saves about 6: direct on both. The pipeline passes the
    compilation target's bar, and the manifest says which bar a direct conv missed."""
    from compiler.pipeline import CompileOptions, compile_model
    from tests.compiler.frontend.onnx_check import single_op

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    for hw, winograd_on in ((7, {"haswell"}), (5, set())):
        x = rng.standard_normal((1, 64, hw, hw)).astype(np.float32)
        model, _ = single_op("Conv", {"x": x}, {"w": w}, pads=[1, 1, 1, 1])
        for cpu, bar in (("haswell", 8), ("skylake-avx512", 16)):
            compiled = compile_model(model.SerializeToString(), CompileOptions(target=cpu))
            algorithms = compiled.manifest["conv_algorithms"]
            assert bool(algorithms["winograd"]) is (cpu in winograd_on), (hw, cpu, algorithms)
            if cpu not in winograd_on:
                (reason,) = algorithms["direct"].values()
                assert (
                    f"FLOPs per byte its transformed weights add, under {bar} (a {hw}x{hw} output" in reason
                )
