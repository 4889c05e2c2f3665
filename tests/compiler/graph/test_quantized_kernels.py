"""The quantized_kernels pass: which blocked convs of a QDQ model run on the 8-bit integer kernel, why
the others stay float, and that the integer conv computes the quantized model's result (interpreted
on any host; compiled against onnxruntime: with VNNI on a host that has it, with AVX2's vpmaddubsw
for 7-bit weights on every x86 host of AVX2, and with vpmaddwd over int16 for 8-bit weights there,
against the float graph)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.runtime
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Call, Graph
from compiler.graph.passes.conv_algorithm import flops_bar, why_direct
from compiler.graph.passes.quantized_kernels import (
    INTEGER_CONV,
    NO_INSTRUCTION,
    WIDENED_BAR_FACTOR,
    WIDENED_CONV,
    WINDOW_STAYS_FLOAT,
    IntegerPlan,
    integer_kernels,
    integer_plans,
    plan_for,
    verdict,
    weight_grid,
    why_float,
    winograd_beats_widened,
)
from compiler.ops.conv2d_int8 import OP, PAIRS_FIT, pack_weight_u8s8, unpack_weight_u8s8, weight_pairs_fit
from compiler.ops.matmul_int8 import OP as MATMUL
from compiler.ops.matmul_int8 import pack_matmul_u8s8, unpack_matmul_u8s8
from compiler.ops.registry import get
from compiler.pipeline import Build, CompileOptions, compile_model, inspect_model, run_stages
from compiler.target import host_target, parse_target
from compiler.tensor_type import TensorType
from tests.compiler.frontend.onnx_check import run_ort

OUT_SCALE = 0.015
HOST_DOT = host_target().dot_instructions.get(host_target().lanes("float32"))
HAS_VNNI = HOST_DOT == "vpdpbusd"
VNNI = "vpdpbusd"
# a named AVX2 CPU: no VNNI by its name, so vpmaddubsw (its code runs on any AVX2 host)
AVX2 = "x86-64-v3"
AVX2_BAR = flops_bar(parse_target(AVX2))  # the FLOPs Winograd must save per weight byte there
HAS_AVX2 = "avx2" in host_target().required_features
ORT_SATURATES = "no VNNI on this host: onnxruntime sums 8-bit weights' pairs with saturation here"


def _qdq_conv(
    c: int = 32,
    oc: int = 48,
    hw: int = 10,
    k: int = 3,
    stride: int = 1,
    *,
    activation: int = TensorProto.UINT8,
    per_channel: bool = True,
    group: int = 1,
    float_weight: bool = False,
    weight_bits: int = 8,
    seed: int = 0,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> Q/DQ -> Conv (int8 weight behind a DequantizeLinear) -> Relu -> Q/DQ, as onnxruntime's
    static quantization writes it; padded by k // 2, where the padding stands for a quantized 0.
    `weight_bits` 7 is onnxruntime's reduce_range."""
    rng = np.random.default_rng(seed)
    zero = np.array(131, np.uint8) if activation == TensorProto.UINT8 else np.array(-5, np.int8)
    half = 1 << (weight_bits - 1)
    w = rng.integers(-half, half, (oc, c // group, k, k)).astype(np.int8)
    w_scale = (rng.uniform(5e-4, 2e-3, oc) if per_channel else np.array(1e-3)).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "s_in"),
        numpy_helper.from_array(zero, "z_in"),
        numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32) * 0.1, "b"),
        numpy_helper.from_array(np.array(OUT_SCALE, np.float32), "s_out"),
        numpy_helper.from_array(zero, "z_out"),
    ]
    if float_weight:
        inits.append(numpy_helper.from_array(rng.standard_normal(w.shape).astype(np.float32) * 0.05, "w"))
        weight_nodes = []
    else:
        inits += [
            numpy_helper.from_array(w, "w_q"),
            numpy_helper.from_array(w_scale, "w_s"),
            numpy_helper.from_array(np.zeros(w_scale.shape, np.int8), "w_z"),
        ]
        dequantize = helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], name="dq_w", axis=0)
        weight_nodes = [dequantize]
    out = (hw + 2 * (k // 2) - k) // stride + 1
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"], name="dq_in"),
        *weight_nodes,
        helper.make_node(
            "Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[k // 2] * 4, strides=[stride] * 2, group=group
        ),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "s_out", "z_out"], ["rq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["rq", "s_out", "z_out"], ["y"], name="dq_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, out, out])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": (rng.standard_normal((1, c, hw, hw)) * 1.5).astype(np.float32)}


