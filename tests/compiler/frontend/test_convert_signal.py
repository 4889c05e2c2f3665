"""DFT, compiled and run, against numpy's FFT in float64 (the transform's definition, which ONNX's
reference implementation matches exactly) and against onnxruntime; and every node it refuses, named.

onnxruntime's float32 FFT is less exact than temper's matrix (whose coefficients are rounded from
float64 once): the comparisons with it allow its own error, a few 1e-5 of the spectrum's magnitude.
For an inverse one-sided transform whose half spectrum does not have dft_length / 2 + 1 bins,
onnxruntime pads or cuts differently from the ONNX reference; temper follows the reference there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compiler.errors import CompilerError, UnsupportedOpError
from compiler.frontend.convert_signal import MAX_DFT_MATRIX_ELEMENTS
from compiler.frontend.onnx import load_onnx
from tests.compiler.frontend.onnx_check import make_model, run_ort
from tests.compiler.test_compiled_ops import compile_and_run


def _model(
    shape: tuple[int, ...],
    *,
    axis: int = 1,
    n: int | None = None,
    inverse: int = 0,
    onesided: int = 0,
    opset: int = 17,
    dtype: int = TensorProto.FLOAT,
):  # type: ignore[no-untyped-def]
    """One DFT node on a signal x of `shape`; dft_length (and, from opset 20, the axis) as constants."""
    inputs, inits = ["x", "n" if n is not None else ""], {}
    if n is not None:
        inits["n"] = np.array(n, np.int64)
    attrs: dict[str, int] = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        inputs.append("axis")
        inits["axis"] = np.array(axis, np.int64)
    else:
        attrs["axis"] = axis
    node = helper.make_node("DFT", inputs, ["y"], name="the_dft", **attrs)
    return make_model([node], {"x": (dtype, shape)}, ["y"], inits, opset=opset)


def _numpy_dft(x: np.ndarray, axis: int, n: int | None, inverse: bool, onesided: bool) -> np.ndarray:
    """The transform in float64 by numpy: [..., parts] in, [..., 2] (or [..., 1] for an IRFFT) out."""
    axis = axis + x.ndim if axis < 0 else axis
    signal = x[..., 0].astype(np.float64)
    if x.shape[-1] == 2:
        signal = signal + 1j * x[..., 1]
    if inverse and onesided:
        return np.fft.irfft(signal, n=n, axis=axis)[..., None]
    if onesided:
        spectrum = np.fft.rfft(signal, n=n, axis=axis)
    else:
        spectrum = (np.fft.ifft if inverse else np.fft.fft)(signal, n=n, axis=axis)
    return np.stack([spectrum.real, spectrum.imag], axis=-1)


def _cases(count: int, seed: int) -> list[tuple[tuple[int, ...], int, int | None, int, int, int]]:
    """Random (shape, axis, dft_length, inverse, onesided, opset): real and complex signals of rank
    3 and 4, every axis, lengths kept, padded and cut, both ONNX spellings of the axis."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        rank = int(rng.integers(3, 5))
        inverse, onesided = int(rng.integers(0, 2)), int(rng.integers(0, 2))
        parts = 2 if (inverse and onesided) or (not onesided and rng.random() < 0.5) else 1
        shape = (*(int(d) for d in rng.integers(1, 9, rank - 1)), parts)
        axis = int(rng.integers(0, rank - 1))
        if rng.random() < 0.5:
            axis -= rank
        n = None if rng.random() < 0.4 else int(rng.integers(1, 13))
        if inverse and onesided and n is None and shape[axis] < 2:
            n = 2  # the default length 2 (bins - 1) needs two bins at least
        opset = 17 if rng.random() < 0.5 else 20
        out.append((shape, axis, n, inverse, onesided, opset))
    return out


@pytest.mark.parametrize(("shape", "axis", "n", "inverse", "onesided", "opset"), _cases(24, seed=5))
def test_random_dfts_match_numpy_and_onnxruntime(
    shape: tuple[int, ...], axis: int, n: int | None, inverse: int, onesided: int, opset: int, tmp_path: Path
) -> None:
    x = np.random.default_rng(len(shape) + axis).standard_normal(shape).astype(np.float32)
    model = _model(shape, axis=axis, n=n, inverse=inverse, onesided=onesided, opset=opset)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    want = _numpy_dft(x, axis, n, bool(inverse), bool(onesided))
    assert got.shape == want.shape and got.dtype == np.float32
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, atol=2e-6 * scale, rtol=0)
    bins = shape[axis]
    if inverse and onesided and n is not None and bins != n // 2 + 1:
        return  # onnxruntime pads or cuts such a half spectrum otherwise (module docstring)
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], atol=1e-4 * scale, rtol=0)


