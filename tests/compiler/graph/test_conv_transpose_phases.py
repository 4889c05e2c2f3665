"""conv_transpose_phases: transposed convs as ordinary convs over their output phases, interleaved
and cropped; equal to the transposed conv for every stride, dilation, group count, pad and output
padding, compiled as well as interpreted; the transposed convs it keeps say why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.explain import explain_model
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Const, Graph
from compiler.graph.passes.conv_transpose_phases import conv_transpose_to_conv, why_kept
from compiler.graph.verify import verify_graph
from compiler.ops.conv_transpose import conv_transpose_out_size
from compiler.pipeline import CompileOptions, compile_model
from compiler.runtime import load
from tests.compiler.frontend.onnx_check import run_ort
from tests.compiler.graph.graph_builders import call, const, feeds, graph, var


def _ops(g: Graph) -> list[str]:
    return [c.op for c in g.calls()]


def _random_attrs(rng: np.random.Generator) -> dict[str, Any] | None:
    """A random transposed conv's shapes and attributes (None when ONNX's rules refuse them)."""
    groups = int(rng.choice([1, 1, 2, 3]))
    kernel = tuple(int(k) for k in rng.integers(1, 6, 2))
    strides = tuple(int(s) for s in rng.integers(1, 4, 2))
    dilations = tuple(int(d) for d in rng.choice([1, 1, 2, 3], 2))
    padding = tuple(int(rng.integers(0, max(s, d))) for s, d in zip(strides, dilations, strict=True))
    return {
        "cin": groups * int(rng.integers(1, 4)),
        "ocg": int(rng.integers(1, 4)),
        "size": tuple(int(v) for v in rng.integers(1, 7, 2)),
        "kernel": kernel,
        "attrs": {
            "strides": strides,
            "pads": tuple(int(p) for p in rng.integers(0, 5, 4)),
            "dilations": dilations,
            "groups": groups,
            "output_padding": padding,
        },
    }


def test_random_transposed_convs_equal_their_phase_convs() -> None:
    rng = np.random.default_rng(0)
    rewritten = 0
    for _ in range(300):
        spec = _random_attrs(rng)
        assert spec is not None
        x = var("x", 2, spec["cin"], *spec["size"])
        w = const("w", spec["cin"], spec["ocg"], *spec["kernel"])
        try:
            before = graph([x], call("conv_transpose2d", x, w, name="up", **spec["attrs"]))
        except Exception:  # an output of no pixels: not a model ONNX admits
            continue
        after = conv_transpose_to_conv(before)
        verify_graph(after)
        if why_kept(before.calls()[0]) is not None:
            assert _ops(after) == ["conv_transpose2d"]
            continue
        rewritten += 1
        assert "conv_transpose2d" not in _ops(after) and "conv2d" in _ops(after)
        x_feed = feeds(before)
        np.testing.assert_allclose(
            run_graph(after, x_feed)["out0"],
            run_graph(before, x_feed)["out0"],
            rtol=1e-4,
            atol=1e-4,
            err_msg=str(spec),
        )
    assert rewritten > 200


def test_stride_two_becomes_one_conv_of_every_phase_interleaved_and_cropped() -> None:
    """The 4x4 stride-2 pad-1 upsampling of GAN generators: 2x2 taps per phase, 4 phases per channel."""
    x = var("x", 1, 8, 5, 5)
    up = call(
        "conv_transpose2d",
        x,
        const("w", 8, 6, 4, 4),
        name="up",
        strides=(2, 2),
        pads=(1, 1, 1, 1),
        dilations=(1, 1),
        groups=1,
        output_padding=(0, 0),
    )
    after = conv_transpose_to_conv(graph([x], up))
    assert _ops(after) == ["conv2d", "reshape", "transpose", "reshape", "slice"]
    conv = after.calls()[0]
    assert conv.name == "up" and conv.args[1].type.shape == (24, 8, 2, 2)
    assert after.outputs[0].type.shape == (1, 6, 10, 10)


def test_stride_one_is_a_single_conv_with_the_kernel_flipped() -> None:
    x = var("x", 1, 3, 6, 6)
    w = const("w", 3, 4, 3, 3)
    up = call(
        "conv_transpose2d",
        x,
        w,
        strides=(1, 1),
        pads=(0, 0, 0, 0),
        dilations=(2, 2),
        groups=1,
        output_padding=(0, 0),
    )
    after = conv_transpose_to_conv(graph([x], up))
    assert _ops(after) == ["conv2d"]
    conv = after.calls()[0]
    assert conv.attr("dilations") == (2, 2) and conv.attr("pads") == (4, 4, 4, 4)
    assert isinstance(conv.args[1], Const)
    np.testing.assert_array_equal(conv.args[1].data, w.data.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])


def test_the_transposed_convs_it_keeps_say_why() -> None:
    x, w = var("x", 1, 4, 5, 5), var("w", 4, 2, 3, 3)
    runtime_weight = call(
        "conv_transpose2d",
        x,
        w,
        strides=(2, 2),
        pads=(0, 0, 0, 0),
        dilations=(1, 1),
        groups=1,
        output_padding=(0, 0),
    )
    assert "not a constant" in str(why_kept(runtime_weight))
    assert _ops(conv_transpose_to_conv(graph([x, w], runtime_weight))) == ["conv_transpose2d"]
    # along the width: two input columns, then two of output padding; the pads keep only the latter
    padded = var("r", 1, 2, 1, 2)
    cropped = call(
        "conv_transpose2d",
        padded,
        const("k", 2, 2, 1, 1),
        strides=(1, 1),
        pads=(0, 2, 0, 0),
        dilations=(1, 3),
        groups=1,
        output_padding=(0, 2),
    )
    assert "cut off all that its input writes" in str(why_kept(cropped))


def _conv_transpose_model(spec: dict[str, Any], seed: int) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    attrs = spec["attrs"]
    x = rng.standard_normal((1, spec["cin"], *spec["size"])).astype(np.float32)
    w = rng.standard_normal((spec["cin"], spec["ocg"], *spec["kernel"])).astype(np.float32)
    b = rng.standard_normal(spec["ocg"] * attrs["groups"]).astype(np.float32)
    pads, dilations = attrs["pads"], attrs["dilations"]
    out = [
        conv_transpose_out_size(
            spec["size"][a],
            spec["kernel"][a],
            attrs["strides"][a],
            pads[a],
            pads[a + 2],
            dilations[a],
            attrs["output_padding"][a],
        )
        for a in range(2)
    ]
    node = helper.make_node(
        "ConvTranspose",
        ["x", "w", "b"],
        ["y"],
        name="up",
        strides=list(attrs["strides"]),
        pads=list(attrs["pads"]),
        dilations=list(attrs["dilations"]),
        group=attrs["groups"],
        output_padding=list(attrs["output_padding"]),
    )
    g = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["z"], name="act")],
        "up",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, len(b), *out])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), {"x": x}


COMPILED = [
    # (input channels, output channels per group, size, kernel, strides, pads, dilations, groups,
    #  output_padding)
    (100, 64, (1, 1), (4, 4), (1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),  # a generator's first layer
    (64, 32, (4, 4), (4, 4), (2, 2), (1, 1, 1, 1), (1, 1), 1, (0, 0)),  # its upsampling
    (32, 16, (7, 5), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, (1, 1)),  # output_padding, odd kernel
    (32, 16, (6, 6), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 1, (0, 0)),  # a segmentation head's 2x
    (24, 4, (5, 6), (3, 5), (3, 2), (2, 1, 0, 3), (2, 1), 3, (1, 0)),  # grouped, dilated and strided
    (16, 1, (9, 9), (5, 5), (1, 1), (4, 4, 4, 4), (1, 1), 16, (0, 0)),  # depthwise, pads past the kernel
]


@pytest.mark.parametrize("case", COMPILED, ids=lambda c: f"k{c[3][0]}x{c[3][1]}s{c[4][0]}x{c[4][1]}g{c[7]}")
@pytest.mark.parametrize("disabled", [(), ("conv_transpose_phases",)], ids=["phases", "gather"])
def test_compiled_conv_transposes_match_onnxruntime(
    case: tuple[Any, ...], disabled: tuple[str, ...], tmp_path: Path
) -> None:
    cin, ocg, size, kernel, strides, pads, dilations, groups, padding = case
    spec = {"cin": cin, "ocg": ocg, "size": size, "kernel": kernel}
    spec["attrs"] = {
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "groups": groups,
        "output_padding": padding,
    }
    model, inputs = _conv_transpose_model(spec, seed=len(tmp_path.name))
    compiled = compile_model(model, CompileOptions(opt_level=3, disabled_passes=frozenset(disabled)))
    kernels = [k["name"] for k in compiled.manifest["kernels"]]
    assert any("conv_transpose2d" in name for name in kernels) == bool(disabled), kernels
    compiled.save(tmp_path / "up.temper")
    (got,) = load(tmp_path / "up.temper").run(inputs).values()
    (want,) = run_ort(_onnx(model), inputs).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _onnx(model: bytes) -> Any:
    import onnx

    return onnx.load_from_string(model)


def test_explain_says_what_became_of_a_transposed_conv() -> None:
    spec = {"cin": 8, "ocg": 4, "size": (4, 4), "kernel": (4, 4)}
    spec["attrs"] = {
        "strides": (2, 2),
        "pads": (1, 1, 1, 1),
        "dilations": (1, 1),
        "groups": 1,
        "output_padding": (0, 0),
    }
    model, _ = _conv_transpose_model(spec, seed=0)
    conv = next(k for k in explain_model(model).kernels if any(n.node == "up" for n in k.nodes))
    assert "conv_transpose_phases: runs as a conv (2x2 output phases, 2x2 taps each)" in conv.why
    assert (
        "conv_transpose_phases: add/conv_transpose2d -> add/conv2d" in conv.passes
    )  # the bias add: "up" too
    assert "conv2d (by conv_transpose_phases)" in conv.implementations


def test_a_stride_far_beyond_the_kernel_keeps_the_gather_form() -> None:
    """A hostile stride would make the phases' mostly-zero filters grow as its square: refused with
    the reason, the gather form kept (its own output is bounded by the frontend)."""
    x = var("x", 1, 2, 1, 1)
    up = call(
        "conv_transpose2d",
        x,
        const("w", 2, 3, 1, 1),
        strides=(100000, 100000),
        pads=(0, 0, 0, 0),
        dilations=(1, 1),
        groups=1,
        output_padding=(0, 0),
    )
    assert "far beyond its kernel" in str(why_kept(up))
    assert _ops(conv_transpose_to_conv(graph([x], up))) == ["conv_transpose2d"]
