"""Every ONNX op the frontend converts, with its attributes, against onnxruntime (fp32, atol/rtol 1e-4).

Each case builds a one-node model, loads it with temper, verifies the graph, runs the reference
interpreter and compares with onnxruntime on the same seeded inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto

from compiler.frontend.convert_recurrent import GATES
from tests.compiler.frontend.onnx_check import check_against_ort, single_op

F32 = np.float32
I64 = np.int64
_rng = np.random.default_rng(1234)


def randn(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(F32)


def positive(*shape: int) -> np.ndarray:
    return _rng.uniform(0.1, 3.0, shape).astype(F32)


def ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


def f(*values: float) -> np.ndarray:
    return np.array(values, dtype=F32)


Case = Callable[[], tuple[Any, dict[str, np.ndarray]]]
CASES: dict[str, Case] = {}


def case(name: str, op: str, inputs: dict[str, Any], consts: dict[str, Any] | None = None, **kw: Any) -> None:
    """Register a single-op case; arrays are created lazily so ids stay cheap to collect."""
    CASES[name] = lambda: single_op(op, {k: v() for k, v in inputs.items()}, consts, **kw)


# ---- unary ------------------------------------------------------------------------------------------
for onnx_op in ("Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Erf", "HardSwish"):
    case(onnx_op, onnx_op, {"x": lambda: randn(2, 3, 4) * 3})
case("Log", "Log", {"x": lambda: positive(3, 4)})
for onnx_op in ("Sin", "Cos"):  # rotary angles: positions times inverse frequencies
    case(onnx_op, onnx_op, {"x": lambda: np.concatenate([randn(20) * 3, randn(20) * 4000])})
WIDE = f(-60.0, -20.0, -2.5, -0.5, 0.0, 0.5, 1.5, 2.5, 20.0, 90.0)  # softplus must not overflow at 90
for onnx_op in ("Softplus", "Softsign", "Floor", "Ceil", "Round", "Sign"):
    case(onnx_op, onnx_op, {"x": lambda: np.concatenate([WIDE, randn(14) * 3])})
case("Mish", "Mish", {"x": lambda: np.concatenate([WIDE, randn(14) * 3])}, opset=18)
case("Elu", "Elu", {"x": lambda: randn(3, 5) * 3}, alpha=0.5)
case("Celu", "Celu", {"x": lambda: randn(3, 5) * 3}, alpha=2.0)
case("Selu", "Selu", {"x": lambda: randn(3, 5) * 3})
case("ThresholdedRelu", "ThresholdedRelu", {"x": lambda: randn(3, 5) * 3}, alpha=0.7)
case(
    "InstanceNormalization",
    "InstanceNormalization",
    {"x": lambda: randn(2, 3, 4, 5) * 2 + 1},
    {"s": f(0.5, 1.0, 2.0), "b": f(0.1, -0.2, 0.3)},
    epsilon=1e-4,
)
case(
    "GroupNormalization_per_channel",
    "GroupNormalization",
    {"x": lambda: randn(2, 6, 3, 3) * 2 + 1},
    {"s": f(0.5, 1, 2, 1.5, 0.7, 1.1), "b": f(0.1, -0.2, 0, 0.3, 0.2, -0.1)},
    num_groups=3,
    opset=21,
)
# LRN: the channel window clipped at both ends (size 5 over 7 channels), a window wider than the
# channels and large activations (onnxruntime runs odd sizes over 4-D inputs only: the compiled tests
# check even sizes and other ranks against the definition)
case("LRN_default", "LRN", {"x": lambda: randn(2, 7, 4, 5) * 3}, size=5)
case("LRN_small", "LRN", {"x": lambda: randn(1, 6, 3, 3)}, size=3, alpha=0.3, beta=0.6, bias=2.0)
case("LRN_wide", "LRN", {"x": lambda: randn(1, 3, 2, 2)}, size=9, alpha=0.5, beta=1.0)
case("LRN_large", "LRN", {"x": lambda: randn(1, 16, 5, 5) * 40}, size=5, alpha=1e-3, beta=0.75)


def recurrent_weights(op: str, directions: int, hidden: int, inputs: int, seed: int) -> dict[str, np.ndarray]:
    """W, R and B of an ONNX recurrent layer, scaled so that the gates neither saturate nor vanish."""
    gates = GATES[op]
    rng = np.random.default_rng(seed)
    return {
        "W": (rng.standard_normal((directions, gates * hidden, inputs)) * 0.5).astype(F32),
        "R": (rng.standard_normal((directions, gates * hidden, hidden)) * 0.5).astype(F32),
        "B": (rng.standard_normal((directions, 2 * gates * hidden)) * 0.3).astype(F32),
    }


# Recurrent layers (onnxruntime runs layout 0 only; onnx's batchwise cases check layout 1): every
# direction, initial states, peepholes, constant sequence_lens,
# GRU's reset applied before and after the recurrent product, and layers with only X, W and R
LSTM_STATES = {
    "lens": np.full(2, 5, np.int32),
    "h0": _rng.standard_normal((2, 2, 4)).astype(F32) * 0.5,
    "c0": _rng.standard_normal((2, 2, 4)).astype(F32) * 0.5,
    "P": _rng.standard_normal((2, 12)).astype(F32) * 0.5,
}
case(
    "LSTM_bidirectional_states_peepholes",
    "LSTM",
    {"x": lambda: randn(5, 2, 3)},
    {**recurrent_weights("LSTM", 2, 4, 3, 1), **LSTM_STATES},
    n_outputs=3,
    hidden_size=4,
    direction="bidirectional",
)
case(
    "LSTM_forward_xwr_only",
    "LSTM",
    {"x": lambda: randn(6, 3, 5)},
    {k: v for k, v in recurrent_weights("LSTM", 1, 8, 5, 2).items() if k != "B"},
    n_outputs=3,
    hidden_size=8,
)
case(
    "LSTM_reverse",
    "LSTM",
    {"x": lambda: randn(4, 2, 3)},
    recurrent_weights("LSTM", 1, 5, 3, 3),
    n_outputs=3,
    hidden_size=5,
    direction="reverse",
)
for lbr in (0, 1):
    case(
        f"GRU_bidirectional_lbr{lbr}",
        "GRU",
        {"x": lambda: randn(4, 2, 3)},
        {**recurrent_weights("GRU", 2, 6, 3, 4 + lbr), "lens": np.full(2, 4, np.int32)},
        n_outputs=2,
        hidden_size=6,
        direction="bidirectional",
        linear_before_reset=lbr,
    )
case(
    "GRU_initial_h",
    "GRU",
    {"x": lambda: randn(5, 3, 2), "h0": lambda: randn(1, 3, 4) * 0.5},
    recurrent_weights("GRU", 1, 4, 2, 6),
    n_outputs=2,
    input_order=["x", "W", "R", "B", "", "h0"],
    hidden_size=4,
)
case(
    "RNN_reverse",
    "RNN",
    {"x": lambda: randn(7, 2, 3)},
    recurrent_weights("RNN", 1, 5, 3, 7),
    n_outputs=2,
    hidden_size=5,
    direction="reverse",
)
case(
    "RNN_relu_bidirectional",
    "RNN",
    {"x": lambda: randn(3, 1, 4)},
    recurrent_weights("RNN", 2, 3, 4, 8),
    n_outputs=2,
    hidden_size=3,
    direction="bidirectional",
    activations=["Relu", "Tanh"],
)

for flags in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
    suffix = "_".join(flags) or "plain"
    case(f"CumSum_{suffix}", "CumSum", {"x": lambda: randn(3, 7, 2)}, {"a": ints(1).reshape(())}, **flags)
case(
    "CumSum_mask_positions",
    "CumSum",
    {"m": lambda: np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], I64)},
    {"a": ints(-1).reshape(())},
)
SIGNED = np.array([-7, -6, -1, 0, 1, 5, 7, 9], I64)
case("Mod_int", "Mod", {"x": lambda: SIGNED, "y": lambda: np.array([3, -3, 4, -4, 3, -2, 2, -5], I64)})
case(
    "Mod_int_fmod",
    "Mod",
    {"x": lambda: SIGNED, "y": lambda: np.array([3, -3, 4, -4, 3, -2, 2, -5], I64)},
    fmod=1,
)
case(
    "Mod_float_fmod",
    "Mod",
    {"x": lambda: randn(3, 4) * 5, "y": lambda: positive(3, 4) * np.sign(randn(3, 4))},
    fmod=1,
)
case("Trilu_upper", "Trilu", {"x": lambda: randn(2, 4, 5)})
case("Trilu_lower_k", "Trilu", {"x": lambda: randn(4, 5)}, {"k": ints(-1).reshape(())}, upper=0)
case("Trilu_upper_k", "Trilu", {"x": lambda: randn(3, 5)}, {"k": ints(2).reshape(())}, upper=1)
EINSUMS = {
    "attention_scores": ("bhqd,bhkd->bhqk", (2, 3, 4, 5), (2, 3, 6, 5)),
    "attention_values": ("bhqk,bhkd->bhqd", (2, 3, 4, 6), (2, 3, 6, 5)),
    "batched": ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
    "ellipsis": ("...ij,...jk->...ik", (2, 3, 4), (2, 4, 5)),
    "implicit": ("ij,jk", (3, 4), (4, 5)),
    "matvec": ("ij,j->i", (3, 4), (4,)),
    "dot": ("i,i->", (6,), (6,)),
    "outer": ("i,j->ij", (3,), (4,)),
    "sum_out_first": ("ijk,kl->il", (2, 3, 4), (4, 5)),
    "transposed_out": ("bij,bkj->kbi", (2, 3, 4), (2, 5, 4)),
}
for label, (eq, sa, sb) in EINSUMS.items():
    case(
        f"Einsum_{label}",
        "Einsum",
        {"a": lambda sa=sa: randn(*sa), "b": lambda sb=sb: randn(*sb)},
        equation=eq,
    )
case("Einsum_transpose", "Einsum", {"a": lambda: randn(2, 3, 4)}, equation="ijk->kij")
case("Einsum_sum", "Einsum", {"a": lambda: randn(2, 3, 4)}, equation="ijk->j")
SCATTER_ND = np.array([[0, 1], [2, -1], [1, 0]], I64)
for reduction in ("none", "add", "max", "min"):
    case(
        f"ScatterND_{reduction}",
        "ScatterND",
        {"x": lambda: randn(3, 4, 2), "i": lambda: SCATTER_ND, "u": lambda: randn(3, 2)},
        opset=18,
        reduction=reduction,
    )
    case(
        f"ScatterElements_{reduction}",
        "ScatterElements",
        {
            "x": lambda: randn(3, 5),
            "i": lambda: np.array([[1, 4, 0], [-1, 2, 3]], I64),
            "u": lambda: randn(2, 3),
        },
        opset=18,
        axis=1,
        reduction=reduction,
    )
case(
    "ScatterND_rows",
    "ScatterND",
    {"x": lambda: randn(4, 3), "u": lambda: randn(2, 3)},
    {"i": np.array([[3], [1]], I64)},
    input_order=["x", "i", "u"],
)
case(
    "ScatterElements_axis0_const",
    "ScatterElements",
    {"x": lambda: randn(3, 4), "u": lambda: randn(2, 4)},
    {"i": np.array([[2, 0, 1, 1], [0, 2, 2, 0]], I64)},
    input_order=["x", "i", "u"],
)
case("TopK_largest", "TopK", {"x": lambda: randn(3, 7)}, {"k": ints(3)}, n_outputs=2)
case(
    "TopK_smallest_axis0", "TopK", {"x": lambda: randn(6, 4)}, {"k": ints(2)}, n_outputs=2, axis=0, largest=0
)
case("TopK_ties", "TopK", {"x": lambda: f(1, 3, 3, 0, 3, 1).reshape(1, 6)}, {"k": ints(4)}, n_outputs=2)
TIES = f(1, 3, 3, 0, 2, 2, 0, 0, 5, 1, 5, 4).reshape(3, 4)
case("ArgMax", "ArgMax", {"x": lambda: randn(3, 5, 4)}, axis=1)
case("ArgMin_last_axis", "ArgMin", {"x": lambda: randn(3, 5, 4)}, axis=-1, keepdims=0)
case("ArgMax_ties_first", "ArgMax", {"x": lambda: TIES}, axis=1)
case("ArgMax_ties_last", "ArgMax", {"x": lambda: TIES}, axis=1, select_last_index=1)
case("ArgMin_ties_last", "ArgMin", {"x": lambda: TIES}, axis=0, keepdims=0, select_last_index=1)
for _op in ("ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceMax"):  # empty axes, noop: one element each
    case(
        f"{_op}_noop_empty_axes",
        _op,
        {"x": lambda: randn(2, 3)},
        {"axes": np.zeros(0, I64)},
        opset=18,
        noop_with_empty_axes=1,
    )
case("Hardmax", "Hardmax", {"x": lambda: randn(3, 5, 4)})
case("Hardmax_ties_axis0", "Hardmax", {"x": lambda: TIES}, axis=0)
ROWS = {"x": lambda: np.concatenate([randn(3, 6), np.zeros((1, 6), F32)])}  # the last row's norm is 0
case("LpNormalization_l2", "LpNormalization", ROWS)
case("LpNormalization_l1_axis0", "LpNormalization", ROWS, axis=0, p=1)
case(
    "MeanVarianceNormalization",
    "MeanVarianceNormalization",
    {"x": lambda: randn(2, 3, 4, 5) * 3 + 1},
    axes=[0, 2, 3],
)
case(
    "MeanVarianceNormalization_axes",
    "MeanVarianceNormalization",
    {"x": lambda: randn(2, 3, 4, 5)},
    axes=[1, -1],
)
case(
    "LpPool",
    "LpPool",
    {"x": lambda: randn(2, 3, 7, 6)},
    kernel_shape=[3, 2],
    strides=[2, 2],
    pads=[1, 0, 1, 1],
)
case(
    "LpPool_p3_ceil",
    "LpPool",
    {"x": lambda: randn(1, 2, 7, 7)},
    opset=18,
    kernel_shape=[2, 2],
    p=3,
    strides=[2, 2],
    ceil_mode=1,
)
case("LpPool_1d_p1", "LpPool", {"x": lambda: randn(2, 3, 9)}, kernel_shape=[3], p=1, auto_pad="SAME_UPPER")
case("GlobalLpPool", "GlobalLpPool", {"x": lambda: randn(2, 3, 4, 5)})
case("GlobalLpPool_p3", "GlobalLpPool", {"x": lambda: randn(2, 3, 4, 5)}, p=3)
case(
    "OneHot",
    "OneHot",
    {"i": lambda: np.array([[0, 3, -1], [2, -4, 1]], I64)},
    {"d": ints(4), "v": f(-1.0, 2.0)},
)
case(
    "OneHot_axis0_out_of_range",
    "OneHot",
    {"i": lambda: np.array([0, 5, -6, 2], I64)},
    {"d": ints(5), "v": np.array([0, 7], I64)},
    axis=0,
)
case("EyeLike", "EyeLike", {"x": lambda: randn(3, 5)}, k=1)
case("EyeLike_int_below", "EyeLike", {"x": lambda: randn(4, 3)}, k=-2, dtype=TensorProto.INT64)
case(
    "CenterCropPad", "CenterCropPad", {"x": lambda: randn(2, 5, 6)}, {"s": ints(3, 9)}, opset=18, axes=[1, 2]
)
case("CenterCropPad_all_axes", "CenterCropPad", {"x": lambda: randn(4, 5)}, {"s": ints(7, 2)}, opset=18)
case("IsNaN", "IsNaN", {"x": lambda: f(0.0, np.nan, -np.inf, np.inf, 1.0, -np.nan)})
case("IsInf", "IsInf", {"x": lambda: f(0.0, np.nan, -np.inf, np.inf, 1e38, -1.0)})
case("IsInf_positive", "IsInf", {"x": lambda: f(0.0, np.nan, -np.inf, np.inf)}, detect_negative=0)
case("Sqrt", "Sqrt", {"x": lambda: positive(3, 4)})
case("Reciprocal", "Reciprocal", {"x": lambda: positive(3, 4)})
case("Sigmoid_large", "Sigmoid", {"x": lambda: f(-100.0, -20.0, 0.0, 20.0, 100.0)})
case("LeakyRelu_default", "LeakyRelu", {"x": lambda: randn(4, 5)})
case("LeakyRelu_alpha", "LeakyRelu", {"x": lambda: randn(4, 5)}, alpha=0.3)
case("HardSigmoid", "HardSigmoid", {"x": lambda: randn(4, 5) * 4}, alpha=0.3, beta=0.4)
case("Gelu_erf", "Gelu", {"x": lambda: randn(4, 5) * 3}, opset=20)
case("Gelu_tanh", "Gelu", {"x": lambda: randn(4, 5) * 3}, opset=20, approximate="tanh")
case("Clip", "Clip", {"x": lambda: randn(4, 5) * 3}, {"lo": f(-1.0).reshape(()), "hi": f(0.5).reshape(())})
case("Clip_min_only", "Clip", {"x": lambda: randn(4, 5)}, {"lo": f(0.0).reshape(())}, input_order=["x", "lo"])
case(
    "Clip_max_only",
    "Clip",
    {"x": lambda: randn(4, 5)},
    {"hi": f(0.2).reshape(())},
    input_order=["x", "", "hi"],
)
case("Clip_none", "Clip", {"x": lambda: randn(4, 5)})
case("Cast_f2i", "Cast", {"x": lambda: randn(4, 5) * 10}, to=7)
case("Cast_i2f", "Cast", {"x": lambda: ints(1, -2, 3, 40)}, to=1)
case("Cast_f2b", "Cast", {"x": lambda: f(0.0, 1.5, -2.0, 0.0)}, to=9)
case("Cast_same", "Cast", {"x": lambda: randn(3)}, to=1)
case("CastLike", "CastLike", {"x": lambda: ints(1, 2, 3), "like": lambda: randn(1)})

# ---- binary / variadic / logical --------------------------------------------------------------------
for onnx_op in ("Add", "Sub", "Mul", "Div", "Min", "Max"):
    case(f"{onnx_op}_bcast", onnx_op, {"a": lambda: randn(2, 3, 4), "b": lambda: randn(3, 1) + 2})
    case(f"{onnx_op}_bcast2", onnx_op, {"a": lambda: randn(1, 3, 1, 5), "b": lambda: randn(2, 1, 4, 1) + 2})
case("Add_const", "Add", {"a": lambda: randn(2, 3)}, {"b": randn(3)})
case("Pow", "Pow", {"a": lambda: positive(2, 3)}, {"b": f(2.5).reshape(())})
case("Pow_square", "Pow", {"a": lambda: randn(2, 3)}, {"b": f(2.0).reshape(())})
case("Pow_bcast", "Pow", {"a": lambda: positive(2, 3), "b": lambda: randn(3)})
case("Pow_int_exponent", "Pow", {"a": lambda: randn(2, 3)}, {"b": ints(3).reshape(())})
for onnx_op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
    case(onnx_op, onnx_op, {"a": lambda: np.round(randn(3, 4)), "b": lambda: np.round(randn(4))})
case("Equal_int", "Equal", {"a": lambda: ints(1, 2, 3, 4)}, {"b": ints(1, 0, 3, 0)})
case("Where", "Where", {"c": lambda: randn(3, 1) > 0, "a": lambda: randn(3, 4), "b": lambda: randn(4)})
case("PRelu", "PRelu", {"x": lambda: randn(2, 3, 4, 4)}, {"slope": randn(3, 1, 1)})
case("PRelu_scalar", "PRelu", {"x": lambda: randn(2, 3)}, {"slope": f(0.25)})
case("Sum3", "Sum", {"a": lambda: randn(3, 4), "b": lambda: randn(4), "c": lambda: randn(1, 4)})
case("Mean3", "Mean", {"a": lambda: randn(3, 4), "b": lambda: randn(4), "c": lambda: randn(1, 4)})
case("Max1", "Max", {"a": lambda: randn(3, 4)})
case("Min3", "Min", {"a": lambda: randn(3, 4), "b": lambda: randn(4), "c": lambda: randn(3, 1)})
case("Not", "Not", {"a": lambda: randn(3, 4) > 0})
for onnx_op in ("And", "Or", "Xor"):
    case(onnx_op, onnx_op, {"a": lambda: randn(3, 4) > 0, "b": lambda: randn(4) > 0})

# ---- convolution ------------------------------------------------------------------------------------
X = {"x": lambda: randn(2, 4, 9, 9)}
case("Conv_3x3_pad", "Conv", X, {"w": randn(6, 4, 3, 3)}, pads=[1, 1, 1, 1])
case("Conv_bias", "Conv", X, {"w": randn(6, 4, 3, 3), "b": randn(6)}, strides=[2, 2])
case(
    "Conv_stride_dilation",
    "Conv",
    X,
    {"w": randn(6, 4, 3, 3)},
    strides=[2, 1],
    dilations=[2, 3],
    pads=[2, 1, 0, 3],
)
case("Conv_groups", "Conv", X, {"w": randn(6, 2, 3, 3)}, group=2, pads=[1, 1, 1, 1])
case("Conv_depthwise", "Conv", X, {"w": randn(4, 1, 3, 3), "b": randn(4)}, group=4, pads=[1, 1, 1, 1])
case("Conv_depthwise_mult", "Conv", X, {"w": randn(8, 1, 5, 5)}, group=4, strides=[2, 2], pads=[2, 2, 2, 2])
case("Conv_same_upper", "Conv", X, {"w": randn(6, 4, 4, 4)}, auto_pad="SAME_UPPER", strides=[2, 2])
case("Conv_same_lower", "Conv", X, {"w": randn(6, 4, 4, 4)}, auto_pad="SAME_LOWER", strides=[2, 2])
case("Conv_valid", "Conv", X, {"w": randn(6, 4, 3, 2)}, auto_pad="VALID")
case("Conv_1x1", "Conv", X, {"w": randn(6, 4, 1, 1)})
# DeepLab's atrous rates past the plane: taps that read only padding are cut (rate 24: a 1x1 conv)
for rate in (6, 24):
    case(
        f"Conv_atrous_rate_{rate}",
        "Conv",
        {"x": lambda: randn(1, 16, 14, 14)},
        {"w": randn(32, 16, 3, 3)},
        pads=[rate] * 4,
        dilations=[rate, rate],
    )
# one input channel (a grayscale image, a waveform) and enough output channels to run blocked: a dense
# conv whose single group holds every output channel, not a depthwise one
case(
    "Conv_one_input_channel",
    "Conv",
    {"x": lambda: randn(1, 1, 12, 14)},
    {"w": randn(32, 1, 3, 3), "b": randn(32)},
    pads=[1, 1, 1, 1],
)
case(
    "Conv1d_one_input_channel_strided",
    "Conv",
    {"x": lambda: randn(2, 1, 200)},
    {"w": randn(32, 1, 10)},
    strides=[5],
)
# a pointwise conv over a 16x16 plane of 32 channels, batch 2: compiled as a matmul on the planes
case(
    "Conv_1x1_as_matmul",
    "Conv",
    {"x": lambda: randn(2, 32, 16, 16)},
    {"w": randn(20, 32, 1, 1), "b": randn(20)},
)
case("Conv_runtime_weight", "Conv", {"x": lambda: randn(1, 4, 6, 6), "w": lambda: randn(3, 4, 3, 3)})
case(
    "Conv_1d",
    "Conv",
    {"x": lambda: randn(2, 4, 11)},
    {"w": randn(5, 4, 3), "b": randn(5)},
    pads=[1, 2],
    strides=[2],
)
case(
    "Conv_1d_same",
    "Conv",
    {"x": lambda: randn(1, 2, 10)},
    {"w": randn(4, 1, 4)},
    group=2,
    auto_pad="SAME_UPPER",
)
# 3-D convs (video, volumes): 2-D convs over the output frames, each frame's time taps as channels
X3 = {"x": lambda: randn(2, 4, 5, 6, 7)}
case("Conv3d", "Conv", X3, {"w": randn(6, 4, 3, 3, 3), "b": randn(6)}, pads=[1, 1, 1, 1, 1, 1])
case(
    "Conv3d_strided_asymmetric",
    "Conv",
    X3,
    {"w": randn(5, 4, 2, 3, 1)},
    strides=[2, 1, 2],
    pads=[1, 0, 0, 0, 2, 0],
)
case("Conv3d_dilated", "Conv", X3, {"w": randn(3, 4, 2, 2, 3)}, dilations=[2, 2, 1], pads=[0, 1, 1, 1, 0, 1])
case("Conv3d_grouped", "Conv", X3, {"w": randn(6, 2, 3, 1, 1)}, group=2, pads=[1, 0, 0, 1, 0, 0])
case(
    "Conv3d_depthwise", "Conv", X3, {"w": randn(8, 1, 3, 3, 3), "b": randn(8)}, group=4, auto_pad="SAME_UPPER"
)
case(
    "Conv3d_spatial_only", "Conv", X3, {"w": randn(6, 4, 1, 3, 3)}, strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]
)
case(
    "Conv3d_temporal_only",
    "Conv",
    X3,
    {"w": randn(6, 4, 3, 1, 1)},
    strides=[2, 1, 1],
    pads=[1, 0, 0, 1, 0, 0],
)
# 3-D pools: the 2-D pool of every frame, then the window over time
case("MaxPool3d", "MaxPool", X3, kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1])
case(
    "MaxPool3d_ceil_dilated",
    "MaxPool",
    X3,
    kernel_shape=[2, 2, 2],
    strides=[2, 1, 2],
    dilations=[2, 1, 1],
    ceil_mode=1,
)
for include in (0, 1):
    case(
        f"AveragePool3d_count_include_pad_{include}",
        "AveragePool",
        X3,
        kernel_shape=[3, 2, 3],
        strides=[2, 2, 1],
        pads=[1, 0, 1, 2, 1, 0],
        count_include_pad=include,
    )
case("AveragePool3d_ceil", "AveragePool", X3, kernel_shape=[2, 3, 3], strides=[2, 2, 2], ceil_mode=1)
# 3-D transposed convs (volumetric decoders): a 2-D transposed conv over frames, time phases as channels
case("ConvTranspose3d", "ConvTranspose", X3, {"w": randn(4, 3, 2, 2, 2), "b": randn(3)}, strides=[2, 2, 2])
case(
    "ConvTranspose3d_pads_output_padding",
    "ConvTranspose",
    X3,
    {"w": randn(4, 2, 3, 3, 2)},
    strides=[2, 1, 3],
    pads=[1, 1, 0, 1, 0, 1],
    output_padding=[1, 0, 2],
)
case(
    "ConvTranspose3d_dilated",
    "ConvTranspose",
    X3,
    {"w": randn(4, 2, 2, 3, 1)},
    strides=[3, 2, 1],
    dilations=[2, 1, 1],
)
case("ConvTranspose3d_stride1", "ConvTranspose", X3, {"w": randn(4, 5, 3, 1, 3)}, pads=[1, 0, 1, 1, 0, 1])
XT = {"x": lambda: randn(2, 4, 5, 5)}
case("ConvTranspose", "ConvTranspose", XT, {"w": randn(4, 3, 3, 3)}, strides=[2, 2])
case(
    "ConvTranspose_bias_pads",
    "ConvTranspose",
    XT,
    {"w": randn(4, 3, 3, 3), "b": randn(3)},
    strides=[2, 2],
    pads=[1, 0, 1, 2],
)
case(
    "ConvTranspose_output_padding",
    "ConvTranspose",
    XT,
    {"w": randn(4, 3, 3, 3)},
    strides=[3, 2],
    output_padding=[2, 1],
    pads=[1, 1, 1, 1],
)
case("ConvTranspose_groups", "ConvTranspose", XT, {"w": randn(4, 2, 3, 3)}, group=2, strides=[2, 2])
# kernel = stride: a 1x1 conv and a depth-to-space rearrangement (the upsampling of detection heads)
case("ConvTranspose_k2_s2_bias", "ConvTranspose", XT, {"w": randn(4, 6, 2, 2), "b": randn(6)}, strides=[2, 2])
case("ConvTranspose_k3x2_s3x2", "ConvTranspose", XT, {"w": randn(4, 5, 3, 2)}, strides=[3, 2])
case(
    "ConvTranspose_1d_k4_s4",
    "ConvTranspose",
    {"x": lambda: randn(2, 4, 7)},
    {"w": randn(4, 3, 4)},
    strides=[4],
)
case(
    "ConvTranspose_dilation", "ConvTranspose", XT, {"w": randn(4, 3, 3, 2)}, dilations=[2, 3], strides=[1, 2]
)
case(
    "ConvTranspose_output_shape",
    "ConvTranspose",
    XT,
    {"w": randn(4, 3, 3, 3)},
    strides=[2, 2],
    output_shape=[10, 9],
)
case(
    "ConvTranspose_same_upper",
    "ConvTranspose",
    XT,
    {"w": randn(4, 3, 4, 4)},
    strides=[2, 2],
    auto_pad="SAME_UPPER",
)
case(
    "ConvTranspose_same_lower",
    "ConvTranspose",
    XT,
    {"w": randn(4, 3, 4, 4)},
    strides=[2, 2],
    auto_pad="SAME_LOWER",
)
case(
    "ConvTranspose_1d",
    "ConvTranspose",
    {"x": lambda: randn(1, 4, 7)},
    {"w": randn(4, 2, 3), "b": randn(2)},
    strides=[2],
    pads=[1, 0],
)

# ---- dense ------------------------------------------------------------------------------------------
case("MatMul_2d", "MatMul", {"a": lambda: randn(5, 7)}, {"b": randn(7, 3)})
case("MatMul_batched", "MatMul", {"a": lambda: randn(2, 1, 3, 4), "b": lambda: randn(5, 4, 6)})
case("MatMul_3d_2d", "MatMul", {"a": lambda: randn(2, 3, 4)}, {"b": randn(4, 6)})
case("MatMul_1d_2d", "MatMul", {"a": lambda: randn(4)}, {"b": randn(4, 6)})
case("MatMul_2d_1d", "MatMul", {"a": lambda: randn(3, 4), "b": lambda: randn(4)})
case("MatMul_1d_1d", "MatMul", {"a": lambda: randn(4), "b": lambda: randn(4)})
case("MatMul_1d_3d", "MatMul", {"a": lambda: randn(4), "b": lambda: randn(2, 4, 3)})
case("Gemm", "Gemm", {"a": lambda: randn(3, 5)}, {"b": randn(5, 4), "c": randn(4)})
case(
    "Gemm_trans_alpha_beta",
    "Gemm",
    {"a": lambda: randn(5, 3)},
    {"b": randn(4, 5), "c": randn(3, 1)},
    transA=1,
    transB=1,
    alpha=0.5,
    beta=2.0,
)
case("Gemm_no_c", "Gemm", {"a": lambda: randn(3, 5), "b": lambda: randn(5, 2)})
case(
    "Gemm_runtime_c_scalar",
    "Gemm",
    {"a": lambda: randn(3, 5), "b": lambda: randn(5, 2), "c": lambda: f(1.5)},
    beta=0.5,
)

# ---- pooling ----------------------------------------------------------------------------------------
P = {"x": lambda: randn(2, 3, 10, 9)}
case("MaxPool", "MaxPool", P, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
case("MaxPool_ceil", "MaxPool", P, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
case("MaxPool_dilation", "MaxPool", P, kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 0, 1, 2])
case("MaxPool_same_upper", "MaxPool", P, kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")
case("MaxPool_same_lower", "MaxPool", P, kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_LOWER")
case("MaxPool_1d", "MaxPool", {"x": lambda: randn(2, 3, 11)}, kernel_shape=[3], strides=[2], pads=[1, 1])
for cip in (0, 1):
    case(
        f"AveragePool_pads_cip{cip}",
        "AveragePool",
        P,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        count_include_pad=cip,
    )
    case(
        f"AveragePool_ceil_cip{cip}",
        "AveragePool",
        P,
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 0, 1, 1],
        ceil_mode=1,
        count_include_pad=cip,
    )
case("AveragePool_same_lower", "AveragePool", P, kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")
case(
    "AveragePool_1d", "AveragePool", {"x": lambda: randn(1, 2, 9)}, kernel_shape=[4], strides=[3], ceil_mode=1
)
case("GlobalAveragePool", "GlobalAveragePool", P)
case("GlobalMaxPool", "GlobalMaxPool", P)

# ---- normalisation, softmax -------------------------------------------------------------------------
case(
    "BatchNormalization",
    "BatchNormalization",
    {"x": lambda: randn(2, 3, 4, 5)},
    {"s": randn(3), "b": randn(3), "m": randn(3), "v": positive(3)},
    epsilon=1e-3,
)
case(
    "BatchNormalization_2d",
    "BatchNormalization",
    {"x": lambda: randn(4, 3)},
    {"s": randn(3), "b": randn(3), "m": randn(3), "v": positive(3)},
)
case(
    "LayerNormalization", "LayerNormalization", {"x": lambda: randn(2, 5, 8)}, {"s": randn(8), "b": randn(8)}
)
case(
    "LayerNormalization_axis1",
    "LayerNormalization",
    {"x": lambda: randn(2, 3, 4)},
    {"s": randn(3, 4)},
    axis=1,
    epsilon=1e-3,
)
case("Softmax", "Softmax", {"x": lambda: randn(3, 4, 5) * 4})
case("Softmax_axis1", "Softmax", {"x": lambda: randn(3, 4, 5)}, axis=1)
case("LogSoftmax", "LogSoftmax", {"x": lambda: randn(3, 7) * 4}, axis=0)

# ---- reductions -------------------------------------------------------------------------------------
R = {"x": lambda: randn(2, 3, 4)}
case("ReduceSum", "ReduceSum", R, {"axes": ints(1)}, keepdims=0)
case("ReduceSum_all", "ReduceSum", R)
case("ReduceSum_noop", "ReduceSum", R, noop_with_empty_axes=1)
case("ReduceMean_attr", "ReduceMean", R, axes=[-1, 0])
case("ReduceMean_input", "ReduceMean", R, {"axes": ints(-2)}, opset=18)
case("ReduceMax", "ReduceMax", R, axes=[2], keepdims=0)
case("ReduceMin", "ReduceMin", R, axes=[1])
case("ReduceL2", "ReduceL2", R, axes=[0, 2])
case("ReduceL1", "ReduceL1", R, axes=[0, 2])
case("ReduceSumSquare", "ReduceSumSquare", R, keepdims=0)

# ---- data movement ----------------------------------------------------------------------------------
T = {"x": lambda: randn(2, 3, 4)}
case("Reshape", "Reshape", T, {"s": ints(0, -1, 2)})
case("Reshape_runtime_int", "Reshape", {"x": lambda: ints(1, 2, 3, 4, 5, 6)}, {"s": ints(3, 2)})
case("Flatten", "Flatten", T)
case("Flatten_axis0", "Flatten", T, axis=0)
case("Flatten_neg", "Flatten", T, axis=-1)
case("Squeeze", "Squeeze", {"x": lambda: randn(1, 3, 1, 2)}, {"axes": ints(-2)})
case("Squeeze_all", "Squeeze", {"x": lambda: randn(1, 3, 1, 2)})
case("Unsqueeze", "Unsqueeze", T, {"axes": ints(0, -1)})
case("Transpose_default", "Transpose", T)
case("Transpose_perm", "Transpose", T, perm=[1, 2, 0])
case("DepthToSpace_DCR", "DepthToSpace", {"x": lambda: randn(1, 8, 2, 3)}, blocksize=2)
case("DepthToSpace_CRD", "DepthToSpace", {"x": lambda: randn(1, 8, 2, 3)}, blocksize=2, mode="CRD")
case("SpaceToDepth", "SpaceToDepth", {"x": lambda: randn(1, 2, 4, 6)}, blocksize=2)
# Col2Im: blocks that tile the image (a rearrangement), overlapping blocks, a remainder row and column,
# and pads, strides and dilations together (a one-hot transposed convolution)
COL2IM = {"image": ints(6, 8), "block": ints(2, 2)}
case("Col2Im_tiles", "Col2Im", {"x": lambda: randn(2, 12, 12)}, COL2IM, opset=18, strides=[2, 2])
case(
    "Col2Im_overlap", "Col2Im", {"x": lambda: randn(2, 18, 12)}, {"i": ints(5, 6), "b": ints(3, 3)}, opset=18
)
case(
    "Col2Im_remainder",
    "Col2Im",
    {"x": lambda: randn(1, 8, 9)},
    {"i": ints(7, 7), "b": ints(2, 2)},
    opset=18,
    strides=[2, 2],
)
case(
    "Col2Im_pads_strides_dilations",
    "Col2Im",
    {"x": lambda: randn(1, 12, 36)},
    {"i": ints(7, 9), "b": ints(2, 3)},
    opset=18,
    strides=[2, 1],
    pads=[1, 0, 1, 2],
    dilations=[2, 1],
)
case("Concat", "Concat", {"a": lambda: randn(2, 3), "b": lambda: randn(2, 1)}, {"c": randn(2, 2)}, axis=-1)
case("Slice", "Slice", T, {"st": ints(0, 1), "en": ints(2, 100), "ax": ints(0, 2)})
case(
    "Slice_negative",
    "Slice",
    T,
    {"st": ints(-1, 3), "en": ints(-100, 0), "ax": ints(2, 1), "sp": ints(-2, -1)},
)
case(
    "Slice_steps",
    "Slice",
    {"x": lambda: randn(10, 4)},
    {"st": ints(1), "en": ints(-1), "ax": ints(0), "sp": ints(3)},
)
case("Slice_empty", "Slice", T, {"st": ints(3), "en": ints(1), "ax": ints(2)})
case("Split_equal", "Split", {"x": lambda: randn(6, 4)}, n_outputs=3)
case("Split_sizes", "Split", {"x": lambda: randn(2, 7)}, {"sp": ints(2, 5)}, n_outputs=2, axis=-1)
case("Split_num_outputs", "Split", {"x": lambda: randn(7, 2)}, n_outputs=3, opset=18, num_outputs=3)
case("Gather_const", "Gather", {"x": lambda: randn(5, 3)}, {"i": ints(0, -1, 2, -5)})
case("Gather_scalar_axis1", "Gather", {"x": lambda: randn(2, 5, 3)}, {"i": ints(-2).reshape(())}, axis=1)
case("Gather_runtime", "Gather", {"x": lambda: randn(6, 4), "i": lambda: np.array([[0, 5], [-1, 2]], I64)})
case(
    "GatherND_runtime",
    "GatherND",
    {"x": lambda: randn(4, 5, 3), "i": lambda: np.array([[0, 1], [3, -1], [2, 4]], I64)},
)
case("GatherND_scalars", "GatherND", {"x": lambda: randn(3, 4)}, {"i": ints(0, 1, 2, -1, 1, 3).reshape(3, 2)})
case(
    "GatherND_batch_dims",
    "GatherND",
    {"x": lambda: randn(2, 4, 3), "i": lambda: np.array([[[1], [3]], [[0], [-2]]], I64)},
    batch_dims=1,
)
case(
    "GatherElements_runtime",
    "GatherElements",
    {"x": lambda: randn(3, 4), "i": lambda: np.array([[0, 3], [-1, 1], [2, -4]], I64)},
    axis=1,
)
case(
    "GatherElements_axis0",
    "GatherElements",
    {"x": lambda: randn(3, 4)},
    {"i": ints(2, 0, 1, 1, 0, 2).reshape(2, 3)},
)
case("Expand", "Expand", {"x": lambda: randn(3, 1)}, {"s": ints(2, 1, 4)})
case("Expand_bidirectional", "Expand", {"x": lambda: randn(2, 1, 5)}, {"s": ints(3, 1)})
case("Tile", "Tile", {"x": lambda: randn(2, 3)}, {"r": ints(2, 3)})
case("Pad_constant", "Pad", T, {"p": ints(0, 1, 2, 1, 0, 3), "v": f(1.5).reshape(())})
case("Pad_reflect", "Pad", T, {"p": ints(0, 2, 1, 0, 1, 3)}, mode="reflect")
case("Pad_edge", "Pad", T, {"p": ints(1, 0, 2, 0, 3, 1)}, mode="edge")
case("Pad_negative", "Pad", T, {"p": ints(0, -1, 2, 0, 1, -1)})
case("Pad_axes", "Pad", T, {"p": ints(1, 2), "v": f(0.0).reshape(()), "ax": ints(-1)}, opset=18)
case("Identity", "Identity", T)
case("Dropout", "Dropout", T, {"r": f(0.5).reshape(())})
case("Shape", "Shape", T)
case("Shape_slice", "Shape", T, start=1, end=-1, opset=15)
case("Size", "Size", T)

# ---- grid sample ------------------------------------------------------------------------------------
# points inside and past the image (zeros read 0 there, border the edge, reflection mirror them back);
# a far grid mirrors some points more than once
GS = {"x": lambda: randn(2, 3, 5, 7), "g": lambda: _rng.uniform(-1.4, 1.4, (2, 4, 6, 2)).astype(F32)}
GS_FAR = {"x": lambda: randn(1, 2, 4, 3), "g": lambda: _rng.uniform(-4.0, 4.0, (1, 5, 5, 2)).astype(F32)}
for mode in ("linear", "nearest", "cubic"):
    for padding in ("zeros", "border", "reflection"):
        for align in (0, 1):
            case(
                f"GridSample_{mode}_{padding}_align{align}",
                "GridSample",
                GS,
                opset=20,
                mode=mode,
                padding_mode=padding,
                align_corners=align,
            )
        far = f"GridSample_{mode}_{padding}_far"
        case(far, "GridSample", GS_FAR, opset=20, mode=mode, padding_mode=padding)
# opsets 16-19 name the modes bilinear and bicubic; bilinear, zeros and align_corners 0 by default
case("GridSample_opset16_defaults", "GridSample", GS, opset=16)
case("GridSample_opset16_bicubic", "GridSample", GS, opset=16, mode="bicubic", padding_mode="border")
case("GridSample_opset16_nearest", "GridSample", GS, opset=16, mode="nearest", align_corners=1)

# a spatial transformer's sampling grid: each image's affine map of the base grid; a one-pixel axis
# sits at the image's centre without align_corners, at 1 with it (as onnxruntime puts it)
for label, size in (("", (2, 3, 5, 7)), ("_one_row", (2, 3, 1, 4))):
    for align in (0, 1):
        case(
            f"AffineGrid{label}_align{align}",
            "AffineGrid",
            {"t": lambda: randn(2, 2, 3)},
            {"s": ints(*size)},
            opset=20,
            align_corners=align,
        )

# ---- resize -----------------------------------------------------------------------------------------
RX = {"x": lambda: randn(1, 2, 5, 6)}
E = f()
for coord in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
    for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        case(
            f"Resize_nearest_{coord}_{nearest}_up",
            "Resize",
            RX,
            {"roi": E, "sc": f(1, 1, 2.0, 1.5)},
            coordinate_transformation_mode=coord,
            nearest_mode=nearest,
        )
    case(
        f"Resize_nearest_{coord}_down",
        "Resize",
        RX,
        {"roi": E, "sc": E, "sz": ints(1, 2, 3, 4)},
        coordinate_transformation_mode=coord,
        nearest_mode="round_prefer_ceil",
    )
# cubic: four taps per axis, read past the edges as the edge (or left out and renormalised)
for mode, down in (("linear", ints(1, 2, 3, 1)), ("cubic", ints(1, 2, 3, 2))):
    for coord in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"):
        case(
            f"Resize_{mode}_{coord}_up",
            "Resize",
            RX,
            {"roi": E, "sc": f(1, 1, 2.0, 1.7)},
            mode=mode,
            coordinate_transformation_mode=coord,
        )
        case(
            f"Resize_{mode}_{coord}_down",
            "Resize",
            RX,
            {"roi": E, "sc": E, "sz": down},
            mode=mode,
            coordinate_transformation_mode=coord,
        )
case(
    "Resize_linear_symmetric",
    "Resize",
    RX,
    {"roi": E, "sc": f(1, 1, 0.6, 1.4)},
    mode="linear",
    opset=19,
    coordinate_transformation_mode="half_pixel_symmetric",
)
case("Resize_axes", "Resize", RX, {"roi": E, "sc": f(3.0, 0.5)}, opset=18, axes=[2, 3])
# separable: the columns shrink in a first stage over the input's rows, the rows then grow
case("Resize_linear_rows_up_columns_down", "Resize", RX, {"roi": E, "sc": f(1, 1, 2.6, 0.5)}, mode="linear")
case("Resize_nearest_rows_up_columns_down", "Resize", RX, {"roi": E, "sc": f(1, 1, 3.0, 0.7)})
case(
    "Resize_linear_3d_up",
    "Resize",
    {"x": lambda: randn(2, 3, 7)},
    {"roi": E, "sc": f(1, 2.5, 3.0)},
    mode="linear",
)
case("Resize_sizes_only", "Resize", RX, {"sz": ints(1, 2, 7, 3)}, input_order=["x", "", "", "sz"])
case(
    "Resize_cubic_exclude_outside",
    "Resize",
    RX,
    {"roi": E, "sc": f(1, 1, 1.6, 2.4)},
    mode="cubic",
    cubic_coeff_a=-0.5,
    exclude_outside=1,
)
case("Resize_cubic_rows_up_columns_down", "Resize", RX, {"roi": E, "sc": f(1, 1, 2.6, 0.5)}, mode="cubic")
case(
    "Resize_cubic_2d_up",  # (onnxruntime's cubic takes 2-D inputs, and 4-D ones resized on H and W)
    "Resize",
    {"x": lambda: randn(5, 7)},
    {"roi": E, "sc": f(2.5, 3.0)},
    mode="cubic",
)

# a 2-D right operand shared by a batched left one is one GEMM over all rows ([S, 1, K] x [K, N] as
# torch's MultiheadAttention exports its input projection)
case("MatMul_shared_right_rows_of_one", "MatMul", {"x": lambda: randn(7, 1, 8)}, {"w": randn(8, 6)})
case("MatMul_shared_right_batched", "MatMul", {"x": lambda: randn(2, 3, 5, 8), "w": lambda: randn(8, 6)})
case("MatMul_batched_left_vector_right", "MatMul", {"x": lambda: randn(3, 4, 8)}, {"w": randn(8)})

# ---- transformer ops of opset 23 ---------------------------------------------------------------------
QKV = {"q": lambda: randn(2, 4, 5, 8), "k": lambda: randn(2, 2, 7, 8), "v": lambda: randn(2, 2, 7, 6)}
case("Attention_4d_gqa", "Attention", QKV, opset=23)
case("Attention_4d_causal_softcap", "Attention", QKV, opset=23, is_causal=1, softcap=2.0, scale=0.3)
MASKED = np.ones((2, 1, 5, 7), dtype=bool)
MASKED[1, 0, :, 5:] = False
MASKED[0, 0, 2, :] = False  # a query row with every key masked: zeros, not NaN
case("Attention_bool_mask_runtime", "Attention", {**QKV, "m": lambda: MASKED}, opset=23)
case(
    "Attention_3d_float_mask",
    "Attention",
    {"q": lambda: randn(2, 5, 16), "k": lambda: randn(2, 6, 16), "v": lambda: randn(2, 6, 16)},
    {"m": randn(5, 6)},
    opset=23,
    q_num_heads=4,
    kv_num_heads=4,
)
case(
    "Attention_past_present",
    "Attention",
    {**QKV, "pk": lambda: randn(2, 2, 3, 8), "pv": lambda: randn(2, 2, 3, 6)},
    n_outputs=3,
    opset=23,
    is_causal=1,
    input_order=["q", "k", "v", "", "pk", "pv"],
)
case(
    "RMSNormalization",
    "RMSNormalization",
    {"x": lambda: randn(2, 5, 16) * 3 + 1},
    {"s": randn(16)},
    opset=23,
    epsilon=1e-4,
)
for interleaved in (0, 1):
    case(
        f"RotaryEmbedding_{'interleaved' if interleaved else 'halves'}",
        "RotaryEmbedding",
        {"x": lambda: randn(2, 3, 5, 8), "pos": lambda: np.array([[0, 1, 2, 3, 4], [4, 5, 6, 7, 8]], I64)},
        {"cos": np.cos(randn(10, 3)), "sin": np.sin(randn(10, 3))},
        opset=23,
        interleaved=interleaved,
        rotary_embedding_dim=6,
        input_order=["x", "cos", "sin", "pos"],
    )
case(
    "RotaryEmbedding_3d",
    "RotaryEmbedding",
    {
        "x": lambda: randn(2, 5, 16),
        "cos": lambda: np.cos(randn(2, 5, 2)),
        "sin": lambda: np.sin(randn(2, 5, 2)),
    },
    opset=23,
    num_heads=4,
)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_onnxruntime(name: str) -> None:
    model, feeds = CASES[name]()
    check_against_ort(model, feeds)


def test_call_names_carry_the_onnx_node_name() -> None:
    model, feeds = single_op("Conv", {"x": randn(1, 2, 5, 5)}, {"w": randn(3, 2, 3, 3), "b": randn(3)})
    graph = check_against_ort(model, feeds)
    assert {c.name for c in graph.calls()} == {"node"}
    assert [c.op for c in graph.calls()] == ["conv2d", "add"]


def test_random_slices_match_onnxruntime() -> None:
    """ONNX clamps a negative-step start to [0, dim - 1] (numpy would select nothing): follow onnxruntime."""
    rng = np.random.default_rng(4)
    for _ in range(60):
        dims = [int(d) for d in rng.integers(1, 6, 2)]
        axis = int(rng.integers(-2, 2))
        start, end = (int(v) for v in rng.integers(-8, 9, 2))
        step = int(rng.choice([-3, -2, -1, 1, 2, 3]))
        if rng.random() < 0.2:
            end = -(2**62) if step < 0 else 2**62
        consts = {"s": ints(start), "e": ints(end), "a": ints(axis), "p": ints(step)}
        model, feeds = single_op("Slice", {"x": randn(*dims)}, consts)
        check_against_ort(model, feeds)