@pytest.mark.parametrize("length", [400, 512, 1024])
def test_audio_frame_lengths_are_more_exact_than_onnxruntime(length: int, tmp_path: Path) -> None:
    """Real frames of a speech front end's sizes, one-sided: within float32 rounding of the exact
    spectrum, and no further from it than onnxruntime's."""
    x = np.random.default_rng(length).standard_normal((3, length, 1)).astype(np.float32)
    model = _model(x.shape, onesided=1, opset=20)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    want = _numpy_dft(x, 1, None, False, True)
    theirs = run_ort(model, {"x": x})["y"]
    ours_error, their_error = np.abs(got - want).max(), np.abs(theirs - want).max()
    assert ours_error <= 1e-6 * np.abs(want).max() * np.sqrt(length)
    assert ours_error <= their_error * 1.5


def test_a_float16_signal_is_transformed_in_float16(tmp_path: Path) -> None:
    x = np.random.default_rng(1).standard_normal((2, 33, 2)).astype(np.float16)
    model = _model(x.shape, dtype=TensorProto.FLOAT16)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    assert got.dtype == np.float16
    want = _numpy_dft(x, 1, None, False, False)
    np.testing.assert_allclose(got, want, atol=2e-3 * np.abs(want).max(), rtol=0)


def test_dft_imports_at_both_ends_of_its_opsets_and_not_before() -> None:
    from compiler.errors import ModelError
    from compiler.frontend.catalog import supported_ops
    from compiler.frontend.onnx import import_model

    (op,) = [o for o in supported_ops() if o.name == "DFT"]
    for opset in (op.min_opset, op.max_opset):
        model = _model((1, 8, 1), opset=min(opset, 24))  # the axis an input as from opset 20
        model.opset_import[0].version, model.ir_version = opset, onnx.IR_VERSION
        imported = import_model(model.SerializeToString())
        assert imported.opset == opset and imported.graph.outputs
    model = _model((1, 8, 1), opset=op.min_opset)
    model.opset_import[0].version = op.min_opset - 1  # the same node where ONNX had no DFT
    with pytest.raises(ModelError, match="checker"):
        import_model(model.SerializeToString())


def _unchecked(shape: tuple[int, ...], inputs: list[str], inits: list[onnx.TensorProto], **attrs: int):  # type: ignore[no-untyped-def]
    """One DFT node, its output's dims left symbolic (no shape inference when built)."""
    node = helper.make_node("DFT", inputs, ["y"], name="the_dft", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(len(shape))])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# an axis out of range, as ONNX's shape inference or temper's own check words it
OUTSIDE = "(invalid for a tensor|outside a signal)"


@pytest.mark.parametrize(
    ("shape", "attrs", "message"),
    [
        ((2, 8, 2), {"onesided": 1}, "one-sided DFT (requires|needs a) real"),
        ((2, 8, 1), {"onesided": 1, "inverse": 1}, "inverse one-sided DFT (requires|needs a) complex"),
        ((2, 8, 3), {}, r"signal \[\.\.\., 1\] \(real\) or \[\.\.\., 2\] \(complex\), got shape \[2, 8, 3\]"),
        ((2, 8, 1), {"axis": 2}, f"axis (attribute value )?2 is {OUTSIDE} of rank 3"),
        ((2, 8, 1), {"axis": -4}, f"axis (attribute value )?-4 is {OUTSIDE} of rank 3"),
        ((2, 8, 1), {"n": 0}, "DFT length must be at least 1, got 0"),
        ((1, 4096, 2), {}, f"DFT of 4096 points over 4096 samples .* {MAX_DFT_MATRIX_ELEMENTS} elements"),
    ],
)
def test_a_dft_temper_cannot_compute_is_refused_naming_the_node(
    shape: tuple[int, ...], attrs: dict[str, int], message: str
) -> None:
    """By ONNX's shape inference (which the importer runs) or by temper's own checks, a typed error
    naming the node and what is wrong with it."""
    inputs, inits = ["x", "n" if "n" in attrs else ""], []
    if "n" in attrs:
        inits.append(helper.make_tensor("n", TensorProto.INT64, [], [attrs.pop("n")]))
    with pytest.raises(CompilerError, match=message) as caught:
        load_onnx(_unchecked(shape, inputs, inits, **attrs).SerializeToString())
    assert "the_dft" in str(caught.value)


def test_a_dft_length_computed_at_run_time_is_refused_before_conversion() -> None:
    model = _unchecked((2, 8, 1), ["x", "n"], [])
    model.graph.input.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    with pytest.raises(UnsupportedOpError, match="dft_length computed at run time"):
        load_onnx(model.SerializeToString())