CASES = {
    "uint8_per_channel_3x3": {},
    "int8_per_tensor_3x3": {"activation": TensorProto.INT8, "per_channel": False},
    "strided_1x1": {"c": 64, "oc": 40, "hw": 15, "k": 1, "stride": 2},
    "strided_3x3_odd": {"c": 16, "oc": 24, "hw": 9, "stride": 2},
    "wide_5x5": {"c": 48, "oc": 16, "hw": 7, "k": 5},
    "padded_channels": {"c": 20, "oc": 36, "hw": 6},  # blocks padded with zeros, bytes as well
    "first_conv_3_channels": {"c": 3, "oc": 32, "hw": 16, "k": 7, "stride": 2},  # blocked by 4 instead
}


def _before_pass(model: onnx.ModelProto) -> Graph:
    """The model's graph as the quantized_kernels pass receives it (after alter_layout), for this host."""
    b = run_stages(Build.start(model.SerializeToString(), CompileOptions(opt_level=3)), until="optimized")
    names = [name for name, _ in b.after_pass]
    return b.after_pass[names.index("quantized_kernels") - 1][1]


def _blocked_convs(graph: Graph) -> list[Call]:
    return [c for c in graph.calls() if c.op == "conv2d_nchwc"]


def _within_one_step(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= OUT_SCALE * 1.001
    assert np.mean(got == want) > 0.99


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_integer_conv_computes_what_the_float_conv_does(case: str) -> None:
    """Interpreted (numpy references of every op): the rewritten graph and the float graph give the
    same quantized outputs but for a rounding tie, on any host."""
    model, feeds = _qdq_conv(**CASES[case])  # type: ignore[arg-type]
    graph = _before_pass(model)
    rewritten = integer_kernels(graph, VNNI)
    assert [c.op for c in rewritten.calls() if c.op.startswith("conv2d")] == [OP]
    (want,) = run_graph(graph, feeds).values()
    (got,) = run_graph(rewritten, feeds).values()
    _within_one_step(np.asarray(got), np.asarray(want))


@pytest.mark.skipif(not HAS_VNNI, reason=ORT_SATURATES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_qdq_conv_compiles_to_the_integer_kernel_and_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    model, feeds = _qdq_conv(**CASES[case])  # type: ignore[arg-type]
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3))
    assert any(k["name"].startswith(f"fused_{OP}") for k in compiled.manifest["kernels"])
    compiled.save(tmp_path / "q.temper")
    (got,) = compiler.runtime.load(tmp_path / "q.temper").run(feeds).values()
    (want,) = run_ort(model, feeds).values()
    _within_one_step(got, want)
    steps = got / np.float32(OUT_SCALE)  # every output on the output grid
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)


def _residual_block(c: int = 32, hw: int = 8) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Two QDQ convs and a residual add reading the first one's quantized output through its own
    DequantizeLinear, as onnxruntime writes a ResNet block; int8 activations (a grid shifted onto
    uint8 for the integer conv)."""
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(np.array(s, np.float32), f"s{i}") for i, s in enumerate((0.03, 0.02, 0.025))
    ]
    inits += [numpy_helper.from_array(np.array(z, np.int8), f"z{i}") for i, z in enumerate((-3, 0, 4))]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["q0"], name="q0"),
        helper.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["d0"], name="d0"),
    ]
    for i in (1, 2):
        inits += [
            numpy_helper.from_array(rng.integers(-128, 128, (c, c, 3, 3)).astype(np.int8), f"w{i}q"),
            numpy_helper.from_array(rng.uniform(5e-4, 2e-3, c).astype(np.float32), f"w{i}s"),
            numpy_helper.from_array(np.zeros(c, np.int8), f"w{i}z"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", [f"w{i}q", f"w{i}s", f"w{i}z"], [f"w{i}"], axis=0))
    nodes += [
        helper.make_node("Conv", ["d0", "w1"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("QuantizeLinear", ["r1", "s1", "z1"], ["q1"], name="q1"),
        helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"], name="d1"),
        helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1_skip"], name="d1_skip"),
        helper.make_node("Conv", ["d1", "w2"], ["c2"], name="conv2", pads=[1] * 4),
        helper.make_node("Add", ["c2", "d1_skip"], ["sum"], name="residual"),
        helper.make_node("Relu", ["sum"], ["r2"], name="relu2"),
        helper.make_node("QuantizeLinear", ["r2", "s2", "z2"], ["q2"], name="q2"),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"], name="d2"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": (rng.standard_normal((1, c, hw, hw)) * 1.5).astype(np.float32)}


def test_a_quantized_tensor_is_stored_once_as_bytes_for_every_reader() -> None:
    """The residual add reads the first conv's integers back from the bytes the second conv reads:
    each clip that feeds an integer conv has the byte cast as its only reader; the result is the
    float graph's but for a rounding tie."""
    model, feeds = _residual_block()
    graph = _before_pass(model)
    rewritten = integer_kernels(graph, VNNI)
    assert sum(c.op == OP for c in rewritten.calls()) == 2
    readers: dict[int, list[str]] = {}
    for c in rewritten.calls():
        for a in c.args:
            readers.setdefault(id(a), []).append(c.op)
    clips = [c for c in rewritten.calls() if c.op == "clip" and c.name in ("q0", "q1")]
    assert len(clips) == 2 and all(readers[id(c)] in (["cast"], ["add"]) for c in clips)
    (want,) = run_graph(graph, feeds).values()
    (got,) = run_graph(rewritten, feeds).values()
    steps = np.abs(np.asarray(got) - np.asarray(want)) / 0.025
    assert steps.max() <= 1.001 and np.mean(steps < 1e-3) > 0.99


