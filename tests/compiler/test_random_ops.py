"""Property-style checks of compiled kernels: random shapes and attributes vs onnxruntime.

Each case draws its shapes/attributes from a seeded generator (the seed is the test id), builds a
one-node ONNX model (weights as initializers, so constant packing is exercised), compiles it at
opt levels 3 and 0 and compares with onnxruntime at atol/rtol 1e-4 (fp32; conv/matmul sums of up
to a few hundred products of O(1) values).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.runtime
from compiler.kernels import ScheduleChoice, default_schedule
from compiler.pipeline import CompileOptions, build_frontier, compile_model, inspect_model
from compiler.target import parse_target
from tests.compiler.frontend.onnx_check import make_model, run_ort, single_op
from tests.compiler.test_compiled_ops import compile_and_run


def _check(model, feeds, tmp_path, opt_level: int) -> None:  # type: ignore[no-untyped-def]
    want = run_ort(model, feeds)
    got = compile_and_run(model, feeds, tmp_path, opt_level)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, atol=1e-4, rtol=1e-4, err_msg=k)


def _randn(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("seed", range(12))
def test_random_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 1, 2, 4]))
    depthwise = seed % 4 == 3
    cin = int(rng.integers(1, 5)) * groups
    cout = int(rng.choice([groups, 2 * groups, 8 * groups, 16]))
    if depthwise:
        groups = cin = cout = int(rng.integers(2, 20))
    if cout % groups:
        cout = groups * 2
    k = int(rng.choice([1, 3, 5]))
    stride, dil = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pad = int(rng.integers(0, k))
    h, w = int(rng.integers(k * dil, 20)), int(rng.integers(k * dil, 20))
    batch = int(rng.integers(1, 3))
    x = _randn(rng, batch, cin, h, w)
    wt = _randn(rng, cout, cin // groups, k, k)
    bias = _randn(rng, cout)
    model, feeds = single_op(
        "Conv",
        {"x": x},
        {"w": wt, "b": bias},
        strides=[stride, stride],
        pads=[pad] * 4,
        dilations=[dil, dil],
        group=groups,
    )
    _check(model, feeds, tmp_path, opt_level=3 if seed % 3 else 0)


@pytest.mark.parametrize("seed", range(8))
def test_random_grouped_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Grouped (not depthwise) convs as RegNet and ResNeXt use them: group widths 2-16, output tiles
    within one group, odd and short rows (masked vector tails), strides 1 and 2."""
    rng = np.random.default_rng(900 + seed)
    groups = int(rng.integers(2, 7))
    per_in, per_out = int(rng.choice([2, 4, 8, 16])), int(rng.choice([2, 4, 8, 16]))
    k, stride = int(rng.choice([1, 3])), int(rng.integers(1, 3))
    h, w = int(rng.integers(k, 24)), int(rng.integers(k, 40))
    x = _randn(rng, 1, groups * per_in, h, w)
    wt = _randn(rng, groups * per_out, per_in, k, k)
    bias = _randn(rng, groups * per_out)
    model, feeds = single_op(
        "Conv",
        {"x": x},
        {"w": wt, "b": bias},
        strides=[stride, stride],
        pads=[k // 2] * 4,
        group=groups,
    )
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(4))
def test_random_half_block_grouped_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Groups an odd number of half vectors wide (RegNet's 24 channels on a 16-lane target), which
    run in blocks of half the lanes between two dense convs in full blocks: strides 1 and 2, odd
    planes, a fused bias and ReLU."""
    rng = np.random.default_rng(950 + seed)
    half = max(1, parse_target("host").lanes() // 2)
    per_group, groups = half * int(rng.choice([1, 3, 5])), int(rng.integers(2, 5))
    c, stride = per_group * groups, int(rng.integers(1, 3))
    h, w = int(rng.integers(3, 20)), int(rng.integers(3, 20))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[0] * 4),
        helper.make_node("Conv", ["a", "w2", "b2"], ["g"], group=groups, pads=[1] * 4, strides=[stride] * 2),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Conv", ["r", "w3"], ["y"], pads=[0] * 4),
    ]
    weights = {
        "w1": _randn(rng, c, c, 1, 1) / np.float32(np.sqrt(c)),
        "w2": _randn(rng, c, per_group, 3, 3) / np.float32(np.sqrt(9 * per_group)),
        "b2": _randn(rng, c),
        "w3": _randn(rng, 2 * half, c, 1, 1) / np.float32(np.sqrt(c)),
    }
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [1, c, h, w])}, ["y"], weights)
    _check(model, {"x": _randn(rng, 1, c, h, w)}, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(3))
def test_random_conv_to_half_a_block_of_channels(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A dense conv to half a vector of channels (MNASNet-0.5's 8 on a 16-lane target) between two
    dense convs, with its bias: where half a vector holds at least 8 lanes, it writes half blocks
    that the next conv reads; odd planes, 1x1 and 3x3 windows, strides 1 and 2."""
    rng = np.random.default_rng(970 + seed)
    lanes = parse_target("host").lanes()
    half = max(1, lanes // 2)
    c, k, stride = lanes * int(rng.integers(1, 3)), int(rng.choice([1, 3])), int(rng.integers(1, 3))
    h, w = int(rng.integers(3, 20)), int(rng.integers(3, 20))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[0] * 4),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["n"], pads=[k // 2] * 4, strides=[stride] * 2),
        helper.make_node("Conv", ["n", "w3"], ["e"], pads=[0] * 4),
        helper.make_node("Relu", ["e"], ["y"]),
    ]
    weights = {
        "w1": _randn(rng, c, c, 1, 1) / np.float32(np.sqrt(c)),
        "w2": _randn(rng, half, c, k, k) / np.float32(np.sqrt(c * k * k)),
        "b2": _randn(rng, half),
        "w3": _randn(rng, 2 * lanes, half, 1, 1) / np.float32(np.sqrt(half)),
    }
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [1, c, h, w])}, ["y"], weights)
    _check(model, {"x": _randn(rng, 1, c, h, w)}, tmp_path, opt_level=3)
    if half >= 8:
        compiled = compile_model(model.SerializeToString(), CompileOptions())
        blocks = [k.workload.func.params[-1].shape[-1] for k in compiled.kernels if "conv2d_nchwc" in k.name]
        assert blocks == [lanes, half, lanes], blocks


