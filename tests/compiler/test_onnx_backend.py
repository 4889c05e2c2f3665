"""ONNX backend conformance: onnx's own node tests for every op temper claims, run through TemperBackend.

Each case is a small model with reference inputs and outputs; the backend compiles it with the real
pipeline and runs the artifact. `CLAIMED_OPS` selects the cases of the ops temper supports; `EXCLUDED`
lists, with a reason, the cases temper deliberately does not support (other dtypes, training mode, ...).

The cases compile at `OPT_LEVEL` 3, the level users get: measured, the ~350 compilations take about 30 s
at level 3 and hardly less at level 1, so nothing is gained by testing a less used path. The model
tests cover level 0.

onnx writes each case at the newest opset of its op, and re-versioned many ops at opsets 22-25 only to
admit new element types (bfloat16, float8, 4- and 2-bit types). When every node of a case has the same
signature (attributes, inputs, outputs) at the newest opset temper supports, the harness relabels the
case to that opset (`_relabel_opset`): for fp32 it is the same model, and the ops keep their coverage.
A case whose ops really changed (Cast gained an attribute at 25) is left as it is.
"""

from __future__ import annotations

import functools
import re
import unittest
import warnings
from typing import Any

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.loader import load_model_tests

from compiler.backend import TemperBackend, TemperBackendRep
from compiler.frontend.onnx import NATIVE_OPSETS

OPT_LEVEL = 3

CLAIMED_OPS: dict[str, str] = {
    # op -> regex of its case names after "test_" (a case is "test_<stem>_<variant>_cpu")
    "Conv": r"basic_conv|conv_with",
    "ConvTranspose": r"convtranspose",
    "Col2Im": r"col2im",
    "DFT": r"dft",
    "STFT": r"stft",
    "LRN": r"lrn",
    "LSTM": r"lstm",
    "GRU": r"gru",
    "RNN": r"simple_rnn|rnn",
    "Gemm": r"gemm",
    "MatMul": r"matmul",
    "Add": r"add",
    "Sub": r"sub",
    "Mul": r"mul",
    "Div": r"div",
    "Pow": r"pow",
    "Sqrt": r"sqrt",
    "Reciprocal": r"reciprocal",
    "Neg": r"neg",
    "Abs": r"abs",
    "Exp": r"exp",
    "Log": r"log",
    "Erf": r"erf",
    "Sin": r"sin",  # "test_sinh_" is another op's: the stem is followed by "_"
    "Cos": r"cos",
    "Tan": r"tan",  # "test_tanh_" is Tanh's (the stem is followed by "_")
    "Asin": r"asin",
    "Acos": r"acos",
    "Atan": r"atan",
    "Sinh": r"sinh",
    "Cosh": r"cosh",
    "Asinh": r"asinh",
    "Acosh": r"acosh",
    "Atanh": r"atanh",
    "Shrink": r"shrink",
    "Tanh": r"tanh",
    "Sigmoid": r"sigmoid",
    "Relu": r"relu",
    "PRelu": r"prelu",
    "LeakyRelu": r"leakyrelu",
    "Clip": r"clip",
    "HardSigmoid": r"hardsigmoid",
    "HardSwish": r"hardswish",
    "Gelu": r"gelu",
    "Min": r"min",
    "Max": r"max",
    "Equal": r"equal",
    "Less": r"less(?!_equal)",  # LessOrEqual is another op
    "Greater": r"greater(?!_equal)",
    "Where": r"where",
    "BatchNormalization": r"batchnorm",
    "LayerNormalization": r"layer_normalization",
    "MaxPool": r"maxpool",
    "AveragePool": r"averagepool",
    "GlobalAveragePool": r"globalaveragepool",
    "Softmax": r"softmax(?!_cross_entropy)",  # SoftmaxCrossEntropyLoss is another op
    "LogSoftmax": r"logsoftmax",
    "ReduceMean": r"reduce_mean",
    "ReduceSum": r"reduce_sum(?!_square)",  # ReduceSumSquare is another op
    "ReduceMax": r"reduce_max",
    "ReduceProd": r"reduce_prod",
    "ReduceLogSum": r"reduce_log_sum(?!_exp)",  # ReduceLogSumExp is another op
    "ReduceLogSumExp": r"reduce_log_sum_exp",
    "CumProd": r"cumprod",
    "Reshape": r"reshape",
    "Flatten": r"flatten",
    "Transpose": r"transpose",
    "Concat": r"concat",
    "Split": r"split(?!_to_sequence)",  # SplitToSequence is another op
    "Slice": r"slice",
    "Gather": r"gather(?!_elements)",  # GatherElements is another op
    "Squeeze": r"squeeze",
    "Unsqueeze": r"unsqueeze",
    "Expand": r"expand",
    "Shape": r"shape",
    "Constant": r"constant",
    "ConstantOfShape": r"constantofshape",
    "Cast": r"cast",
    "Identity": r"identity",
    "Dropout": r"dropout|training_dropout",
    "Pad": r"(?:constant|edge|reflect|wrap)_pad",
    "Resize": r"resize",
    "GridSample": r"gridsample",
    "AffineGrid": r"affine_grid",
    "Hardmax": r"hardmax",
    "LpNormalization": r"l1normalization|l2normalization|lpnormalization",
    "MeanVarianceNormalization": r"mvn",
    "LpPool": r"lppool",
    "OneHot": r"onehot",
    "EyeLike": r"eyelike",
    "CenterCropPad": r"center_crop_pad",
    "QuantizeLinear": r"quantizelinear",
    "DequantizeLinear": r"dequantizelinear",
    "DynamicQuantizeLinear": r"dynamicquantizelinear",
    "MatMulInteger": r"matmulinteger",
    "ConvInteger": r"convinteger",
}