@pytest.mark.skipif(not HAS_VNNI, reason=ORT_SATURATES)
def test_a_residual_block_compiles_and_matches_onnxruntime(tmp_path: Path) -> None:
    model, feeds = _residual_block()
    compile_model(model.SerializeToString(), CompileOptions(opt_level=3)).save(tmp_path / "b.temper")
    (got,) = compiler.runtime.load(tmp_path / "b.temper").run(feeds).values()
    (want,) = run_ort(model, feeds).values()
    steps = np.abs(got - want) / 0.025
    assert steps.max() <= 1.001 and np.mean(steps < 1e-3) > 0.98


def _qdq_matmul(
    k: int = 24, n: int = 40, *, per_column: bool = True, weight_bits: int = 8
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x [2, 5, k] -> Q/DQ -> MatMul (int8 weight [k, n] behind a DequantizeLinear, per column or per
    tensor) -> Add bias -> Q/DQ, as onnxruntime quantizes a transformer's projection."""
    rng = np.random.default_rng(9)
    half = 1 << (weight_bits - 1)
    w_scale = (rng.uniform(5e-4, 2e-3, n) if per_column else np.array(1e-3)).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "s_in"),
        numpy_helper.from_array(np.array(117, np.uint8), "z_in"),
        numpy_helper.from_array(rng.integers(-half, half, (k, n)).astype(np.int8), "w_q"),
        numpy_helper.from_array(w_scale, "w_s"),
        numpy_helper.from_array(np.zeros(w_scale.shape, np.int8), "w_z"),
        numpy_helper.from_array(rng.standard_normal(n).astype(np.float32) * 0.1, "b"),
        numpy_helper.from_array(np.array(OUT_SCALE, np.float32), "s_out"),
        numpy_helper.from_array(np.array(120, np.uint8), "z_out"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"], name="dq_in"),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], name="dq_w", axis=1),
        helper.make_node("MatMul", ["xd", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
        helper.make_node("QuantizeLinear", ["a", "s_out", "z_out"], ["aq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["aq", "s_out", "z_out"], ["y"], name="dq_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": (rng.standard_normal((2, 5, k)) * 1.5).astype(np.float32)}


@pytest.mark.parametrize("per_column", [True, False], ids=["per_column", "per_tensor"])
def test_the_integer_matmul_computes_what_the_float_matmul_does(per_column: bool, tmp_path: Path) -> None:
    model, feeds = _qdq_matmul(per_column=per_column)
    graph = _before_pass(model)
    rewritten = integer_kernels(graph, VNNI)
    assert [c.op for c in rewritten.calls() if c.op.startswith("matmul")] == [MATMUL]
    (want,) = run_graph(graph, feeds).values()
    (got,) = run_graph(rewritten, feeds).values()
    _within_one_step(np.asarray(got), np.asarray(want))
    if HAS_VNNI:
        compile_model(model.SerializeToString(), CompileOptions(opt_level=3)).save(tmp_path / "m.temper")
        (got,) = compiler.runtime.load(tmp_path / "m.temper").run(feeds).values()
        _within_one_step(got, run_ort(model, feeds)["y"])


def test_the_reasons_a_matmul_stays_float() -> None:
    (odd,) = [c for c in _before_pass(_qdq_matmul(k=22)[0]).calls() if c.op == "matmul"]
    assert "not a multiple of 4" in (why_float(odd, odd.args[0], VNNI) or "")
    x = odd.args[0]
    assert (
        why_float(Call("matmul", (x, x), (), odd.type, "attention"), x, VNNI)
        == "its weight is not a constant"
    )


def test_packed_matmul_weights_round_trip() -> None:
    w = np.random.default_rng(2).integers(-128, 128, (22, 7)).astype(np.int8)
    packed = pack_matmul_u8s8(w)
    assert packed.dtype == np.int32 and packed.shape == (6, 7)
    np.testing.assert_array_equal(unpack_matmul_u8s8(packed)[:22], w)
    assert not unpack_matmul_u8s8(packed)[22:].any()


def test_the_reasons_a_conv_stays_float() -> None:
    (quantized,) = _blocked_convs(_before_pass(_qdq_conv()[0]))
    assert why_float(quantized, quantized.args[0], VNNI) is None
    assert why_float(quantized, quantized.args[0], None) == NO_INSTRUCTION
    (floating,) = _blocked_convs(_before_pass(_qdq_conv(float_weight=True)[0]))
    assert "not on an 8-bit grid" in (why_float(floating, floating.args[0], VNNI) or "")
    (grouped,) = _blocked_convs(_before_pass(_qdq_conv(c=32, oc=32, group=2)[0]))
    assert "grouped" in (why_float(grouped, grouped.args[0], VNNI) or "")
    (first,) = _blocked_convs(_before_pass(_qdq_conv(c=3, oc=32)[0]))
    assert first.args[0].type.shape[4] == 3 and why_float(first, first.args[0], VNNI) is None


def test_a_float_models_convs_are_left_alone() -> None:
    """No quantized input: the pass changes nothing and gives the plain reason."""
    model, _ = _qdq_conv()
    plain = onnx.ModelProto()
    plain.CopyFrom(model)
    graph = plain.graph
    keep = [n for n in graph.node if n.name in ("dq_w", "conv", "relu")]
    del graph.node[:]
    graph.node.extend(keep)
    graph.node[1].input[0] = "x"
    graph.output[0].name = "r"
    before = _before_pass(plain)
    (conv,) = _blocked_convs(before)
    assert why_float(conv, conv.args[0], VNNI) == "its input is not a dequantized tensor"
    assert integer_kernels(before, VNNI).calls() == before.calls()


def test_explain_says_which_convs_run_on_integers() -> None:
    from compiler.explain import explain_model

    def why(model: onnx.ModelProto, target: str) -> list[str]:
        report = explain_model(model.SerializeToString(), CompileOptions(opt_level=3, target=target))
        (conv,) = [k for k in report.kernels if any(n.node == "conv" for n in k.nodes)]
        return conv.why

    window = {VNNI: INTEGER_CONV, "vpmaddubsw": f"stays float: {WINDOW_STAYS_FLOAT}"}
    window[None] = f"stays float: {NO_INSTRUCTION}"
    assert f"quantized_kernels: {window[HOST_DOT]}" in why(_qdq_conv()[0], "host")
    pointwise = _qdq_conv(**CASES["strided_1x1"])[0]  # type: ignore[arg-type]
    assert f"quantized_kernels: {WIDENED_CONV}" in why(pointwise, AVX2)
    assert f"quantized_kernels: {INTEGER_CONV}" in why(_qdq_conv(weight_bits=7)[0], AVX2)


def test_weights_on_a_per_channel_grid_are_found_and_others_are_not() -> None:
    rng = np.random.default_rng(3)
    ks = rng.integers(-128, 128, (6, 5, 3, 3))
    ks[1] *= 2  # a channel of even integers only: a coarser step fits as well
    ks[2] = 0  # an empty channel
    steps = rng.uniform(1e-4, 1e-2, 6)
    w = (ks * steps[:, None, None, None]).astype(np.float32)
    found = weight_grid(w)
    assert found is not None
    k, step = found
    assert k.dtype == np.int8 and step[2] == 0
    np.testing.assert_allclose(k * step[:, None, None, None], w, rtol=1e-5, atol=1e-9)
    assert weight_grid(rng.standard_normal((4, 3, 3, 3)).astype(np.float32)) is None
    broken = w.copy()
    broken[2, 0, 0, 0] = np.nan  # a NaN in an otherwise empty channel is not an empty channel
    assert weight_grid(broken) is None


def test_packed_weights_round_trip_and_the_op_checks_its_operands() -> None:
    rng = np.random.default_rng(4)
    w = rng.integers(-128, 128, (20, 12, 3, 3)).astype(np.int8)
    packed = pack_weight_u8s8(w, 8, 16)
    assert packed.dtype == np.int32 and packed.shape == (2, 2, 3, 3, 2, 16)
    np.testing.assert_array_equal(unpack_weight_u8s8(packed)[:20, :12], w)
    infer = get(OP).infer
    x = TensorType((1, 2, 5, 5, 8), "uint8")
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1, "x_zero": 3}
    assert infer([x, TensorType(packed.shape, "int32")], attrs) == TensorType((1, 2, 5, 5, 16), "int32")
    with pytest.raises(Exception, match="uint8"):
        infer([TensorType(x.shape, "float32"), TensorType(packed.shape, "int32")], attrs)
    with pytest.raises(Exception, match="do not match"):
        infer([TensorType((1, 2, 5, 5, 12), "uint8"), TensorType(packed.shape, "int32")], attrs)
    with pytest.raises(Exception, match="x_zero"):
        infer([x, TensorType(packed.shape, "int32")], {**attrs, "x_zero": 300})


def _on(target: str, model: onnx.ModelProto) -> Graph:
    """The model's optimized graph compiled for `target`."""
    options = CompileOptions(opt_level=3, target=target)
    return run_stages(Build.start(model.SerializeToString(), options), until="optimized").optimized


def test_weight_pairs_fit_where_no_pair_can_saturate_int16() -> None:
    fits = lambda *pair: weight_pairs_fit(np.array([pair], np.int8), 255)  # noqa: E731
    assert fits(64, 64) and fits(-64, -64) and fits(-128, 0) and fits(127, -128)
    assert not fits(127, 2)  # 255 * 129 > 32767
    assert not fits(-128, -1)  # -255 * 129 < -32768
    assert weight_pairs_fit(np.array([[127, 127, -128, -128]], np.int8), 127)  # a 7-bit input grid
    seven = np.random.default_rng(1).integers(-64, 64, (8, 3, 3, 30)).astype(np.int8)
    assert weight_pairs_fit(seven, 255)
    assert weight_pairs_fit(np.array([[100]], np.int8), 255)  # an odd reduction pairs its last with 0


def test_without_vnni_7_bit_weights_run_on_bytes_and_8_bit_weights_on_int16() -> None:
    seven = _on(AVX2, _qdq_conv(weight_bits=7)[0])
    (conv,) = [c for c in seven.calls() if c.op == OP]
    assert conv.attr(PAIRS_FIT) == 1 and conv.args[0].type.dtype == "uint8"
    pointwise = _qdq_conv(**CASES["strided_1x1"])[0]  # type: ignore[arg-type]
    (conv,) = [c for c in _on(AVX2, pointwise).calls() if c.op == OP]
    assert conv.attr(PAIRS_FIT, 0) == 0 and conv.args[0].type.dtype == "int16"
    (blocked,) = _blocked_convs(_before_pass_on(AVX2, pointwise))
    plan = plan_for(blocked, blocked.args[0], "vpmaddubsw")
    assert isinstance(plan, IntegerPlan) and plan.wide and verdict(plan) == WIDENED_CONV
    plan = plan_for(blocked, blocked.args[0], VNNI)
    assert isinstance(plan, IntegerPlan) and not plan.wide and verdict(plan) == INTEGER_CONV
    # a stride-1 3x3 conv of 8-bit weights that runs as Winograd stays float there, and says why
    assert not [c for c in _on(AVX2, _qdq_conv()[0]).calls() if c.op == OP]
    (window,) = _blocked_convs(_before_pass_on(AVX2, _qdq_conv()[0]))
    assert winograd_beats_widened(window, AVX2_BAR)
    assert why_float(window, window.args[0], "vpmaddubsw", AVX2_BAR) == WINDOW_STAYS_FLOAT
    assert why_float(window, window.args[0], VNNI) is None
    (matmul,) = [c for c in _on(AVX2, _qdq_matmul(weight_bits=7)[0]).calls() if c.op == MATMUL]
    assert matmul.attr(PAIRS_FIT) == 1
    (matmul,) = [c for c in _on(AVX2, _qdq_matmul()[0]).calls() if c.op == MATMUL]
    assert matmul.args[0].type.dtype == "int16"


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        ({"c": 16, "oc": 24, "hw": 12}, "fewer than 32 input or output channels"),
        ({"c": 48, "oc": 16, "hw": 7, "k": 5}, "its kernel is 5x5"),
        ({"c": 32, "oc": 32, "hw": 7}, "F(2x2) would save"),  # a small plane: few tiles per weight byte
    ],
)
def test_without_vnni_a_window_winograd_cannot_or_barely_speeds_up_runs_widened(
    shape: dict[str, int], why: str
) -> None:
    """Where Winograd does not run, or saves too little against the widened conv (conv_algorithm's
    rule at twice its bar), a stride-1 window of 8-bit weights runs on int16 without VNNI."""
    model = _qdq_conv(**shape)[0]  # type: ignore[arg-type]
    (window,) = _blocked_convs(_before_pass_on(AVX2, model))
    assert why in (why_direct(window, bar=WIDENED_BAR_FACTOR * AVX2_BAR) or "")
    assert not winograd_beats_widened(window, AVX2_BAR)
    plan = plan_for(window, window.args[0], "vpmaddubsw", AVX2_BAR)
    assert isinstance(plan, IntegerPlan) and plan.wide and verdict(plan) == WIDENED_CONV
    (conv,) = [c for c in _on(AVX2, model).calls() if c.op == OP]
    assert conv.args[0].type.dtype == "int16"
    # the rule follows the target's bar: at half of it, the small plane's F(2x2) beats the widened conv
    if why.startswith("F("):
        assert why_float(window, window.args[0], "vpmaddubsw", AVX2_BAR / 2) == WINDOW_STAYS_FLOAT


def _two_readers(seed: int = 8) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One quantized tensor read by two pointwise QDQ convs, one of 7-bit weights and one of 8-bit,
    summed."""
    rng = np.random.default_rng(seed)
    c = 16
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "s"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="d"),
    ]
    for name, half in (("seven", 64), ("eight", 128)):
        inits += [
            numpy_helper.from_array(rng.integers(-half, half, (c, c, 1, 1)).astype(np.int8), f"{name}_q"),
            numpy_helper.from_array(rng.uniform(5e-4, 2e-3, c).astype(np.float32), f"{name}_s"),
            numpy_helper.from_array(np.zeros(c, np.int8), f"{name}_z"),
        ]
        nodes += [
            helper.make_node(
                "DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_w"], axis=0
            ),
            helper.make_node("Conv", ["d", f"{name}_w"], [name], name=name),
        ]
    nodes.append(helper.make_node("Add", ["seven", "eight"], ["y"], name="sum"))
    graph = helper.make_graph(
        nodes,
        "two_readers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 6, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": (rng.standard_normal((1, c, 6, 6)) * 1.5).astype(np.float32)}


def test_a_tensor_read_widened_by_one_conv_is_stored_as_int16_for_both() -> None:
    """Its 7-bit conv alone would take bytes; its 8-bit sibling needs int16: stored once, as int16,
    and both convs read it so (explain says so for each)."""
    model, feeds = _two_readers()
    graph = _before_pass_on(AVX2, model)
    plans = integer_plans(graph, "vpmaddubsw")
    assert len(plans) == 2 and all(p.wide and not p.pairs_fit for p in plans.values())
    rewritten = integer_kernels(graph, "vpmaddubsw")
    casts = [c for c in rewritten.calls() if c.op == "cast" and c.attr("to") in ("uint8", "int16")]
    assert [c.attr("to") for c in casts] == ["int16"]
    assert [c.args[0].type.dtype for c in rewritten.calls() if c.op == OP] == ["int16", "int16"]
    (want,) = run_graph(graph, feeds).values()
    (got,) = run_graph(rewritten, feeds).values()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def _llvm_ir(target: str, model: onnx.ModelProto) -> str:
    options = CompileOptions(opt_level=3, target=target)
    b = run_stages(Build.start(model.SerializeToString(), options), until="llvm")
    assert b.library is not None
    return b.library.llvm_ir()


def _before_pass_on(target: str, model: onnx.ModelProto) -> Graph:
    options = CompileOptions(opt_level=3, target=target)
    b = run_stages(Build.start(model.SerializeToString(), options), until="optimized")
    names = [name for name, _ in b.after_pass]
    return b.after_pass[names.index("quantized_kernels") - 1][1]


@pytest.mark.skipif(not HAS_AVX2, reason="this host has no AVX2, which code for the AVX2 target needs")
@pytest.mark.parametrize(
    "case", ["uint8_per_channel_3x3", "int8_per_tensor_3x3", "strided_1x1", "padded_channels"]
)
def test_7_bit_weights_compile_to_vpmaddubsw_and_match_onnxruntime(case: str, tmp_path: Path) -> None:
    """An AVX2 CPU by name (no VNNI): the integer conv's step is vpmaddubsw, exact for these weights."""
    model, feeds = _qdq_conv(**CASES[case], weight_bits=7)  # type: ignore[arg-type]
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3, target=AVX2))
    assert any(k["name"].startswith(f"fused_{OP}") for k in compiled.manifest["kernels"])
    code = _llvm_ir(AVX2, model)
    assert "llvm.x86.avx2.pmadd.ub.sw" in code and "vpdpbusd" not in code
    compiled.save(tmp_path / "q.temper")
    (got,) = compiler.runtime.load(tmp_path / "q.temper").run(feeds).values()
    (want,) = run_ort(model, feeds).values()
    _within_one_step(got, want)