@pytest.mark.parametrize("seed", range(8))
def test_random_strided_depthwise_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Strided depthwise convs read a padded input dealt into column phases: odd and even widths,
    asymmetric pads, dilation, strides 2 and 3."""
    rng = np.random.default_rng(500 + seed)
    channels = int(rng.integers(1, 24))
    k, stride, dil = int(rng.choice([1, 3, 5])), int(rng.choice([2, 2, 3])), int(rng.integers(1, 3))
    pads = [int(p) for p in rng.integers(0, k, 4)]
    h, w = int(rng.integers(k * dil, 40)), int(rng.integers(k * dil, 70))
    x = _randn(rng, 1, channels, h, w)
    wt = _randn(rng, channels, 1, k, k)
    bias = _randn(rng, channels)
    model, feeds = single_op(
        "Conv",
        {"x": x},
        {"w": wt, "b": bias},
        strides=[stride, stride],
        pads=pads,
        dilations=[dil, dil],
        group=channels,
    )
    _check(model, feeds, tmp_path, opt_level=3)


def _then_pointwise(model: Any, rng: np.random.Generator) -> Any:
    """The single-op model with a dense 1x1 conv reading its output, as MobileNet puts one after each
    depthwise conv: alone, a depthwise conv stays planar (alter_layout's DEPTHWISE_CHAIN)."""
    graph = model.graph
    (node,) = graph.node
    channels = graph.initializer[0].dims[0]
    node.output[0] = "depthwise"
    weight = _randn(rng, channels, channels, 1, 1)
    graph.initializer.append(numpy_helper.from_array(weight, "pointwise.w"))
    graph.node.append(helper.make_node("Conv", ["depthwise", "pointwise.w"], ["y0"], name="pointwise"))
    return model


@pytest.mark.parametrize("seed", range(15))
def test_random_blocked_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Convs the layout pass runs in NCHW{lanes}c: dense (with an RGB-like stem of any channel count),
    depthwise and whole-block grouped, kernels 1-7, strides 1-2, dilation, asymmetric pads, rows that
    do not divide into register tiles, channel counts padded to whole blocks."""
    rng = np.random.default_rng(1300 + seed)
    lanes = parse_target("host").lanes()
    kind = ("dense", "stem", "depthwise", "grouped", "padded")[seed % 5]
    groups = 1
    cin, cout = lanes * int(rng.integers(1, 4)), lanes * int(rng.integers(1, 4))
    if kind == "stem":
        cin = int(rng.integers(1, lanes))
    elif kind == "depthwise":
        groups = cout = cin = cin - int(rng.integers(0, 3))  # padded to whole blocks unless a multiple
    elif kind == "grouped":
        groups = 2
        cin, cout = 2 * lanes, 2 * lanes * int(rng.integers(1, 3))
    elif kind == "padded":  # channels that do not fill blocks: zero lanes in the last block
        cin, cout = (int(rng.integers(lanes + 1, 3 * lanes)) for _ in range(2))
    k = int(rng.choice([1, 3, 5, 7]))
    stride, dil = int(rng.integers(1, 3)), int(rng.choice([1, 1, 2]))
    pads = [int(p) for p in rng.integers(0, k, 4)]
    h, w = int(rng.integers(k * dil, 24)), int(rng.integers(k * dil, 40))
    x = _randn(rng, int(rng.integers(1, 3)), cin, h, w)
    model, feeds = single_op(
        "Conv",
        {"x": x},
        {"w": _randn(rng, cout, cin // groups, k, k), "b": _randn(rng, cout)},
        strides=[stride, stride],
        pads=pads,
        dilations=[dil, dil],
        group=groups,
    )
    if kind == "depthwise":
        model = _then_pointwise(model, rng)
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    (mine,) = [k for k in compiled.manifest["kernels"] if "node" in k["nodes"]]
    assert "conv2d_nchwc" in mine["name"], kind
    assert "alter_layout" in compiled.manifest["passes"]
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(8))
def test_random_winograd_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """3x3 stride-1 convs the conv_algorithm pass runs as Winograd F(4x4) or F(2x2): channel counts
    that fill blocks or are padded to them, planes that do not divide into tiles, asymmetric pads,
    batches, a fused bias + ReLU and a residual add. Weights scaled as trained networks' are (the
    transforms' rounding is relative to the sums' magnitude)."""
    rng = np.random.default_rng(1500 + seed)
    lanes = parse_target("host").lanes()
    blocks = -(-32 // lanes)  # whole blocks making the rule's 32 channels, whatever the vector width
    filled = lanes * int(rng.integers(blocks, blocks + 3))
    cin = int(rng.integers(32, 3 * lanes + 33)) if seed % 3 == 2 else filled
    cout = cin if seed % 2 else max(32, lanes * int(rng.integers(2, 4)))
    h, w = int(rng.integers(4, 30)), int(rng.integers(4, 30))
    pads = [int(p) for p in rng.integers(0, 3, 4)]
    x = _randn(rng, int(rng.integers(1, 3)), cin, h, w)
    weight = _randn(rng, cout, cin, 3, 3) / np.float32(np.sqrt(9 * cin))
    model, feeds = single_op("Conv", {"x": x}, {"w": weight, "b": _randn(rng, cout)}, pads=pads)
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    algorithms = compiled.manifest["conv_algorithms"]
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    assert (len(algorithms["winograd"]) == 1) == (min(oh, ow) >= 4), algorithms
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(6))
def test_random_dilated_winograd_conv2d(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Dilated 3x3 convs as Winograd over the phases of their plane (DeepLab's atrous backbone):
    dilations of 2 to 4, different per axis, planes that no dilation or tile divides, pads other than
    the dilation, batches and a fused bias."""
    rng = np.random.default_rng(1700 + seed)
    lanes = parse_target("host").lanes()
    c = lanes * int(rng.integers(-(-32 // lanes), -(-32 // lanes) + 3))
    dh, dw = (int(d) for d in rng.integers(2, 5, 2)) if seed % 2 else (int(rng.integers(2, 5)),) * 2
    pads = (
        [dh, dw, dh, dw]
        if seed % 3
        else [int(rng.integers(0, 2 * dh + 1)), int(rng.integers(0, 2 * dw + 1)), dh, dw]
    )
    h, w = int(rng.integers(4 * dh, 4 * dh + 11)), int(rng.integers(4 * dw, 4 * dw + 11))
    x = _randn(rng, int(rng.integers(1, 3)), c, h, w)
    weight = _randn(rng, c, c, 3, 3) / np.float32(np.sqrt(9 * c))
    model, feeds = single_op(
        "Conv", {"x": x}, {"w": weight, "b": _randn(rng, c)}, pads=pads, dilations=[dh, dw]
    )
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    oh, ow = h + pads[0] + pads[2] - 2 * dh, w + pads[1] + pads[3] - 2 * dw
    phases_fit = min(-(-oh // dh), -(-ow // dw)) >= 4
    assert (len(compiled.manifest["conv_algorithms"]["winograd"]) == 1) == phases_fit, (oh, ow, dh, dw)
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize(("size", "dilation"), [(28, 4), (26, 4), (21, 3)])
def test_dilated_winograd_takes_4x4_tiles_on_phases_under_8(size: int, dilation: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """FCN's last stage: a 28x28 plane dilated by 4 is sixteen 7x7 phases sharing one transformed
    weight, where F(4x4)'s 2x2 tiles per phase (one row and column padded) do the fewest products;
    also phases of 6 or 7 rows that neither the dilation nor the tile divides."""
    rng = np.random.default_rng(size * dilation)
    c = 128
    x = _randn(rng, 1, c, size, size)
    weight = _randn(rng, c, c, 3, 3) / np.float32(np.sqrt(9 * c))
    model, feeds = single_op(
        "Conv", {"x": x}, {"w": weight, "b": _randn(rng, c)}, pads=[dilation] * 4, dilations=[dilation] * 2
    )
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    assert list(compiled.manifest["conv_algorithms"]["winograd"].values()) == ["F(4x4, 3x3)"]
    _check(model, feeds, tmp_path, opt_level=3)


def _conv3x3_truth(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """A padded 3x3 correlation in float64: the exact result the fp32 kernels round."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    h, w = x.shape[2:]
    return sum(  # type: ignore[no-any-return]
        np.einsum("oc,nchw->nohw", weight[:, :, i, j].astype(np.float64), xp[:, :, i : i + h, j : j + w])
        for i in range(3)
        for j in range(3)
    )


@pytest.mark.parametrize(("tile", "bound"), [(2, 1.0), (3, 1.2), (4, 1.4)])
def test_winograd_rounds_about_as_a_direct_conv(tile: int, bound: float, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Winograd's transforms add rounding of their own, which deep networks compound: the compiled
    F(4x4) conv (forced onto 64 channels) stays within 1.4x of the compiled direct conv's rms error
    against the float64 result, F(3x3) within 1.2x, F(2x2) within the direct conv's. The input is
    like a ReLU network's activations: non-negative and smooth along rows, so the transforms' sums
    cancel."""
    import compiler.graph.passes.conv_algorithm as conv_algorithm

    monkeypatch.setattr(conv_algorithm, "tile_for", lambda call: tile)
    rng = np.random.default_rng(77)
    c, size = 64, 16
    x = np.abs(rng.standard_normal((1, c, size, size)))
    x += np.abs(np.cumsum(rng.standard_normal((1, c, size, size)), axis=3)) / 4
    x = x.astype(np.float32)
    weight = _randn(rng, c, c, 3, 3) / np.float32(np.sqrt(9 * c))
    model, feeds = single_op("Conv", {"x": x}, {"w": weight}, pads=[1, 1, 1, 1])
    truth = _conv3x3_truth(x, weight)

    def rms_error(disabled: frozenset[str]) -> float:
        compiled = compile_model(model.SerializeToString(), CompileOptions(disabled_passes=disabled))
        winograd = compiled.manifest["conv_algorithms"]["winograd"]
        assert list(winograd.values()) == ([] if disabled else [f"F({tile}x{tile}, 3x3)"])
        path = tmp_path / f"{sorted(disabled)}.temper"
        compiled.save(path)
        (got,) = compiler.runtime.load(path).run(feeds).values()
        return float(np.sqrt(np.mean((got.astype(np.float64) - truth) ** 2)))

    winograd, direct = rms_error(frozenset()), rms_error(frozenset({"conv_algorithm"}))
    assert winograd <= bound * direct, (winograd, direct)


# tile_order is a decision of row tiles over the whole reduction only: a host whose defaults take
# plane tiles or chunked sums for the conv (both depend on its caches) would never reach it
ROW_TILES = {"plane_tile": False, "ic_chunk": 0}


class _Forced:
    """A decider taking the given values and every other decision's default."""

    def __init__(self, force: dict[str, Any]) -> None:
        self.force = force

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        return self.force.get(name, default)


@pytest.mark.parametrize(
    ("force", "tile", "batch"),
    [
        ({"chunk": 0}, 2, 1),  # a pass per step over the whole plane
        ({"chunk": 3}, 2, 1),  # chunks of 3 tiles: a tile row of 10 ends in a chunk of 1
        ({"chunk": 5, "pt": 2, "nb": 1}, 2, 1),  # register tiles of 2 in chunks of 5: a tile tail
        ({"chunk": 4, "parallel": False}, 2, 1),
        ({"chunk": 2}, 4, 1),
        ({"chunk": 0, "pt": 3}, 4, 1),
        ({"chunk": 4}, 3, 1),  # F(3x3): a tile row of 7 ends in a chunk of 3
        ({"chunk": 0}, 3, 1),
        ({"chunk": 5}, 4, 3),  # a batch: whole tile rows per chunk, as its default takes
        ({"chunk": 4}, 4, 2),  # a batch whose tile rows of 5 end in a chunk of 1
        ({"chunk": 0}, 4, 2),
    ],
)
def test_winograd_chunks_and_passes_match_onnxruntime(  # type: ignore[no-untyped-def]
    force: dict[str, Any], tile: int, batch: int, tmp_path
) -> None:
    """Either schedule of a Winograd conv (three passes over the plane, or all three steps per chunk
    of tiles with chunk-sized local buffers), with chunks and register tiles that do not divide the
    tile row, one image or a batch, forced through a per-node override, against onnxruntime."""
    rng = np.random.default_rng(11)
    c = {2: max(32, 2 * parse_target("host").lanes()), 3: 64, 4: 128}[tile]
    x = _randn(rng, batch, c, 19, 17 if tile == 4 else 20)
    weight = _randn(rng, c, c, 3, 3) / np.float32(np.sqrt(9 * c))
    model, feeds = single_op("Conv", {"x": x}, {"w": weight, "b": _randn(rng, c)}, pads=[1, 1, 1, 1])
    data = model.SerializeToString()
    plain = compile_model(data, CompileOptions())
    (kernel,) = [k for k in plain.kernels if k.workload.anchor_op == "conv2d_winograd_nchwc"]
    sch, rule = default_schedule(kernel.workload, _Forced(force))
    assert rule == "conv2d_winograd_nchwc"
    assert all(sch.decisions[k] == v for k, v in force.items()), sch.decisions
    choice = ScheduleChoice(sch.trace, {"source": "override", "inline": True})
    compiled = compile_model(data, CompileOptions(overrides={"node": choice}))  # single_op's node
    (pinned,) = [k for k in compiled.kernels if k.workload.anchor_op == "conv2d_winograd_nchwc"]
    assert pinned.trace.dumps() == sch.trace.dumps()
    assert compiled.manifest["conv_algorithms"]["winograd"] == {"node": f"F({tile}x{tile}, 3x3)"}
    path = tmp_path / "model.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run(feeds)
    for k, v in run_ort(model, feeds).items():
        np.testing.assert_allclose(got[k], v, atol=1e-4, rtol=1e-4, err_msg=k)


def _forced_conv(
    force: dict[str, Any], oc_blocks: int, hw: tuple[int, int], k: int, stride: int, seed: int
) -> tuple[Any, dict[str, np.ndarray], Any, Any, Any]:
    """A host-blocked conv (2 input blocks, `oc_blocks` output blocks, a bias) whose kernel's
    schedule takes `force` through a per-node override: (model, feeds, schedule, compiled, kernel)."""
    rng = np.random.default_rng(seed)
    lanes = parse_target("host").lanes()
    c, oc = 2 * lanes, oc_blocks * lanes
    x = _randn(rng, 1, c, *hw)
    weight = _randn(rng, oc, c, k, k) / np.float32(np.sqrt(k * k * c))
    model, feeds = single_op(
        "Conv", {"x": x}, {"w": weight, "b": _randn(rng, oc)}, pads=[k // 2] * 4, strides=[stride, stride]
    )
    data = model.SerializeToString()
    plain = compile_model(data, CompileOptions(disabled_passes=frozenset({"conv_algorithm"})))
    (kernel,) = [k for k in plain.kernels if k.workload.anchor_op == "conv2d_nchwc"]
    sch, rule = default_schedule(kernel.workload, _Forced(force))
    assert rule == "conv2d_nchwc" and all(sch.decisions[k] == v for k, v in force.items()), sch.decisions
    choice = ScheduleChoice(sch.trace, {"source": "override"})
    options = CompileOptions(overrides={"node": choice}, disabled_passes=frozenset({"conv_algorithm"}))
    compiled = compile_model(data, options)
    (pinned,) = [k for k in compiled.kernels if "node" in k.workload.nodes]
    return model, feeds, sch, compiled, pinned


def _matches_ort(model: Any, feeds: dict[str, np.ndarray], compiled: Any, tmp_path: Any) -> None:
    path = tmp_path / "model.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run(feeds)
    for name, want in run_ort(model, feeds).items():
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize(
    ("force", "k", "stride"),
    [
        ({"nb": 2, "owt": 5}, 3, 1),  # two blocks: the weights interleaved per tile, a column tail
        ({"nb": 4, "owt": 3, "unroll_ci": True}, 1, 2),
        ({"nb": 1, "owt": 6, "unroll_ci": True, "tile_order": "oh_oc_ow", **ROW_TILES}, 3, 2),
        ({"nb": 1, "owt": 7, "unroll_ci": False}, 2, 2),  # a two-column window (ConvNeXt's downsampling)
        ({"nb": 2, "owt": 4, "tile_order": "oh_oc_ow", **ROW_TILES}, 5, 1),
        ({"nb": 2, "owt": 5, "ic_chunk": 1}, 3, 1),  # the reduction in two chunks: partial sums kept
        ({"nb": 1, "owt": 4, "ic_chunk": 1}, 1, 2),
        ({"plane_tile": True, "nb": 2, "owt": 5}, 3, 1),  # tiles over the plane, across row ends
        ({"plane_tile": True, "nb": 1, "owt": 7}, 3, 2),
        ({"plane_tile": True, "nb": 4, "owt": 3}, 1, 2),
        ({"plane_tile": True, "nb": 2, "owt": 5, "ic_chunk": 1}, 3, 1),  # plane tiles, chunked sums
        ({"plane_tile": True, "nb": 1, "owt": 6, "ic_chunk": 1}, 3, 2),
    ],
)
def test_blocked_conv_register_tiles_match_onnxruntime(  # type: ignore[no-untyped-def]
    force: dict[str, Any], k: int, stride: int, tmp_path
) -> None:
    """block_tile's register tiles forced through a per-node override, whichever the host's default
    is (one block on AVX-512, several on AVX2): tiles of several channel blocks read weights packed
    per tile, unrolled input lanes, either tile order, the reduction in chunks of input channel
    blocks, tiles running over the plane with its rows back to back, against onnxruntime."""
    model, feeds, _, compiled, pinned = _forced_conv(force, 4, (17, 19), k, stride, seed=21)
    packed = dict(pinned.flat.layouts)
    assert (len(packed) == 1) == (force["nb"] > 1)  # the weight, packed per tile of several blocks
    _matches_ort(model, feeds, compiled, tmp_path)


@pytest.mark.parametrize(
    ("force", "k", "stride"),
    [
        ({}, 1, 1),  # the default: a tile of several blocks, the last group padded
        ({"nb": 3, "owt": 4}, 3, 1),
        ({"nb": 2, "owt": 5, "tile_order": "oh_oc_ow", **ROW_TILES}, 3, 2),
        ({"nb": 4, "owt": 3, "ic_chunk": 1}, 1, 1),  # chunked sums over a padded last group
        ({"plane_tile": True, "nb": 3, "owt": 5}, 3, 1),
        ({"plane_tile": True, "nb": 2, "owt": 4, "ic_chunk": 1}, 3, 2),
    ],
)
def test_blocked_conv_tiles_over_padded_blocks_match_onnxruntime(  # type: ignore[no-untyped-def]
    force: dict[str, Any], k: int, stride: int, tmp_path
) -> None:
    """Five channel blocks, a count no tile of 2-4 blocks divides: the tiles run over groups whose
    last one computes missing blocks on zero weights. The conv's accumulators take no guard (only
    the epilogue's stores to the output do), and the result matches onnxruntime."""
    from compiler.tir.ir import IfThenElse, Store, walk_stmts
    from compiler.tir.printer import expr_str

    model, feeds, sch, compiled, pinned = _forced_conv(force, 5, (13, 15), k, stride, seed=22)
    if sch.decisions["nb"] > 1:  # no guard on the blocks around an accumulator's update
        for g in walk_stmts(pinned.flat.body):
            if isinstance(g, IfThenElse) and any(
                isinstance(x, Store) and x.buffer.scope == "local" for x in walk_stmts(g.then)
            ):
                assert "ocb" not in expr_str(g.cond), expr_str(g.cond)
    _matches_ort(model, feeds, compiled, tmp_path)


@pytest.mark.parametrize(
    ("batch", "groups", "k", "stride", "hw"),
    [(2, 1, 3, 1, 9), (1, 2, 3, 1, 11), (2, 2, 1, 2, 13), (3, 1, 5, 1, 7)],
)
def test_plane_tiles_of_batched_and_grouped_convs_match_onnxruntime(  # type: ignore[no-untyped-def]
    batch: int, groups: int, k: int, stride: int, hw: int, tmp_path
) -> None:
    """Register tiles over the plane (plane_tile) forced on batched and grouped convs: the parallel
    loop runs over images and channel groups, the tiles cross the rows' ends (a tile tail on the
    plane's last columns), against onnxruntime."""
    rng = np.random.default_rng(batch * 100 + groups * 10 + k)
    lanes = parse_target("host").lanes()
    c, oc = 2 * lanes * groups, 4 * lanes
    x = _randn(rng, batch, c, hw, hw + 2)
    weight = _randn(rng, oc, c // groups, k, k) / np.float32(np.sqrt(k * k * c))
    model, feeds = single_op(
        "Conv",
        {"x": x},
        {"w": weight, "b": _randn(rng, oc)},
        pads=[k // 2] * 4,
        strides=[stride, stride],
        group=groups,
    )
    data = model.SerializeToString()
    direct = frozenset({"conv_algorithm"})
    plain = compile_model(data, CompileOptions(disabled_passes=direct))
    (kernel,) = [q for q in plain.kernels if q.workload.anchor_op == "conv2d_nchwc"]
    sch, _ = default_schedule(kernel.workload, _Forced({"plane_tile": True, "nb": 2, "owt": 5}))
    assert sch.decisions["plane_tile"] is True, sch.decisions
    choice = ScheduleChoice(sch.trace, {"source": "override"})
    compiled = compile_model(data, CompileOptions(overrides={"node": choice}, disabled_passes=direct))
    path = tmp_path / "model.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run(feeds)
    for name, want in run_ort(model, feeds).items():
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize(
    ("pad_at", "stride", "k", "hw"),
    [("row", 1, 3, 23), ("row", 2, 3, 30), ("row", 2, 5, 17), ("kernel", 2, 3, 30), ("row", 1, 7, 12)],
)
def test_blocked_depthwise_padded_per_row_or_as_a_pass_matches_onnxruntime(  # type: ignore[no-untyped-def]
    pad_at: str, stride: int, k: int, hw: int, tmp_path
) -> None:
    """A blocked depthwise conv's padded input made per output row in a local buffer (the window's
    rows of one channel block), or as a pass of its own, forced through a per-node override: odd
    planes, strides 1 and 2, kernels 3-7, channels padded to whole blocks."""
    rng = np.random.default_rng(31 + k)
    c = parse_target("host").lanes() * 2 + 3
    x = _randn(rng, 1, c, hw, hw)
    model, feeds = single_op(
        "Conv",
        {"x": x},
        {"w": _randn(rng, c, 1, k, k), "b": _randn(rng, c)},
        strides=[stride, stride],
        pads=[k // 2] * 4,
        group=c,
    )
    data = _then_pointwise(model, rng).SerializeToString()
    plain = compile_model(data, CompileOptions())
    (kernel,) = [k for k in plain.kernels if "node" in k.workload.nodes]
    sch, rule = default_schedule(kernel.workload, _Forced({"pad_at": pad_at}))
    assert rule == "conv2d_nchwc" and sch.decisions["pad_at"] == pad_at
    assert ('"compute_at"' in sch.trace.dumps()) == (pad_at == "row")
    choice = ScheduleChoice(sch.trace, {"source": "override"})
    compiled = compile_model(data, CompileOptions(overrides={"node": choice}))
    (pinned,) = [k for k in compiled.kernels if "node" in k.workload.nodes]
    assert pinned.trace.dumps() == sch.trace.dumps()
    path = tmp_path / "model.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run(feeds)
    for name, want in run_ort(model, feeds).items():
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize(
    ("pad_at", "k", "stride", "pads", "ceil", "hw"),
    [
        ("row", 3, 2, 1, 0, 21),
        ("row", 3, 2, 1, 1, 20),  # ceil mode: a last window past the bottom and right pads
        ("row", 2, 1, 1, 0, 13),
        ("kernel", 3, 2, 1, 1, 20),
        ("row", 5, 3, 2, 0, 26),
    ],
)
def test_blocked_max_pool_padded_per_row_or_as_a_pass_matches_onnxruntime(  # type: ignore[no-untyped-def]
    pad_at: str, k: int, stride: int, pads: int, ceil: int, hw: int, tmp_path
) -> None:
    """A max pool in the blocked layout (after a conv) with its -inf padded input made per output
    row or as a pass of its own, forced through a per-node override, against onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(41 + k)
    c = 2 * parse_target("host").lanes()  # whole channel blocks: the layout pass blocks the chain
    x = _randn(rng, 1, 3, hw, hw)
    span = hw + 2 * pads - k
    out = (-(-span // stride) if ceil else span // stride) + 1
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node(
            "MaxPool", ["y"], ["z"], kernel_shape=[k, k], strides=[stride, stride], pads=[pads] * 4,
            ceil_mode=ceil, name="pool",
        ),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "conv_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, out, out])],
        [numpy_helper.from_array(_randn(rng, c, 3, 3, 3), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    plain = compile_model(data, CompileOptions())
    (kernel,) = [k for k in plain.kernels if k.workload.anchor_op == "max_pool2d"]
    sch, rule = default_schedule(kernel.workload, _Forced({"pad_at": pad_at}))
    assert rule == "max_pool2d" and sch.decisions["pad_at"] == pad_at  # only the blocked layout decides it
    assert ('"compute_at"' in sch.trace.dumps()) == (pad_at == "row")
    choice = ScheduleChoice(sch.trace, {"source": "override"})
    compiled = compile_model(data, CompileOptions(overrides={"pool": choice}))
    (pinned,) = [k for k in compiled.kernels if k.workload.anchor_op == "max_pool2d"]
    assert pinned.trace.dumps() == sch.trace.dumps()
    path = tmp_path / "model.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run({"x": x})
    for name, want in run_ort(model, {"x": x}).items():
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize(("stride", "k", "hw"), [(1, 3, 13), (2, 3, 14), (1, 1, 9)])
def test_half_block_groups_run_blocked_and_match_onnxruntime(stride: int, k: int, hw: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Groups of half a vector of channels (RegNet's 8 on a 16-lane target) run as whole-block groups
    with block-diagonal weights: compiled for the host, against onnxruntime."""
    rng = np.random.default_rng(53 + k)
    cg = parse_target("host").lanes() // 2
    c, groups = 4 * cg, 4
    x = _randn(rng, 1, c, hw, hw)
    weight = _randn(rng, c, cg, k, k) / np.float32(np.sqrt(cg * k * k))
    model, feeds = single_op(
        "Conv", {"x": x}, {"w": weight, "b": _randn(rng, c)}, strides=[stride, stride], pads=[k // 2] * 4,
        group=groups,
    )  # fmt: skip
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    assert [k.workload.anchor_op for k in compiled.kernels].count("conv2d_nchwc") == 1
    path = tmp_path / "model.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run(feeds)
    for name, want in run_ort(model, feeds).items():
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("activation", ["relu", "silu"])
def test_winograd_with_a_fused_epilogue_and_a_residual(activation: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The second activation is either a plain epilogue (relu) or a diamond (x * sigmoid(x))."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    c = max(32, 2 * parse_target("host").lanes())  # enough channels for Winograd on any vector width
    inits = [
        numpy_helper.from_array(_randn(rng, c, c, 3, 3) / np.float32(np.sqrt(9 * c)), f"w{k}") for k in (1, 2)
    ] + [numpy_helper.from_array(_randn(rng, c), f"b{k}") for k in (1, 2)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "x"], ["s"], name="residual"),
    ]
    if activation == "relu":
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu2"))
        last = {"relu2"}
    else:
        nodes += [
            helper.make_node("Sigmoid", ["s"], ["g"], name="gate"),
            helper.make_node("Mul", ["s", "g"], ["y"], name="silu"),
        ]
        last = {"gate", "silu"}
    shape = [1, c, 14, 9]
    g = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    assert set(compiled.manifest["conv_algorithms"]["winograd"]) == {"conv1", "conv2"}
    kernels = [k for k in compiled.manifest["kernels"] if "winograd" in k["name"]]
    assert [set(k["nodes"]) for k in kernels] == [{"conv1", "relu1"}, {"conv2", "residual", *last}]
    _check(model, {"x": _randn(rng, *shape)}, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(10))
def test_random_matmul(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(100 + seed)
    m, k, n = (int(rng.integers(1, 70)) for _ in range(3))
    batch_a = [int(rng.integers(1, 4))] if seed % 3 == 1 else []
    batch_b = [int(rng.choice([1, batch_a[0]]))] if batch_a and seed % 2 else []
    a = _randn(rng, *batch_a, m, k)
    b = _randn(rng, *batch_b, k, n)
    if seed % 2:  # constant right-hand side (packed at compile time)
        model, feeds = single_op("MatMul", {"a": a}, {"b": b})
    else:
        model, feeds = single_op("MatMul", {"a": a, "b": b})
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(6))
def test_random_attention_matmuls_with_odd_widths(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Attention's score matmul at sequence lengths no column tile divides (197 tokens, 199 frames):
    several rows per register tile, a partly empty last column tile and a shorter last row tile
    (matmul.tail_tile), over batch x heads, with a scale fused after it or a constant right side."""
    from onnx import TensorProto, helper

    from tests.compiler.frontend.onnx_check import make_model

    rng = np.random.default_rng(900 + seed)
    seq = int(rng.choice([131, 197, 199, 200, 257])) + int(rng.integers(0, 3))
    heads, dim = int(rng.integers(1, 4)), int(rng.choice([16, 32, 64]))
    q, k = _randn(rng, 1, heads, seq, dim), _randn(rng, 1, heads, dim, seq)
    if seed % 3 == 2:
        model, feeds = single_op("MatMul", {"q": q}, {"k": k})
    else:
        scale = np.array(1 / np.sqrt(dim), np.float32)
        nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]), helper.make_node("Mul", ["s", "c"], ["y"])]
        shapes = {"q": (TensorProto.FLOAT, list(q.shape)), "k": (TensorProto.FLOAT, list(k.shape))}
        model = make_model(nodes, shapes, ["y"], {"c": scale})
        feeds = {"q": q, "k": k}
    frontier = build_frontier(model.SerializeToString(), CompileOptions())
    matmuls = [k.workload for k in frontier.kernels if k.workload.anchor_op == "matmul"]
    (tile,) = [default_schedule(w)[0].decisions for w in matmuls]
    assert tile["mt"] > 1 or seq % tile["nt"] == 0, tile
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(8))
def test_random_pooling(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(200 + seed)
    k = int(rng.integers(1, 4))
    stride = int(rng.integers(1, 3))
    pad = int(rng.integers(0, k))
    x = _randn(rng, 1, int(rng.integers(1, 6)), int(rng.integers(k, 16)), int(rng.integers(k, 16)))
    op = "MaxPool" if seed % 2 else "AveragePool"
    extra = {"count_include_pad": int(seed % 4 == 0)} if op == "AveragePool" else {}
    model, feeds = single_op(
        op,
        {"x": x},
        kernel_shape=[k, k],
        strides=[stride, stride],
        pads=[pad] * 4,
        ceil_mode=int(seed % 3 == 0),
        **extra,
    )
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(8))
def test_random_blocked_pooling(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pool after a blocked conv slides its window over NCHW{lanes}c (padded lanes included)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1500 + seed)
    lanes = parse_target("host").lanes()
    channels = lanes * int(rng.integers(1, 3)) - int(rng.integers(0, 3))
    k, stride = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    pad = int(rng.integers(0, k))
    h, w = int(rng.integers(k, 16)), int(rng.integers(k, 20))
    op = "MaxPool" if seed % 2 else "AveragePool"
    extra = {"count_include_pad": int(seed % 4 == 0)} if op == "AveragePool" else {}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            op,
            ["c"],
            ["y"],
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad] * 4,
            ceil_mode=int(seed % 3 == 0),
            **extra,
        ),
    ]
    weight = numpy_helper.from_array(_randn(rng, channels, 3, 3, 3), "w")
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    pool = {"MaxPool": "max_pool2d", "AveragePool": "avg_pool2d"}[op]
    assert any(pool in k["name"] for k in compiled.manifest["kernels"])
    optimized = inspect_model(model.SerializeToString(), "optimized", CompileOptions())
    pool_line = next(line for line in optimized.splitlines() if "pool2d(" in line)
    assert re.search(r"f32\[(\d+, ){4}\d+\]", pool_line), pool_line  # the pool runs on NCHW{lanes}c
    _check(model, {"x": _randn(rng, 1, 3, h, w)}, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(8))
def test_random_softmax_and_reductions(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(300 + seed)
    rank = int(rng.integers(2, 5))
    x = _randn(rng, *(int(rng.integers(1, 9)) for _ in range(rank))) * 3
    axis = int(rng.integers(-rank, rank))
    kind = ["Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax"][seed % 5]
    if kind in ("Softmax", "LogSoftmax"):
        model, feeds = single_op(kind, {"x": x}, axis=axis)
    else:
        axes = np.array(sorted({axis % rank, int(rng.integers(0, rank))}), np.int64)
        model, feeds = single_op(kind, {"x": x}, {"axes": axes}, keepdims=int(seed % 2), opset=18)
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(7))
def test_random_long_row_reductions(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Reductions along rows long enough to run as vectors (several per step, the last one masked
    when the lanes do not divide the row): the lanes combined into each row's max, sum or moments
    must match onnxruntime, also with large values of either sign (softmax's max subtraction)."""
    rng = np.random.default_rng(900 + seed)
    kind = [
        "Softmax",
        "LogSoftmax",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceMean",
        "LayerNormalization",
    ][seed]
    rows, length = int(rng.integers(1, 40)), int(rng.integers(9, 400))
    x = _randn(rng, 2, rows, length) * np.float32(rng.choice([1.0, 30.0]))
    if kind in ("Softmax", "LogSoftmax"):
        model, feeds = single_op(kind, {"x": x}, axis=-1)
    elif kind == "LayerNormalization":
        scale, bias = _randn(rng, length), _randn(rng, length)
        model, feeds = single_op(kind, {"x": x}, {"scale": scale, "bias": bias}, axis=-1, epsilon=1e-5)
    else:
        axes = np.array([2], np.int64)
        model, feeds = single_op(kind, {"x": x}, {"axes": axes}, keepdims=int(seed % 2), opset=18)
    scheduled = inspect_model(model.SerializeToString(), "scheduled")
    assert re.search(r"_r\w* in vectorized", scheduled), scheduled  # the reduced loop runs as vectors
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(6))
def test_random_broadcasting_chain(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Broadcast shapes through a fused elementwise chain (Add -> Mul -> Relu)."""
    from onnx import TensorProto, helper

    from tests.compiler.frontend.onnx_check import make_model

    rng = np.random.default_rng(400 + seed)
    shape = [int(rng.integers(1, 7)) for _ in range(int(rng.integers(1, 5)))]
    other = [d if rng.random() < 0.5 else 1 for d in shape][int(rng.integers(0, len(shape))) :]
    a, b, c = _randn(rng, *shape), _randn(rng, *other), _randn(rng, *other[-1:] or [1])
    nodes = [
        helper.make_node("Add", ["a", "b"], ["t"]),
        helper.make_node("Mul", ["t", "c"], ["u"]),
        helper.make_node("Relu", ["u"], ["y"]),
    ]
    model = make_model(
        nodes,
        {
            "a": (TensorProto.FLOAT, shape),
            "b": (TensorProto.FLOAT, other),
            "c": (TensorProto.FLOAT, list(c.shape)),
        },
        ["y"],
    )
    _check(model, {"a": a, "b": b, "c": c}, tmp_path, opt_level=3)


@pytest.mark.parametrize("m,k,n", [(1, 300, 1000), (1, 37, 130), (2, 64, 33), (1, 2048, 17)])
def test_dense_layers_with_partial_column_tiles(m: int, k: int, n: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Single-row (batch 1) dense layers take wide register tiles whose last one is partial: the
    packed weight panels are zero-padded and the accumulation runs unguarded; outputs must not
    show it (the bias epilogue reads only real columns)."""
    rng = np.random.default_rng(m * 7 + k + n)
    x, w, bias = _randn(rng, m, k), _randn(rng, k, n) / np.float32(np.sqrt(k)), _randn(rng, n)
    model, feeds = single_op("Gemm", {"x": x}, {"w": w, "bias": bias})
    _check(model, feeds, tmp_path, opt_level=3)


@pytest.mark.parametrize("seed", range(8))
def test_random_diamond_epilogues(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """x * sigmoid(x), x * hardsigmoid(x) and erf-GELU after a conv (planar, blocked, depthwise) or a
    matmul: one kernel per anchor, matching onnxruntime."""
    from onnx import TensorProto, helper

    from tests.compiler.frontend.onnx_check import make_model

    rng = np.random.default_rng(700 + seed)
    act = ["silu", "hardswish", "gelu"][seed % 3]
    if seed % 4 == 3:
        m, k, n = (int(v) for v in rng.integers(1, 40, size=3))
        x, inits = _randn(rng, m, k), {"w": _randn(rng, k, n) / np.float32(np.sqrt(k))}
        nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="anchor")]
    else:
        c = int(rng.choice([3, 16, 24, 48]))
        groups = c if seed % 4 == 2 else 1
        oc = c if groups > 1 else int(rng.choice([8, 16, 40]))
        x = _randn(rng, 1, c, int(rng.integers(5, 20)), int(rng.integers(5, 20)))
        inits = {
            "w": _randn(rng, oc, c // groups, 3, 3) / np.float32(np.sqrt(9 * c / groups)),
            "b": _randn(rng, oc),
        }
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["a"], pads=[1] * 4, group=groups, name="anchor")]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", ["a"], ["g"]), helper.make_node("Mul", ["a", "g"], ["y"])]
    elif act == "hardswish":
        nodes += [
            helper.make_node("HardSigmoid", ["a"], ["g"], alpha=1 / 6),
            helper.make_node("Mul", ["a", "g"], ["y"]),
        ]
    else:
        inits |= {"r2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
        nodes += [
            helper.make_node("Div", ["a", "r2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["p"]),
            helper.make_node("Mul", ["a", "p"], ["q"]),
            helper.make_node("Mul", ["q", "half"], ["y"]),
        ]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, list(x.shape))}, ["y"], inits)
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    anchored = [k for k in compiled.manifest["kernels"] if "anchor" in k["nodes"]]
    assert len(anchored) == 1 and len(set(anchored[0]["nodes"])) == len(nodes), anchored
    _check(model, {"x": x}, tmp_path, opt_level=3)