def test_the_transform_matrices_count_against_the_models_constant_budget() -> None:
    """Each matrix is bounded by MAX_DFT_MATRIX_ELEMENTS and all of them together by the limits of the
    model's constants: a hostile model of many DFT nodes cannot make the compiler allocate without bound."""
    from compiler.limits import Limits

    nodes = [helper.make_node("DFT", ["x"], [f"y{i}"], name=f"dft_{i}", axis=1) for i in range(3)]
    outputs = [f"y{i}" for i in range(3)]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (2, 16, 1))}, outputs)
    per_node = 16 * 1 * 16 * 2
    assert load_onnx(model.SerializeToString(), limits=Limits(total_constant_elements=3 * per_node)).outputs
    with pytest.raises(CompilerError, match="outgrows the model's constant budget") as caught:
        load_onnx(model.SerializeToString(), limits=Limits(total_constant_elements=2 * per_node + 1))
    assert "dft_2" in str(caught.value)


# -- STFT ---------------------------------------------------------------------------------------------


def _stft_model(
    x_shape: tuple[int, ...], step: int, frame: int | None, window: np.ndarray | None, onesided: int
):  # type: ignore[no-untyped-def]
    """One STFT node; frame_step, the window and frame_length (each when given) as constants."""
    inputs, inits = ["x", "step", "", ""], {"step": np.array(step, np.int64)}
    if window is not None:
        inputs[2], inits["window"] = "window", window
    if frame is not None:
        inputs[3], inits["frame"] = "frame", np.array(frame, np.int64)
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node("STFT", inputs, ["y"], name="the_stft", onesided=onesided)
    return make_model([node], {"x": (TensorProto.FLOAT, x_shape)}, ["y"], inits, opset=17)


def _numpy_stft(
    x: np.ndarray, step: int, frame: int, window: np.ndarray | None, onesided: bool
) -> np.ndarray:
    """[batch, frames, bins, 2] in float64: frames every `step` samples, windowed, transformed."""
    signal = x.astype(np.float64) if x.ndim == 2 else x[..., 0].astype(np.float64)
    if x.ndim == 3 and x.shape[-1] == 2:
        signal = signal + 1j * x[..., 1]
    count = (signal.shape[1] - frame) // step + 1
    frames = signal[:, np.arange(count)[:, None] * step + np.arange(frame)[None, :]]
    if window is not None:
        frames = frames * window.astype(np.float64)
    spectrum = np.fft.rfft(frames, axis=-1) if onesided else np.fft.fft(frames, axis=-1)
    return np.stack([spectrum.real, spectrum.imag], axis=-1)


def _stft_cases(count: int, seed: int) -> list[tuple[tuple[int, ...], int, int, str, int]]:
    """Random (signal shape, frame_step, frame length, how the length is given, onesided): real
    signals of rank 2 and 3, complex ones, steps shorter and longer than the frames."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        frame = int(rng.integers(1, 33))
        length = frame + int(rng.integers(0, 80))
        onesided = int(rng.integers(0, 2))
        parts = 1 if onesided or rng.random() < 0.5 else 2
        shape = (int(rng.integers(1, 4)), length) + (() if parts == 1 and rng.random() < 0.5 else (parts,))
        given = ["window", "frame_length", "both"][int(rng.integers(0, 3))]
        out.append((shape, int(rng.integers(1, 2 * frame + 1)), frame, given, onesided))
    return out


@pytest.mark.parametrize(("shape", "step", "frame", "given", "onesided"), _stft_cases(16, seed=3))
def test_random_stfts_match_numpy_and_onnxruntime(
    shape: tuple[int, ...], step: int, frame: int, given: str, onesided: int, tmp_path: Path
) -> None:
    rng = np.random.default_rng(frame)
    x = rng.standard_normal(shape).astype(np.float32)
    window = rng.random(frame).astype(np.float32) if given != "frame_length" else None
    model = _stft_model(shape, step, frame if given != "window" else None, window, onesided)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    want = _numpy_stft(x, step, frame, window, bool(onesided))
    assert got.shape == want.shape and got.dtype == np.float32
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, atol=2e-6 * scale, rtol=0)
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], atol=1e-4 * scale, rtol=0)


def test_a_speech_front_end_spectrogram(tmp_path: Path) -> None:
    """One second of 16 kHz audio in 25 ms Hann frames every 10 ms, as PyTorch's exporter writes
    torch.stft (a [batch, samples] signal): within float32 rounding of the exact spectrum, and no
    further from it than onnxruntime's."""
    x = np.random.default_rng(0).standard_normal((2, 16000)).astype(np.float32)
    window = np.hanning(400).astype(np.float32)
    model = _stft_model(x.shape, 160, None, window, 1)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    want = _numpy_stft(x, 160, 400, window, True)
    theirs = run_ort(model, {"x": x})["y"]
    assert got.shape == want.shape == (2, 98, 201, 2)
    ours_error, their_error = np.abs(got - want).max(), np.abs(theirs - want).max()
    assert ours_error <= 1e-6 * np.abs(want).max() * np.sqrt(400)
    assert ours_error <= their_error * 1.5