@pytest.mark.skipif(not HAS_AVX2, reason="this host has no AVX2, which code for the AVX2 target needs")
def test_a_7_bit_matmul_compiles_to_vpmaddubsw_and_matches_onnxruntime(tmp_path: Path) -> None:
    model, feeds = _qdq_matmul(weight_bits=7)
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3, target=AVX2))
    assert "llvm.x86.avx2.pmadd.ub.sw" in _llvm_ir(AVX2, model)
    compiled.save(tmp_path / "m.temper")
    (got,) = compiler.runtime.load(tmp_path / "m.temper").run(feeds).values()
    _within_one_step(got, run_ort(model, feeds)["y"])


def test_the_op_checks_its_pairs_fit_attribute() -> None:
    packed = pack_weight_u8s8(np.zeros((16, 8, 1, 1), np.int8), 8, 16)
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1, "x_zero": 0}
    x, w = TensorType((1, 1, 2, 2, 8), "uint8"), TensorType(packed.shape, "int32")
    get(OP).infer([x, w], {**attrs, PAIRS_FIT: 1})
    with pytest.raises(Exception, match=PAIRS_FIT):
        get(OP).infer([x, w], {**attrs, PAIRS_FIT: 2})


def _compiled_for_avx2(model: onnx.ModelProto, tmp_path: Path, **options: Any) -> tuple[dict[str, Any], Path]:
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3, target=AVX2, **options))
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.temper"
    compiled.save(path)
    return compiled.manifest, path


