"""QDQ models: QuantizeLinear / DequantizeLinear computed in float32 with the rounding kept exactly,
compiled and run against onnxruntime and against ONNX's definition in numpy; what cannot stay in
float32 is refused up front."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import UnsupportedOpError
from compiler.frontend.onnx import load_onnx
from compiler.graph.ir import Const
from compiler.pipeline import CompileOptions, compile_model
from compiler.runtime import load
from tests.compiler.frontend.onnx_check import run_ort

RNG = np.random.default_rng(11)


def _quantize(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, low: int, high: int) -> np.ndarray:
    """ONNX's QuantizeLinear in float64: round half to even, then the zero point, saturated."""
    return np.clip(np.round(x.astype(np.float64) / scale) + zero, low, high)


def _qdq_conv_model(activation: int, per_channel: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> Q/DQ -> Conv (int8 weight behind a DequantizeLinear, per tensor or per output channel)
    -> Relu -> Q/DQ -> y, as onnxruntime's static quantization writes it."""
    zero_dtype = np.uint8 if activation == TensorProto.UINT8 else np.int8
    zero = np.array(128 if zero_dtype == np.uint8 else 3, zero_dtype)
    w = RNG.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    w_scale = (RNG.uniform(0.002, 0.01, 8) if per_channel else np.array(0.006)).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "s_in"),
        numpy_helper.from_array(zero, "z_in"),
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(w_scale, "w_s"),
        numpy_helper.from_array(np.zeros(w_scale.shape, np.int8), "w_z"),
        numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32) * 0.1, "b"),
        numpy_helper.from_array(np.array(0.015, np.float32), "s_out"),
        numpy_helper.from_array(zero, "z_out"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"], name="dq_in"),
        helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], name="dq_w", axis=0),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "s_out", "z_out"], ["rq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["rq", "s_out", "z_out"], ["y"], name="dq_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 9, 9])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)}