@pytest.mark.parametrize(
    ("shape", "step", "frame", "window", "onesided", "message"),
    [
        ((1, 40, 2), 4, 8, None, 1, "one-sided STFT needs a real signal"),
        ((1, 6), 4, 8, None, 1, "frames of 8 samples do not fit a signal of 6"),
        ((1, 40), 0, 8, None, 1, "frame_step and a frame length of at least 1, got 0 and 8"),
        (
            (1, 40),
            4,
            6,
            np.ones(8, np.float32),
            1,
            "window must match the frame_length|frame_length 6 differs",
        ),
        (
            (1, 40),
            4,
            None,
            np.ones((2, 4), np.float32),
            1,
            "window input must have rank = 1|window must be one-dim",
        ),
        ((1, 40, 3), 4, 8, None, 0, r"signal \[batch, length, 1 or 2\], got shape \[1, 40, 3\]"),
        ((1, 9000), 4, 8193, None, 0, f"{MAX_DFT_MATRIX_ELEMENTS} elements"),
    ],
)
def test_an_stft_temper_cannot_compute_is_refused_naming_the_node(
    shape: tuple[int, ...],
    step: int,
    frame: int | None,
    window: np.ndarray | None,
    onesided: int,
    message: str,
) -> None:
    inputs = ["x", "step", "window" if window is not None else "", "frame" if frame is not None else ""]
    inits = [helper.make_tensor("step", TensorProto.INT64, [], [step])]
    if window is not None:
        inits.append(helper.make_tensor("window", TensorProto.FLOAT, window.shape, window.reshape(-1)))
    if frame is not None:
        inits.append(helper.make_tensor("frame", TensorProto.INT64, [], [frame]))
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node("STFT", inputs, ["y"], name="the_stft", onesided=onesided)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(CompilerError, match=message) as caught:
        load_onnx(model.SerializeToString())
    assert "the_stft" in str(caught.value)


@pytest.mark.parametrize("what", ["frame_step", "window", "frame_length"])
def test_an_stft_parameter_computed_at_run_time_is_refused_before_conversion(what: str) -> None:
    position = {"frame_step": 1, "window": 2, "frame_length": 3}[what]
    inputs = ["x", "step", "", ""]
    inputs[position] = "runtime"
    inits = [] if what == "frame_step" else [helper.make_tensor("step", TensorProto.INT64, [], [4])]
    kind = (TensorProto.FLOAT, [8]) if what == "window" else (TensorProto.INT64, [])
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node("STFT", inputs, ["y"], name="the_stft")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 40)),
            helper.make_tensor_value_info("runtime", *kind),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(UnsupportedOpError, match=f"STFT with a {what} computed at run time"):
        load_onnx(model.SerializeToString())


def test_an_stft_without_onesided_is_one_sided_as_defined(tmp_path: Path) -> None:
    """ONNX's shape inference takes a missing `onesided` as 0 and then refuses the model's own declared
    (one-sided) output shape; the importer spells the default out first, and leaves the caller's
    model as it was."""
    node = helper.make_node("STFT", ["x", "step", "", "frame"], ["y"], name="the_stft")
    inits = [
        helper.make_tensor("step", TensorProto.INT64, [], [8]),
        helper.make_tensor("frame", TensorProto.INT64, [], [16]),
    ]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 128, 1))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 15, 9, 2))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = np.random.default_rng(2).standard_normal((1, 128, 1)).astype(np.float32)
    got = compile_and_run(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, _numpy_stft(x, 8, 16, None, True), atol=1e-5, rtol=0)
    assert load_onnx(model).outputs  # the proto itself, not its bytes
    assert not model.graph.node[0].attribute


@pytest.mark.parametrize(("op", "position"), [("DFT", 1), ("STFT", 1), ("STFT", 3)])
def test_a_length_or_step_of_several_values_is_refused_naming_the_node(op: str, position: int) -> None:
    """A hostile model may give a scalar parameter as a vector: a typed error, never a crash."""
    inputs = ["x", "one", "", ""]
    inputs[position] = "many"
    while not inputs[-1]:
        inputs.pop()
    inits = [
        helper.make_tensor("one", TensorProto.INT64, [], [4]),
        helper.make_tensor("many", TensorProto.INT64, [2], [4, 8]),
    ]
    node = helper.make_node(op, inputs, ["y"], name="the_node")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 40, 1))],
        [
            helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, ["a", "b", "c", "d"][: 3 if op == "DFT" else 4]
            )
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(CompilerError, match="the_node") as caught:
        load_onnx(model.SerializeToString())
    assert "must be one integer, got 2 values" in str(caught.value) or "ShapeInference" in str(caught.value)