_FP32 = "temper's tensors are float32 (float16 at a model's edges), int32, int64 and bool"

EXCLUDED: dict[str, str] = {
    # -- data types ---------------------------------------------------------------------------------
    r"^test_cast_": f"every onnx Cast case converts from or to float16, double, bfloat16, float8, float4, "
    f"int4 or int2; {_FP32} (fp32<->int64 Cast is tested below)",
    r"_u?int(?:8|16)_|_uint(?:32|64)_": f"8/16-bit and unsigned integer tensors; {_FP32}",
    r"_float(?:16|64)_": f"half and double precision tensors; {_FP32}",
    r"^test_equal_string": "string tensors (temper computes on numbers only)",
    r"^test_reduce_log_sum_exp_": "every onnx ReduceLogSumExp case is double precision (its expanded form "
    f"casts to double); {_FP32} (test_reduce_log_sum_exp_fp32 below runs float32 cases)",
    r"^test_cumprod_(?!\w*_int32)": f"onnx's float CumProd cases are double precision; {_FP32} "
    "(its int32 cases run)",
    r"^test_wrap_pad_": "Pad mode 'wrap' (constant, reflect and edge are supported)",
    # -- shapes ------------------------------------------------------------------------------------
    r"_empty_set_|^test_split_zero_size_splits_|^test_reshape_allowzero_reordered_": "zero-sized tensors "
    "(a dimension of 0): temper's kernels and static memory plan assume every tensor holds elements",
    r"^test_(?:de)?quantizelinear": "a lone QuantizeLinear (its integers the output) or DequantizeLinear (of "
    "an integer input): temper carries a QDQ model's integers in float32 between its pairs; "
    "tests/compiler/frontend/test_convert_quant.py runs them so",
    r"^test_(?:dynamicquantizelinear|matmulinteger|convinteger)": "8-bit integers as the model's inputs or "
    "outputs: temper carries a dynamically quantized model's integers in float32 inside it; "
    "tests/compiler/frontend/test_convert_quant.py runs these ops so",
    r"^test_lppool_3d_": "3-D LpPool (temper's are 1-D and 2-D)",
    r"^test_lppool_2d_dilations": "dilated LpPool (opset 18): no exported model uses it",
    r"^test_onehot_": "OneHot's depth fed at run time: temper needs it at compile time (the output's shape); "
    "tests/compiler/frontend/test_frontend_ops.py runs OneHot with a constant depth",
    r"^test_center_crop_pad_": "CenterCropPad's target shape fed at run time: temper needs it at compile "
    "time; tests/compiler/frontend/test_frontend_ops.py runs it with a constant shape",
    r"^test_col2im_5d": "Col2Im of a 3-D image: temper's transposed convolution is 2-D (NCHW)",
    r"^test_affine_grid_3d": "volumetric affine grids (theta [N, 3, 4]): temper's AffineGrid and "
    "GridSample are 2-D",
    r"^test_affine_grid_2d.*_expanded": "AffineGrid's expanded function branches on the size's length "
    "with If (control flow): temper compiles straight-line graphs",
    r"^test_gridsample_volumetric_": "volumetric grid sampling (a 5-D input): temper's GridSample "
    "samples 2-D images (N x C x H x W)",
    # -- training-only features ------------------------------------------------------------------------
    r"_training_mode_|^test_training_dropout": "training-mode BatchNormalization/Dropout (batch statistics, "
    "random masks): temper compiles inference graphs",
    r"^test_dropout_default_mask": "Dropout's optional mask output: only training graphs consume it",
    r"^test_maxpool_with_argmax_": "MaxPool's optional Indices output: only training graphs use it",
    r"^test_layer_normalization_": "LayerNormalization's optional Mean/InvStdDev outputs (kept for "
    "training): every onnx case asks for them (the expanded forms also use Size), so "
    "test_layer_normalization_y_only runs the cases for Y alone",
    # -- opsets and types outside the tensor world ---------------------------------------------------------
    r"^test_dropout_(?:default|random)_old_": "opset 11 Dropout: temper supports the opset-13-and-later "
    "definitions of the ops it claims",
    r"^test_identity_(?:opt|sequence)_": "optional and sequence types: temper's graphs hold tensors only",
    # -- Resize modes ------------------------------------------------------------------------------------
    r"^test_resize_.*antialias": "Resize antialias=1 (a filtered downsample): temper samples plainly",
    r"^test_resize_tf_crop_and_resize": "Resize coordinate mode tf_crop_and_resize (an ROI input)",
    r"^test_resize_\w*_not_(?:larger|smaller)_": "Resize keep_aspect_ratio_policy other than 'stretch'",
    r"^test_averagepool_[23]d_dilations_": "dilated AveragePool (opset 19): no exported model uses it",
    r"^test_(?:averagepool_2d_ceil_last_window_starts_on_pad|maxpool_2d_ceil_output_size_reduce_by_one)_": (
        "a ceil_mode edge case whose output size the opset-22 pooling definition changed (a last window "
        "that starts in the padding is dropped); relabelled to opset 21 it has the older, different shape"
    ),
    r"^test_resize_downsample_scales_(?:linear|cubic)_align_corners_": "onnx's reference maps align_corners "
    "with the fractional resized length (in * scale), onnxruntime with the integer output length; temper "
    "follows onnxruntime, which the model tests compare against",
    # -- DFT ---------------------------------------------------------------------------------------------
    r"^test_dft(?:_axis|_inverse|_rfft|_irfft)?_cpu$": "DFT at opset 20 with its axis fed as a graph input: "
    "the axis decides the graph, so temper needs it at compile time, as exports give it (a constant); "
    "tests/compiler/frontend/test_convert_signal.py runs these transforms with constant axes",
    r"^test_dft_inverse_opset19_": "its expected imaginary parts are the reference's float32 rounding "
    "(about 2e-7 where the exact result is 0), above this harness's atol of 1e-7; temper's are about "
    "3e-15 (its matrix is rounded from float64 once); the inverses are checked against float64 in "
    "tests/compiler/frontend/test_convert_signal.py",
    r"^test_stft_": "STFT with its frame_step fed as a graph input: the step decides the frames, so temper "
    "needs it at compile time, as exports give it (a constant); "
    "tests/compiler/frontend/test_convert_signal.py runs STFTs with constant steps, windows and lengths "
    "against numpy and onnxruntime",
    # -- function expansions that bring in ops temper does not claim ------------------------------------
    r"^test_(?:gelu|leakyrelu|prelu|relu|hardsigmoid)\w*_expanded": "the expanded function body uses "
    "CastLike (and Sum), which temper does not claim; the op itself is tested",
}