# the convs that run widened: those that do not run as Winograd (pointwise, strided, 5x5, fewer
# than 32 channels)
WINOGRAD = {"uint8_per_channel_3x3", "int8_per_tensor_3x3"}
WIDENED = {name: case for name, case in CASES.items() if name not in WINOGRAD}


@pytest.mark.skipif(not HAS_AVX2, reason="this host has no AVX2, which code for the AVX2 target needs")
@pytest.mark.parametrize("case", sorted(WIDENED))
def test_8_bit_weights_compile_to_vpmaddwd_and_give_the_float_graphs_result(
    case: str, tmp_path: Path
) -> None:
    """An AVX2 CPU by name, 8-bit weights: the integer conv reads int16 and steps by vpmaddwd, and gives
    what the same model compiled in float gives (onnxruntime on such a CPU sums with saturation, so
    the float graph is the reference here), every output on the output grid."""
    model, feeds = _qdq_conv(**WIDENED[case])  # type: ignore[arg-type]
    code = _llvm_ir(AVX2, model)
    assert "llvm.x86.avx2.pmadd.wd" in code and "pmadd.ub.sw" not in code and "vpdpbusd" not in code
    manifest, integer = _compiled_for_avx2(model, tmp_path)
    assert any(k["name"].startswith(f"fused_{OP}") for k in manifest["kernels"])
    _, floating = _compiled_for_avx2(model, tmp_path, disabled_passes={"quantized_kernels"})
    (got,) = compiler.runtime.load(integer).run(feeds).values()
    (want,) = compiler.runtime.load(floating).run(feeds).values()
    _within_one_step(got, want)
    (interpreted,) = run_graph(_before_pass_on(AVX2, model), feeds).values()
    _within_one_step(got, np.asarray(interpreted))
    steps = got / np.float32(OUT_SCALE)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)