@pytest.mark.parametrize("activation", [TensorProto.UINT8, TensorProto.INT8], ids=["uint8", "int8"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_a_qdq_conv_compiles_and_keeps_the_rounding(
    activation: int, per_channel: bool, tmp_path: Path
) -> None:
    model, feeds = _qdq_conv_model(activation, per_channel)
    compile_model(model.SerializeToString(), CompileOptions(opt_level=3)).save(tmp_path / "qdq.temper")
    (got,) = load(tmp_path / "qdq.temper").run(feeds).values()
    (want,) = run_ort(model, feeds).values()
    scale_out = 0.015
    # onnxruntime runs the pair around the conv as one int8 kernel, which may round a tie the other way
    assert np.abs(got - want).max() <= scale_out * 1.001
    assert np.mean(got == want) > 0.99
    # every output is on the output grid: the rounding was kept, not smoothed away
    steps = got / np.float32(scale_out)
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)


def test_quantize_then_dequantize_is_onnxs_definition(tmp_path: Path) -> None:
    """Ties round to even, values past the grid saturate, a per-axis scale follows its axis."""
    x = np.concatenate([RNG.uniform(-40, 40, 60), [0.5, 1.5, 2.5, -0.5, -1.5, 1e6, -1e6, 0.0]]).astype(
        np.float32
    )
    x = np.resize(x, (2, 3, 12)).astype(np.float32)
    scale = np.array([0.5, 0.25, 1.0], np.float32)
    zero = np.array([0, 10, -5], np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q", axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))],
        [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compile_model(model.SerializeToString(), CompileOptions(opt_level=3)).save(tmp_path / "qdq.temper")
    (got,) = load(tmp_path / "qdq.temper").run({"x": x}).values()
    s, z = scale.reshape(1, 3, 1), zero.reshape(1, 3, 1).astype(np.float64)
    want = (_quantize(x, s, z, -128, 127) - z) * s
    np.testing.assert_array_equal(got, want.astype(np.float32))
    np.testing.assert_array_equal(got, next(iter(run_ort(model, {"x": x}).values())))


def _pair_model(consumer: str | None, scale_input: bool = False, zero_type: int = TensorProto.UINT8) -> bytes:
    """x -> QuantizeLinear -> (its integers to `consumer`, or to the graph's output when None)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    inits = [helper.make_tensor("z", zero_type, [], [0])]
    if scale_input:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, []))
    else:
        inits.append(numpy_helper.from_array(np.array(0.1, np.float32), "s"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="the_q")]
    out = helper.make_tensor_value_info("q", zero_type, [2, 3])
    if consumer is not None:
        nodes.append(helper.make_node(consumer, ["q", "q"], ["y"], name="after"))
        out = helper.make_tensor_value_info("y", zero_type, [2, 3])
    graph = helper.make_graph(nodes, "q", inputs, [out], inits)
    opset = 21 if zero_type == TensorProto.INT4 else 17
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (lambda: _pair_model(None), "integers are a graph output"),
        (lambda: _pair_model("Add"), "integers feed Add"),
        (lambda: _pair_model(None, scale_input=True), "scale computed at run time"),
        (lambda: _pair_model(None, zero_type=TensorProto.INT4), "QuantizeLinear to INT4"),
    ],
    ids=["graph_output", "integer_arithmetic", "runtime_scale", "int4"],
)
def test_what_cannot_stay_in_float32_is_refused_up_front(model: object, message: str) -> None:
    with pytest.raises(UnsupportedOpError, match=message) as info:
        load_onnx(model())  # type: ignore[operator]
    assert "the_q" in str(info.value)


def _compiled(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path) -> list[np.ndarray]:
    compile_model(model.SerializeToString(), CompileOptions(opt_level=3)).save(tmp_path / "m.temper")
    return list(load(tmp_path / "m.temper").run(feeds).values())


def _dynamic_matmul_model(k: int = 16, n: int = 8) -> onnx.ModelProto:
    """onnxruntime's dynamic quantization of x @ W: x quantized over its own range at run time, the
    integers multiplied exactly by the int8 weight, the int32 result scaled back. The weights are
    7-bit: on a CPU without VNNI onnxruntime sums pairs of u8 x s8 products in int16 with saturation
    (vpmaddubsw), which 8-bit weights overflow, so its result is the exact one only for these."""
    w = RNG.integers(-64, 64, (k, n)).astype(np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quant"),
        helper.make_node("MatMulInteger", ["q", "w", "z", "wz"], ["m"], name="matmul"),
        helper.make_node("Cast", ["m"], ["mf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["s", "ws"], ["sw"], name="scales"),
        helper.make_node("Mul", ["mf", "sw"], ["y"], name="scaled"),
    ]
    graph = helper.make_graph(
        nodes,
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, n])],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(np.array(0, np.int8), "wz"),
            numpy_helper.from_array(np.array(0.004, np.float32), "ws"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind", ["spread", "positive", "zeros"])
def test_a_dynamically_quantized_matmul_matches_onnxruntime(kind: str, tmp_path: Path) -> None:
    """The scale and zero point come from x's range widened to hold 0 (a range of zero: scale 0)."""
    x = RNG.standard_normal((3, 5, 16)).astype(np.float32) * 3
    if kind == "positive":
        x = np.abs(x) + 0.5
    elif kind == "zeros":
        x = np.zeros_like(x)
    model = _dynamic_matmul_model()
    (got,) = _compiled(model, {"x": x}, tmp_path)
    (want,) = run_ort(model, {"x": x}).values()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_conv_integer_matches_onnxruntime(tmp_path: Path) -> None:
    w = RNG.integers(0, 256, (6, 3, 3, 3)).astype(np.uint8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quant"),
        helper.make_node(
            "ConvInteger", ["q", "w", "z", "wz"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]
        ),
        helper.make_node("Cast", ["c"], ["y"], name="cast", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 5, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(123, np.uint8), "wz")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, 3, 9, 9)).astype(np.float32)
    (got,) = _compiled(model, {"x": x}, tmp_path)
    np.testing.assert_array_equal(got, next(iter(run_ort(model, {"x": x}).values())))


def test_an_int8_embedding_table_gathers_its_integers(tmp_path: Path) -> None:
    """A quantized model's int8 constants are carried in float32, so they gather like any table."""
    table = RNG.integers(-128, 128, (50, 8)).astype(np.int8)
    nodes = [
        helper.make_node("Gather", ["t", "ids"], ["rows"], name="gather"),
        helper.make_node("DequantizeLinear", ["rows", "s", "z"], ["y"], name="dequant"),
    ]
    graph = helper.make_graph(
        nodes,
        "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])],
        [
            numpy_helper.from_array(table, "t"),
            numpy_helper.from_array(np.array(0.05, np.float32), "s"),
            numpy_helper.from_array(np.array(-3, np.int8), "z"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ids = RNG.integers(0, 50, (2, 4)).astype(np.int64)
    (got,) = _compiled(model, {"ids": ids}, tmp_path)
    np.testing.assert_array_equal(got, (table[ids].astype(np.float32) + 3) * np.float32(0.05))
    np.testing.assert_array_equal(got, next(iter(run_ort(model, {"ids": ids}).values())))


def test_dynamic_quantization_integers_as_an_output_are_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="the_q")],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.UINT8, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="integers are a graph output") as info:
        load_onnx(model.SerializeToString())
    assert "the_q" in str(info.value)


def test_8_bit_integers_at_an_output_are_refused_unless_constant(tmp_path: Path) -> None:
    """Carried in float32 inside the model, they cannot be an output computed at run time; a constant
    output keeps its type."""
    table = helper.make_tensor("t", TensorProto.INT8, [4, 2], list(range(-4, 4)))
    gather = helper.make_node("Gather", ["t", "ids"], ["rows"], name="gather")
    graph = helper.make_graph(
        [gather],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("rows", TensorProto.INT8, [3, 2])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="output 'rows' is int8"):
        load_onnx(model.SerializeToString())
    folded = helper.make_graph(
        [helper.make_node("Neg", ["t"], ["y"], name="neg")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [4, 2])],
        [table],
    )
    imported = load_onnx(helper.make_model(folded, opset_imports=[helper.make_opsetid("", 17)]))
    (out,) = imported.outputs
    assert out.type.dtype == "int8" and isinstance(out, Const)
    np.testing.assert_array_equal(out.data, -np.arange(-4, 4, dtype=np.int8).reshape(4, 2))