KNOWN_BUGS: dict[str, str] = {
    # Cases temper should pass and does not yet: run as expected failures, so a fix shows up as an
    # unexpected success (reported as a failure) and the entry must then be removed.
}


def _included(name: str) -> bool:
    return name.endswith("_cpu") and any(
        re.match(rf"test_(?:{stem})_", name) for stem in CLAIMED_OPS.values()
    )


def _exclusion(name: str) -> str | None:
    for pattern, reason in EXCLUDED.items():
        if re.search(pattern, name):
            return reason
    return None


@functools.cache
def _node_cases() -> tuple[Any, ...]:
    """onnx's node cases (generating them makes numpy warn about the inf/nan its cases compute on purpose)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return tuple(load_model_tests(kind="node"))


def _node_case_names() -> tuple[str, ...]:
    return tuple(sorted(f"{case.name}_cpu" for case in _node_cases()))


def _signature(op_type: str, opset: int) -> tuple[Any, ...]:
    """What an op's definition at `opset` means to a model, apart from the element types it admits."""
    schema = onnx.defs.get_schema(op_type, opset)
    attributes = {
        name: (int(a.type), a.required, a.default_value.SerializeToString())
        for name, a in schema.attributes.items()
    }
    inputs = [(p.name, int(p.option), p.is_homogeneous) for p in schema.inputs]
    outputs = [(p.name, int(p.option), p.is_homogeneous) for p in schema.outputs]
    return (
        attributes,
        inputs,
        outputs,
        schema.min_input,
        schema.max_input,
        schema.min_output,
        schema.max_output,
    )


