"""Every single-op case of the frontend suite, compiled to native code and run, against onnxruntime.

The frontend tests check the graph (via the reference interpreter); these check the whole path:
compute definitions, default schedules, code generation and the runtime. fp32 tolerance:
atol 1e-4 / rtol 1e-4 (inputs are O(1); the inline exp/erf are accurate to ~1e-7).
"""

from __future__ import annotations

import numpy as np
import pytest

import compiler.runtime
from compiler.pipeline import CompileOptions, compile_model
from tests.compiler.frontend.onnx_check import run_ort
from tests.compiler.frontend.test_frontend_ops import CASES


def compile_and_run(model, feeds, tmp_path, opt_level: int = 3):  # type: ignore[no-untyped-def]
    path = tmp_path / "model.temper"
    compile_model(model.SerializeToString(), CompileOptions(opt_level=opt_level)).save(path)
    module = compiler.runtime.load(path)
    return module.run({k: np.asarray(v) for k, v in feeds.items() if k in {i.name for i in module.inputs}})


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_op_matches_onnxruntime(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, feeds = CASES[name]()
    expected = run_ort(model, feeds)
    got = compile_and_run(model, feeds, tmp_path)
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key].shape == want.shape, key
        assert got[key].dtype == want.dtype, key
        if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
            np.testing.assert_array_equal(got[key], want, err_msg=key)
        else:
            np.testing.assert_allclose(got[key], want, atol=1e-4, rtol=1e-4, err_msg=key)