@pytest.mark.skipif(not HAS_AVX2, reason="this host has no AVX2, which code for the AVX2 target needs")
def test_an_8_bit_matmul_and_a_shared_input_compile_to_vpmaddwd(tmp_path: Path) -> None:
    for model, feeds in (_qdq_matmul(), _two_readers()):
        assert "llvm.x86.avx2.pmadd.wd" in _llvm_ir(AVX2, model)
        _, integer = _compiled_for_avx2(model, tmp_path)
        _, floating = _compiled_for_avx2(model, tmp_path, disabled_passes={"quantized_kernels"})
        (got,) = compiler.runtime.load(integer).run(feeds).values()
        (want,) = compiler.runtime.load(floating).run(feeds).values()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_the_op_takes_int16_inputs_with_weights_packed_by_two() -> None:
    rng = np.random.default_rng(9)
    w = rng.integers(-128, 128, (20, 12, 3, 3)).astype(np.int8)
    packed = pack_weight_u8s8(w, 8, 16, width=2)
    assert packed.dtype == np.int32 and packed.shape == (2, 2, 3, 3, 4, 16)
    np.testing.assert_array_equal(unpack_weight_u8s8(packed, width=2)[:20, :12], w)
    rows = rng.integers(-128, 128, (22, 7)).astype(np.int8)
    np.testing.assert_array_equal(unpack_matmul_u8s8(pack_matmul_u8s8(rows, 2), 2), rows)
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1, "x_zero": 3}
    x, weight = TensorType((1, 2, 5, 5, 8), "int16"), TensorType(packed.shape, "int32")
    assert get(OP).infer([x, weight], attrs) == TensorType((1, 2, 5, 5, 16), "int32")
    with pytest.raises(Exception, match=PAIRS_FIT):
        get(OP).infer([x, weight], {**attrs, PAIRS_FIT: 1})
    with pytest.raises(Exception, match="do not match"):
        get(OP).infer([TensorType(x.shape, "uint8"), weight], attrs)  # bytes take weights packed by four
    x_bytes = rng.integers(0, 256, (1, 2, 5, 5, 8))
    sums = get(OP).reference([x_bytes.astype(np.int16), packed], attrs)
    by_four = pack_weight_u8s8(w, 8, 16)
    np.testing.assert_array_equal(sums, get(OP).reference([x_bytes.astype(np.uint8), by_four], attrs))