def _relabel_opset(model: onnx.ModelProto, newest: int) -> onnx.ModelProto:
    """`model` at opset `newest` when that changes no node's signature (see the module docstring)."""
    (opset,) = [o for o in model.opset_import if o.domain in ("", "ai.onnx")] or [None]
    if opset is None or opset.version <= newest:
        return model
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            return model
        try:
            if _signature(node.op_type, newest) != _signature(node.op_type, opset.version):
                return model
        except onnx.defs.SchemaError:  # the op did not exist yet at `newest`
            return model
    relabelled = onnx.ModelProto()
    relabelled.CopyFrom(model)
    for entry in relabelled.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = newest
    return relabelled


class ConformanceBackend(TemperBackend):
    """TemperBackend at the conformance run's opt level, on cases relabelled to a supported opset."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto | bytes, device: str = "CPU", **kwargs: Any) -> TemperBackendRep:
        if isinstance(model, bytes):
            model = onnx.load_from_string(model)
        kwargs.setdefault("opt_level", OPT_LEVEL)
        return super().prepare(_relabel_opset(model, NATIVE_OPSETS.stop - 1), device, **kwargs)


def _conformance_cases() -> type[unittest.TestCase]:
    """onnx's node-test TestCase, trimmed to the included cases, excluded ones skipped with their reason."""
    _node_cases()  # generate the cases once, quietly; the runner below reuses onnx's generated list
    case = onnx.backend.test.BackendTest(ConformanceBackend, __name__).test_cases["OnnxBackendNodeModelTest"]
    for name in [n for n in vars(case) if n.startswith("test_")]:
        if not _included(name):
            delattr(case, name)
        elif (reason := _exclusion(name)) is not None:
            setattr(case, name, unittest.skip(reason)(getattr(case, name)))
        elif any(re.search(pattern, name) for pattern in KNOWN_BUGS):
            setattr(case, name, unittest.expectedFailure(getattr(case, name)))
    return case