@pytest.mark.parametrize("axis", [0, 1])
def test_a_large_softmax_over_either_axis_compiles_and_matches(axis: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Over axis 0 the sums run across the output's parallel axis: they stay outside it."""
    from tests.compiler.frontend.onnx_check import single_op

    x = np.random.default_rng(axis).standard_normal((256, 256)).astype(np.float32)
    model, feeds = single_op("Softmax", {"x": x}, {}, axis=axis)
    (got,) = compile_and_run(model, feeds, tmp_path).values()
    (want,) = run_ort(model, feeds).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_a_masked_softmax_flushes_the_terms_that_would_be_subnormal(op: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Attention masks (-100 added to a shifted window's other regions, -inf) make terms of e^(x - max)
    far below float32's smallest normal number: they come out 0, never subnormal (computing subnormals
    is a microcode assist per value on many x86 cores), and the results still match onnxruntime; a
    row holding a NaN stays NaN."""
    from tests.compiler.frontend.onnx_check import single_op

    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 8, 49)).astype(np.float32)
    x[:, :, 20:] -= 100.0  # e^-100 is about 4e-44: subnormal
    x[1, 2, 5] = -np.inf
    x[2, 3, 7] = np.nan
    model, feeds = single_op(op, {"x": x}, {}, axis=2)
    (got,) = compile_and_run(model, feeds, tmp_path).values()
    (want,) = run_ort(model, feeds).values()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isnan(got[2, 3]).all() and not np.isnan(np.delete(got.reshape(-1, 49), 2 * 8 + 3, 0)).any()
    if op == "Softmax":
        tiny = np.finfo(np.float32).tiny
        finite = got[np.isfinite(got)]
        assert not ((finite != 0) & (np.abs(finite) < tiny)).any(), "a subnormal output"
        assert (got[0, :, 20:] == 0).all()  # the masked terms themselves


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX's LRN as its definition states it: the sum of squares over channels c - floor((size - 1) / 2)
    to c + ceil((size - 1) / 2), clipped to the channels there are."""
    squares = np.zeros_like(x, dtype=np.float64)
    channels = x.shape[1]
    for c in range(channels):
        low, high = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        squares[:, c] = (x[:, low : high + 1].astype(np.float64) ** 2).sum(axis=1)
    return (x / (bias + alpha / size * squares) ** beta).astype(np.float32)


@pytest.mark.parametrize(
    ("shape", "size"), [((2, 6, 3, 3), 4), ((2, 5, 7), 2), ((1, 4, 2, 3, 2), 3), ((1, 3, 2), 6)]
)
def test_lrn_of_any_size_and_rank_matches_its_definition(shape: tuple[int, ...], size: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Even windows (one more channel after than before) and inputs other than 4-D, which onnxruntime
    refuses."""
    from tests.compiler.frontend.onnx_check import single_op

    x = np.random.default_rng(size).standard_normal(shape).astype(np.float32) * 2
    model, feeds = single_op("LRN", {"x": x}, {}, size=size, alpha=0.2, beta=0.7, bias=1.5)
    (got,) = compile_and_run(model, feeds, tmp_path).values()
    np.testing.assert_allclose(got, lrn_reference(x, size, 0.2, 0.7, 1.5), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("name", "per_step"), [("LSTM_reverse", 3), ("GRU_bidirectional_lbr0", 3), ("GRU_bidirectional_lbr1", 2)]
)
def test_a_recurrent_step_is_few_kernels(name: str, per_step: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A time step's gates are one kernel with what they read (slices of the step's product and of
    the input's projection are read in place, never copied first): an LSTM step is its recurrent
    matmul (the step's projection added in its epilogue), its cell and its hidden state; a GRU step
    its two matmuls, the gates in their epilogues (and, when the reset comes before the product, the
    reset state). Every step of every direction counts; the few kernels around the steps are the
    projection and the outputs."""
    model, feeds = CASES[name]()
    steps = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    directions = 2 if "bidirectional" in name else 1
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    kernels = [k["name"] for k in compiled.manifest["kernels"]]
    assert len(kernels) <= per_step * steps * directions + 3 * directions + 2, kernels
    compiled.save(tmp_path / "m.temper")
    module = compiler.runtime.load(tmp_path / "m.temper")
    got = module.run({k: np.asarray(v) for k, v in feeds.items() if k in {i.name for i in module.inputs}})
    for key, want in run_ort(model, feeds).items():
        np.testing.assert_allclose(got[key], want, atol=1e-4, rtol=1e-4, err_msg=key)


@pytest.mark.parametrize(
    ("mode", "padding"), [("linear", "border"), ("nearest", "zeros"), ("cubic", "reflection")]
)
def test_a_spatial_transformer_compiles_and_matches(mode: str, padding: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A spatial transformer as PyTorch exports one (opset 20): a localization net predicts each
    image's affine map, AffineGrid turns it into a sampling grid, GridSample resamples the image at
    run-time points, and a conv reads the result."""
    from onnx import TensorProto, helper

    from tests.compiler.frontend.onnx_check import make_model

    rng = np.random.default_rng(7)
    weights = {
        "w_loc": rng.standard_normal((8, 3, 5, 5)).astype(np.float32) * 0.2,
        "w_fc": rng.standard_normal((6, 8)).astype(np.float32) * 0.1,
        "b_fc": np.array([0.9, 0.2, 0.1, -0.15, 1.1, -0.05], np.float32),
        "shape": np.array([2, 2, 3], np.int64),
        "size": np.array([2, 3, 24, 20], np.int64),
        "w_head": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w_loc"], ["loc"], strides=[2, 2]),
        helper.make_node("Relu", ["loc"], ["loc_relu"]),
        helper.make_node("GlobalAveragePool", ["loc_relu"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w_fc", "b_fc"], ["affine"], transB=1),
        helper.make_node("Reshape", ["affine", "shape"], ["theta"]),
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=0),
        helper.make_node("GridSample", ["x", "grid"], ["warped"], mode=mode, padding_mode=padding),
        helper.make_node("Conv", ["warped", "w_head"], ["y"], pads=[1, 1, 1, 1]),
    ]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [2, 3, 24, 20])}, ["y"], weights, opset=20)
    feeds = {"x": rng.standard_normal((2, 3, 24, 20)).astype(np.float32)}
    want = run_ort(model, feeds)["y"]
    got = compile_and_run(model, feeds, tmp_path)["y"]
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_survives_hostile_grid_points(mode: str, padding: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Sampling points are run-time data: NaN, infinities and huge coordinates must neither read
    outside the image nor disturb the other points, which still match onnxruntime."""
    from onnx import TensorProto, helper

    from tests.compiler.frontend.onnx_check import make_model

    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (1, 4, 7, 2)).astype(np.float32)
    hostile = [np.nan, np.inf, -np.inf, 1e30, -1e30, 3e9, -7e12]
    spots = [(r, c, axis) for r in range(4) for c in range(7) for axis in range(2)]
    picked = rng.permutation(len(spots))[: 2 * len(hostile)]
    for k, spot in enumerate(picked):
        r, c, axis = spots[spot]
        grid[0, r, c, axis] = hostile[k % len(hostile)]
    nodes = [helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding)]
    inputs = {"x": (TensorProto.FLOAT, list(x.shape)), "grid": (TensorProto.FLOAT, list(grid.shape))}
    model = make_model(nodes, inputs, ["y"], {}, opset=20)
    feeds = {"x": x, "grid": grid}
    got = compile_and_run(model, feeds, tmp_path)["y"]
    want = run_ort(model, feeds)["y"]
    assert got.shape == want.shape == (1, 2, 4, 7)
    finite = np.isfinite(grid).all(axis=-1) & (np.abs(grid) < 1e3).all(axis=-1)  # [1, 4, 7]
    assert finite.sum() >= 14  # most points are ordinary ones
    np.testing.assert_allclose(got[:, :, finite[0]], want[:, :, finite[0]], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_padded_sequences_match_onnxruntime(op: str, direction: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A batch of sequences shorter than X (sequence_lens): each advances only through its own steps,
    in either direction, its outputs past its end are 0 and its final state is the one at its end."""
    from tests.compiler.frontend.onnx_check import single_op

    rng = np.random.default_rng(len(op) + len(direction))
    gates, steps, batch, inputs, hidden = {"LSTM": 4, "GRU": 3, "RNN": 1}[op], 6, 5, 3, 7
    directions = 2 if direction == "bidirectional" else 1
    consts = {
        "W": rng.standard_normal((directions, gates * hidden, inputs)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((directions, gates * hidden, hidden)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((directions, 2 * gates * hidden)).astype(np.float32) * 0.3,
        "lens": rng.integers(1, steps + 1, batch).astype(np.int32),
        "h0": rng.standard_normal((directions, batch, hidden)).astype(np.float32) * 0.5,
    }
    consts["lens"][0] = steps  # one full-length sequence, the others shorter (at random)
    if op == "LSTM":
        consts["c0"] = rng.standard_normal((directions, batch, hidden)).astype(np.float32) * 0.5
    x = rng.standard_normal((steps, batch, inputs)).astype(np.float32)
    model, feeds = single_op(
        op, {"x": x}, consts, n_outputs=3 if op == "LSTM" else 2, hidden_size=hidden, direction=direction
    )
    expected = run_ort(model, feeds)
    got = compile_and_run(model, feeds, tmp_path)
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, atol=1e-5, rtol=1e-5, err_msg=key)
    y = got["y0"]  # [steps, directions, batch, hidden]: zero past each sequence's end
    for b, n in enumerate(consts["lens"]):
        assert not y[n:, :, b].any()


@pytest.mark.parametrize(("op", "opset"), [("Upsample", 7), ("Upsample", 9), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 2.5, 1.5), (1, 1, 0.6, 0.5)])
def test_upsample_and_resize_of_old_opsets_keep_their_meaning(
    op: str, opset: int, mode: str, scales: tuple[float, ...], tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Before opset 11 a resize used asymmetric coordinates and, for nearest, the pixel at or below
    (above when shrinking); converted to a newer opset it would take half-pixel coordinates."""
    from onnx import TensorProto, helper, numpy_helper

    if op == "Upsample" and min(scales) < 1:
        pytest.skip("Upsample only enlarges (onnxruntime refuses scales below 1)")
    x = np.random.default_rng(3).random((1, 3, 4, 5)).astype(np.float32)
    out = [int(np.floor(s * d)) for s, d in zip(scales, x.shape, strict=True)]
    attrs: dict[str, object] = {"mode": mode}
    inputs, inits = ["x", "s"], [numpy_helper.from_array(np.array(scales, np.float32), "s")]
    if opset == 7:
        attrs["scales"] = [float(s) for s in scales]
        inputs, inits = ["x"], []
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    (want,) = run_ort(model, {"x": x}).values()
    (got,) = compile_and_run(model, {"x": x}, tmp_path).values()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_mean_variance_normalization_without_axes_takes_the_default(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """ONNX's own shape inference fails on such a node (its function body reads the missing axes):
    the importer spells out the default (0, 2, 3) first."""
    from onnx import TensorProto, helper

    x = np.random.default_rng(5).standard_normal((2, 3, 4, 5)).astype(np.float32) * 3 + 1
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], name="mvn")
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [node],
        "mvn",
        [value("x", TensorProto.FLOAT, list(x.shape))],
        [value("y", TensorProto.FLOAT, list(x.shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (want,) = run_ort(model, {"x": x}).values()
    (got,) = compile_and_run(model, {"x": x}, tmp_path).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