def _loops_stepping_by(asm: str, instruction: str) -> list[list[str]]:
    """The innermost loops of `asm` (a label and the backward branch to it) whose body issues
    `instruction`: each as its lines."""
    lines = asm.splitlines()
    loops = []
    for start, line in enumerate(lines):
        label = line.strip()
        if not (label.startswith(".LBB") and label.endswith(":")):
            continue
        target = label[:-1]
        for end in range(start + 1, len(lines)):
            words = lines[end].split()
            if len(words) == 2 and words[0].startswith("j") and words[1] == target:
                body = lines[start + 1 : end]
                inner = not any(b.strip().startswith(".LBB") and b.strip().endswith(":") for b in body)
                if inner and any(instruction in b for b in body):
                    loops.append(body)
                break
    return loops


@pytest.mark.parametrize(("c", "oc", "k", "stride"), [(256, 64, 1, 1), (128, 128, 3, 2)])
def test_the_widened_convs_step_keeps_its_register_tile_in_registers(
    c: int, oc: int, k: int, stride: int
) -> None:
    """On an AVX2 CPU without VNNI (Zen 3, 16 vector registers), the loop stepping a widened conv by
    vpmaddwd reads its inputs and weights and never the stack: its accumulators stay in registers
    (LLVM's X86 machine combiner, reassociating the vpaddd chain, spilled them every step)."""
    model, _ = _qdq_conv(c, oc, 14, k, stride)
    asm = inspect_model(model.SerializeToString(), "asm", CompileOptions(opt_level=3, target="znver3"))
    loops = _loops_stepping_by(asm, "vpmaddwd")
    assert loops, "no loop steps by vpmaddwd"
    for body in loops:
        assert not [line for line in body if "(%rsp)" in line], "\n".join(body)