OnnxBackendNodeModelTest = _conformance_cases()


# -- harness checks (no compiler needed) ----------------------------------------------------------


def test_every_claimed_op_has_running_cases() -> None:
    names = _node_case_names()
    # Every onnx case of these needs something temper leaves out: covered by the tests below instead
    # (STFT: by tests/compiler/frontend/test_convert_signal.py; OneHot and CenterCropPad by
    # tests/compiler/frontend/test_frontend_ops.py; ReduceLogSumExp also by
    # tests/compiler/frontend/test_convert_math_extra.py; the quantization ops by
    # tests/compiler/frontend/test_convert_quant.py).
    without_cases = {
        "Cast",
        "CenterCropPad",
        "ConvInteger",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "LayerNormalization",
        "MatMulInteger",
        "OneHot",
        "QuantizeLinear",
        "ReduceLogSumExp",
        "STFT",
    }
    for op, stem in CLAIMED_OPS.items():
        running = [n for n in names if re.match(rf"test_(?:{stem})_", n) and _exclusion(n) is None]
        if op in without_cases:
            assert not running, f"{op} now has onnx cases temper can run: drop it from without_cases"
        else:
            assert running, f"no conformance case runs for {op} (pattern {stem!r})"


def test_every_exclusion_matches_an_included_case() -> None:
    included = [n for n in _node_case_names() if _included(n)]
    for pattern in [*EXCLUDED, *KNOWN_BUGS]:
        assert any(re.search(pattern, n) for n in included), f"stale entry {pattern!r}"


def test_relabel_keeps_type_only_revisions_and_refuses_real_changes() -> None:
    conv = _single_node_model(
        "Conv",
        [("x", TensorProto.FLOAT, [1, 1, 3, 3]), ("w", TensorProto.FLOAT, [1, 1, 1, 1])],
        [("y", TensorProto.FLOAT, [1, 1, 3, 3])],
        opset=22,
    )
    relabelled = _relabel_opset(conv, 21)
    assert relabelled.opset_import[0].version == 21 and conv.opset_import[0].version == 22
    onnx.checker.check_model(relabelled)
    cast = _single_node_model(
        "Cast",
        [("x", TensorProto.FLOAT, [2])],
        [("y", TensorProto.INT64, [2])],
        opset=25,
        to=TensorProto.INT64,
    )
    assert _relabel_opset(cast, 21).opset_import[0].version == 25  # Cast-25 added an attribute


