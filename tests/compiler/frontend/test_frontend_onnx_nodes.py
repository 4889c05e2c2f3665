"""onnx's own node test cases through the frontend and the reference interpreter (no compilation).

Every case whose nodes the frontend converts (default domain, the native opsets) must either match onnx's
expected outputs or fail with a typed error for a documented reason. Integer inputs and the float
inputs that ONNX ops take as parameters (Clip bounds, Resize scales) become constants, as they are
in real models; other inputs stay runtime inputs with their shapes bound from the test data.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from compiler.errors import ShapeError, UnsupportedOpError
from compiler.frontend.onnx import CONVERTERS, NATIVE_OPSETS, load_onnx
from compiler.graph.interpret import run_graph
from tests.compiler.frontend.onnx_check import run_ort

PARAMETER_INPUTS = {"min", "max", "scales", "sizes", "roi"}
# Inputs that real models give as constants, by op and input position (Pad's value, Dropout's ratio
# and training mode); the test cases feed them as graph inputs.
PARAMETER_POSITIONS = {"Pad": {1, 2, 3}, "Dropout": {1, 2}}
# ShapeErrors that are temper's documented limits, not bugs.
ACCEPTED_SHAPE_ERRORS = re.compile(
    r"has dtype (u?int8|bool)"  # 8-bit integers and bool arithmetic are outside temper's dtypes
    r"|bound shape .* must be positive"  # zero-sized tensors
    r"|Attention with nonpad_kv_seqlen"  # an external KV cache with per-sequence lengths
    r"|Dropout in training mode"  # random masks: temper compiles inference
)


# Cases where onnx's reference outputs and onnxruntime disagree: temper follows onnxruntime there.
FOLLOWS_ONNXRUNTIME = {
    "test_resize_downsample_scales_linear_align_corners": "onnx's reference maps align_corners with the "
    "fractional resized length (in * scale), onnxruntime with the integer output length",
    "test_resize_downsample_scales_cubic_align_corners": "the same mapping, for cubic sampling",
}


def _cases() -> list:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model_tests(kind="node")


def _claimed(model: onnx.ModelProto) -> bool:
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return (
        bool(versions)
        and max(versions) in NATIVE_OPSETS
        and all(n.op_type in CONVERTERS and n.domain in ("", "ai.onnx") for n in model.graph.node)
    )


def _run_case(case) -> str | None:
    """None when the case passes or fails for an accepted reason, else a description."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    inputs, expected = case.data_sets[0]
    expected = [numpy_helper.to_array(e) if isinstance(e, onnx.TensorProto) else e for e in expected]
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    parameters = set(PARAMETER_INPUTS)
    for node in model.graph.node:
        positions = PARAMETER_POSITIONS.get(node.op_type, set())
        parameters.update(n for i, n in enumerate(node.input) if i in positions)
    feeds, shapes = {}, {}
    for name, value in zip(names, inputs, strict=False):
        arr = numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
        if arr.dtype.kind in "iu" or name in parameters:
            model.graph.initializer.append(numpy_helper.from_array(arr, name))
        else:
            feeds[name], shapes[name] = arr, arr.shape
    try:
        outputs = run_graph(load_onnx(model, shapes), feeds)
    except UnsupportedOpError:
        return None
    except ShapeError as e:
        return None if ACCEPTED_SHAPE_ERRORS.search(str(e)) else f"ShapeError: {e}"
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    if case.name in FOLLOWS_ONNXRUNTIME:
        expected = run_ort(case.model, dict(zip(names, inputs, strict=False)))
        expected = [expected[o.name] for o in model.graph.output]
    for out, want in zip(model.graph.output, expected, strict=True):
        got, want = outputs[out.name], np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"output {out.name}: {got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
        if not np.allclose(got, want, rtol=case.rtol, atol=max(case.atol, 1e-5), equal_nan=True):
            return f"output {out.name}: max error {np.max(np.abs(got.astype(float) - want.astype(float)))}"
    return None


def test_onnx_node_cases_match_or_fail_for_documented_reasons() -> None:
    claimed = [c for c in _cases() if _claimed(c.model)]
    assert len(claimed) > 400
    failures = {c.name: why for c in claimed if (why := _run_case(c)) is not None}
    assert not failures, "\n".join(f"{k}: {v}" for k, v in sorted(failures.items()))