def test_backend_is_cpu_only() -> None:
    assert TemperBackend.supports_device("CPU")
    assert not TemperBackend.supports_device("CUDA")
    assert not TemperBackend.supports_device("TPU")
    model = _single_node_model("Relu", [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ValueError, match="CPU only"):
        TemperBackend.prepare(model, "CUDA")


def test_backend_rejects_unknown_options() -> None:
    model = _single_node_model("Relu", [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    with pytest.raises(TypeError, match="bogus"):
        TemperBackend.prepare(model, bogus=1)
    rep = TemperBackend.prepare(model, rtol=1e-3, atol=1e-7)  # the test runner's checking keywords
    assert rep.input_names == ("x",)
    with pytest.raises(ValueError, match="takes 1 input"):
        rep.run([np.zeros(2, np.float32), np.zeros(2, np.float32)])
    with pytest.raises(ValueError, match="missing"):
        rep.run({"z": np.zeros(2, np.float32)})


def test_backend_rejects_invalid_model() -> None:
    model = _single_node_model("Relu", [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    model.graph.node[0].input[0] = "undefined"
    with pytest.raises(onnx.checker.ValidationError):
        TemperBackend.prepare(model)


# -- fp32 cases for the claimed ops whose onnx cases all use other dtypes --------------------------


def _single_node_model(
    op: str,
    inputs: list[tuple[str, int, list[int | str]]],
    outputs: list[tuple[str, int, list[int | str]]],
    *,
    opset: int = 17,
    **attrs: Any,
) -> onnx.ModelProto:
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], **attrs)
    graph = helper.make_graph(
        [node],
        f"{op.lower()}_case",
        [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*spec) for spec in outputs],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8 if opset <= 17 else 10
    )


def test_cast_fp32_int64_round_trip(rng: np.random.Generator) -> None:
    to_int = _single_node_model(
        "Cast", [("x", TensorProto.FLOAT, [3, 4])], [("y", TensorProto.INT64, [3, 4])], to=TensorProto.INT64
    )
    x = (rng.standard_normal((3, 4)) * 10).astype(np.float32)
    (y,) = ConformanceBackend.run_model(to_int, [x])
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, x.astype(np.int64))  # truncation toward zero
    to_float = _single_node_model(
        "Cast", [("i", TensorProto.INT64, [5])], [("f", TensorProto.FLOAT, [5])], to=TensorProto.FLOAT
    )
    i = np.array([-3, 0, 7, 1 << 20, -(1 << 20)], np.int64)
    (f,) = ConformanceBackend.run_model(to_float, [i])
    assert f.dtype == np.float32
    np.testing.assert_array_equal(f, i.astype(np.float32))


def test_reduce_log_sum_exp_fp32(rng: np.random.Generator) -> None:
    """onnx's own cases in float32: axes [1] kept (opset 13, an attribute), every axis dropped (the
    default, opset 18)."""
    x = rng.uniform(0, 1, (3, 2, 2)).astype(np.float32)
    for opset, axes, keepdims in [(13, [1], 1), (18, None, 0)]:
        attrs: dict[str, Any] = (
            {"keepdims": keepdims} if axes is None else {"keepdims": keepdims, "axes": axes}
        )
        out: list[int | str] = [3, 1, 2] if keepdims else []
        model = _single_node_model(
            "ReduceLogSumExp",
            [("x", TensorProto.FLOAT, [3, 2, 2])],
            [("y", TensorProto.FLOAT, out)],
            opset=opset,
            **attrs,
        )
        (y,) = ConformanceBackend.run_model(model, [x])
        reduced = None if axes is None else tuple(axes)
        want = np.log(np.sum(np.exp(x.astype(np.float64)), axis=reduced, keepdims=bool(keepdims)))
        np.testing.assert_allclose(y, want, rtol=1e-6)


def test_equal_fp32_broadcast() -> None:
    model = _single_node_model(
        "Equal",
        [("a", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [3])],
        [("c", TensorProto.BOOL, [2, 3])],
    )
    a = np.array([[1, 2, 3], [4, 2, 0]], np.float32)
    b = np.array([4, 2, 3], np.float32)
    (c,) = ConformanceBackend.run_model(model, [a, b])
    assert c.dtype == np.bool_
    np.testing.assert_array_equal(c, a == b)


def test_backend_binds_dynamic_dims_per_signature(rng: np.random.Generator) -> None:
    model = _single_node_model(
        "Relu", [("x", TensorProto.FLOAT, ["N", 4])], [("y", TensorProto.FLOAT, ["N", 4])]
    )
    rep = ConformanceBackend.prepare(model)
    for batch in (1, 3, 1):
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        outputs = rep.run([x])
        np.testing.assert_array_equal(outputs[0], np.maximum(x, 0))
        np.testing.assert_array_equal(outputs["y"], outputs[0])


def _layer_normalization_cases() -> list[Any]:
    return [
        case
        for case in _node_cases()
        if case.name.startswith("test_layer_normalization_") and "_expanded" not in case.name
    ]


@pytest.mark.parametrize("case", _layer_normalization_cases(), ids=lambda c: c.name)
def test_layer_normalization_y_only(case: Any) -> None:
    """onnx's LayerNormalization cases as inference graphs: only output Y is asked for and compared."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    del model.graph.output[1:]
    model.graph.node[0].output[1:] = []
    inputs, expected = case.data_sets[0]
    (y,) = ConformanceBackend.run_model(model, list(inputs))
    np.testing.assert_allclose(y, expected[0], rtol=case.rtol, atol=max(case.atol, 1e-6))
