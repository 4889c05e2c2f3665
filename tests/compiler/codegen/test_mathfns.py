"""The transcendental functions codegen emits hold float32 accuracy relative to the value itself,
including where the value is tiny (a saturated sigmoid, exp far below 1): a model whose outputs live
there (a text detector's probabilities on a blank page) must not lose its digits. Checked against
float64 numpy, not onnxruntime, whose Sigmoid is a faster, coarser approximation in that range."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import compiler.runtime
from compiler.pipeline import CompileOptions, compile_model, inspect_model
from compiler.tir.rules import MIN_SHORT_VECTOR

REFERENCES = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Exp": np.exp,
    "Tanh": np.tanh,
}


def _unary_model(op: str, size: int) -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])],
        "unary",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize(
    ("op", "low", "high"), [("Sigmoid", -80.0, 20.0), ("Exp", -80.0, 80.0), ("Tanh", -9.0, 9.0)]
)
def test_relative_error_is_a_few_ulps(op: str, low: float, high: float, tmp_path: Path) -> None:
    x = np.linspace(low, high, 4099, dtype=np.float32)
    compiled = compile_model(_unary_model(op, x.size), CompileOptions(opt_level=3))
    path = tmp_path / "unary.temper"
    compiled.save(path)
    y = compiler.runtime.load(path).run({"x": x})["y"]
    reference = REFERENCES[op](x.astype(np.float64))
    nonzero = np.abs(reference) > np.finfo(np.float32).tiny
    relative = np.abs(y[nonzero] - reference[nonzero]) / np.abs(reference[nonzero])
    assert float(relative.max()) < 2e-6, f"{op}: worst relative error {relative.max():.2e}"


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_sin_and_cos_are_within_a_few_ulps_of_one_over_rotary_angles(op: str, tmp_path: Path) -> None:
    """Rotary position angles and timestep embeddings: arguments up to a long context's positions
    (and a few near multiples of pi/2, where the reduction must not cancel); the error is measured
    against 1 (the functions' scale: near a zero, relative error means nothing for float32 input),
    and inf and NaN give NaN."""
    rng = np.random.default_rng(5)
    x = np.concatenate(
        [
            np.linspace(-10.0, 10.0, 8001),
            rng.uniform(-140_000.0, 140_000.0, 8000),
            np.arange(-2000, 2000) * (np.pi / 2),
            [0.0, -0.0, 1e-30, np.inf, -np.inf, np.nan],
        ]
    ).astype(np.float32)
    compiled = compile_model(_unary_model(op, x.size), CompileOptions(opt_level=3))
    path = tmp_path / "trig.temper"
    compiled.save(path)
    y = compiler.runtime.load(path).run({"x": x})["y"]
    finite = np.isfinite(x)
    want = (np.sin if op == "Sin" else np.cos)(x[finite].astype(np.float64))
    worst = np.abs(y[finite].astype(np.float64) - want)
    assert float(worst.max()) < 2.5 * np.finfo(np.float32).eps, f"{op}: worst {worst.max():.2e}"
    assert np.isnan(y[~finite]).all()
    if op == "Sin":  # a tiny angle is its own sine, not rounded to 0
        assert y[x.size - 4] == np.float32(1e-30)


def test_rotary_angles_from_a_position_input_match_onnxruntime(tmp_path: Path) -> None:
    """A decoder exported with position_ids as an input (as exporters for serving do) computes its
    rotary cos and sin at run time: positions (int64) times inverse frequencies, then Cos and Sin,
    applied to the queries as q * cos + rotate_half(q) * sin."""
    from tests.compiler.frontend.onnx_check import make_model, run_ort

    half = 8
    inv_freq = (1.0 / 10000 ** (np.arange(half) / half)).astype(np.float32).reshape(1, half)
    nodes = [
        helper.make_node("Cast", ["pos"], ["p"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["p", "axis"], ["p2"]),
        helper.make_node("MatMul", ["p2", "inv_freq"], ["angles"]),
        helper.make_node("Concat", ["angles", "angles"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos"]),
        helper.make_node("Sin", ["emb"], ["sin"]),
        helper.make_node("Split", ["q"], ["q1", "q2"], axis=-1, num_outputs=2),
        helper.make_node("Neg", ["q2"], ["nq2"]),
        helper.make_node("Concat", ["nq2", "q1"], ["rotated"], axis=-1),
        helper.make_node("Mul", ["q", "cos"], ["a"]),
        helper.make_node("Mul", ["rotated", "sin"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    inputs = {"pos": (TensorProto.INT64, [1, 24]), "q": (TensorProto.FLOAT, [1, 24, 2 * half])}
    model = make_model(nodes, inputs, ["y"], {"inv_freq": inv_freq, "axis": np.array([-1])}, opset=18)
    rng = np.random.default_rng(3)
    feeds = {
        "pos": np.arange(5000, 5024).reshape(1, 24),
        "q": rng.standard_normal((1, 24, 2 * half)).astype(np.float32),
    }
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3))
    compiled.save(tmp_path / "rotary.temper")
    got = compiler.runtime.load(tmp_path / "rotary.temper").run(feeds)["y"]
    np.testing.assert_allclose(got, run_ort(model, feeds)["y"], atol=1e-5, rtol=1e-5)


def test_exp_overflows_to_inf_underflows_to_zero_and_keeps_nan(tmp_path: Path) -> None:
    x = np.array([89.0, 1e30, np.inf, -104.0, -1e30, -np.inf, np.nan, 88.0, -87.0] * 3, np.float32)
    compiled = compile_model(_unary_model("Exp", x.size), CompileOptions(opt_level=3))
    path = tmp_path / "exp.temper"
    compiled.save(path)
    y = compiler.runtime.load(path).run({"x": x})["y"]
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isinf(y), np.isinf(want))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(y[want == 0], 0.0)
    finite = np.isfinite(want) & (want > 0)
    np.testing.assert_allclose(y[finite], want[finite], rtol=2e-6)


def test_sigmoid_is_within_7_ulps_and_keeps_the_special_values(tmp_path: Path) -> None:
    """emit_sigmoid (its own exp, cheaper than emit_exp's): within 7 ulps wherever the exact value is a
    normal float, 0 or a subnormal below that, 1 at +inf, 0 at -inf, NaN kept."""
    specials = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 87.3, 87.31, -88.8, -88.81, -1e30, 1e30])
    x = np.concatenate([np.linspace(-100.0, 100.0, 200_001, dtype=np.float32), specials])
    compiled = compile_model(_unary_model("Sigmoid", x.size), CompileOptions(opt_level=3))
    path = tmp_path / "sigmoid.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run({"x": x})["y"]
    with np.errstate(over="ignore"):
        exact = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    normal = exact >= np.finfo(np.float32).tiny
    worst = _ulps(got[normal], exact[normal])
    assert worst.max() <= 7.0, f"worst {worst.max():.2f} ulp at x = {x[normal][worst.argmax()]!r}"
    tiny = ~normal & ~np.isnan(x)
    assert ((got[tiny] >= 0) & (got[tiny] < np.finfo(np.float32).tiny)).all()
    end = got[-specials.size :]
    assert np.isnan(end[0]) and end[1] == 1.0 and end[2] == 0.0 and end[3] == end[4] == 0.5
    assert end[-1] == 1.0 and end[-2] == 0.0


# ---- log and pow: inline float32 (emit_log, emit_pow), in vectorized and in scalar loops --------------

FLT_BITS_MIN_NORMAL, FLT_BITS_INF = 0x00800000, 0x7F800000
LOG_MAX_ULP = 1.0  # emit_log: Cephes logf, within an ulp over the positive floats, subnormals included
POW_MAX_ULP = 0.51  # emit_pow: computed in float64, so the float32 rounding (0.5 ulp) dominates
POW_SPECIAL_X = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45]
POW_SPECIAL_X += [3.4e38, -3.4e38, 1.0000001, 0.99999994, 10.0, -8.0]
POW_SPECIAL_Y = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.5, -0.5, 2.5, np.inf, -np.inf, np.nan]
POW_SPECIAL_Y += [1e-45, 16777216.0, 16777217.0, -16777215.0, 1e30, 127.0, 128.0, -149.0, -150.0]


def _elementwise_model(op: str, inputs: list[str], shape: list[int]) -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["z"])],
        op.lower(),
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in inputs],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _run_elementwise(op: str, args: list[np.ndarray], form: str, tmp_path: Path) -> np.ndarray:
    """op over 1-D float32 args: one long row is vectorized (with a masked tail), rows narrower than
    the shortest vector the schedule makes run the scalar code."""
    n = args[0].size
    width = MIN_SHORT_VECTOR - 1
    pad = (-n) % width
    padded = [np.concatenate([a, np.ones(pad, np.float32)]) for a in args]
    shape = [n + pad] if form == "vector" else [(n + pad) // width, width]
    names = ["x", "y"][: len(args)]
    model = _elementwise_model(op, names, shape)
    options = CompileOptions(opt_level=3)
    assert ("vectorized(" in inspect_model(model, "scheduled", options)) == (form == "vector")
    compile_model(model, options).save(tmp_path / "op.temper")
    feeds = {name: a.reshape(shape) for name, a in zip(names, padded, strict=True)}
    out: np.ndarray = compiler.runtime.load(tmp_path / "op.temper").run(feeds)["z"]
    return out.reshape(-1)[:n]


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in ulps of the float32 nearest the exact (float64) value."""
    spacing = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    out: np.ndarray = np.abs(got.astype(np.float64) - exact) / spacing
    return out


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Bitwise equal (so the sign of zero counts), or both NaN."""
    out: np.ndarray = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    return out


def _log_inputs(rng: np.random.Generator) -> np.ndarray:
    normals = rng.integers(FLT_BITS_MIN_NORMAL, FLT_BITS_INF, 60000, dtype=np.uint32).view(np.float32)
    subnormals = rng.integers(1, FLT_BITS_MIN_NORMAL, 4000, dtype=np.uint32).view(np.float32)
    near_one = (1.0 + rng.uniform(-1e-3, 1e-3, 8000)).astype(np.float32)
    mantissas = np.linspace(0.5, 2.0, 20001, dtype=np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1e-45, 1.0, 3.4028235e38, 1.1754944e-38])
    return np.concatenate([normals, subnormals, near_one, mantissas, specials.astype(np.float32)])


@pytest.mark.parametrize("form", ["vector", "scalar"])
def test_log_is_within_an_ulp_and_keeps_the_special_values(form: str, tmp_path: Path) -> None:
    x = _log_inputs(np.random.default_rng(0))
    got = _run_elementwise("Log", [x], form, tmp_path)
    with np.errstate(divide="ignore", invalid="ignore"):
        exact = np.log(x.astype(np.float64))
    finite = np.isfinite(exact)
    worst = _ulps(got[finite], exact[finite])
    assert float(worst.max()) <= LOG_MAX_ULP, (
        f"worst {worst.max():.3f} ulp at x = {x[finite][worst.argmax()]!r}"
    )
    special = ~finite  # 0 and -0 -> -inf, inf -> inf, negative and NaN -> NaN
    assert _same(got[special], exact[special].astype(np.float32)).all(), x[special]


def _pow_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    # bases over every exponent, with powers from the subnormals to past the overflow threshold
    spread = rng.integers(FLT_BITS_MIN_NORMAL, FLT_BITS_INF, 40000, dtype=np.uint32).view(np.float32)
    target = rng.uniform(-110.0, 95.0, spread.size)
    with np.errstate(divide="ignore"):
        spread_y = (target / np.log(spread.astype(np.float64))).astype(np.float32)
    plain = rng.uniform(0.0, 10.0, 20000).astype(np.float32), rng.uniform(-30, 30, 20000).astype(np.float32)
    # y * log x large while x is next to 1: where log's error would be magnified most
    near_one = (1.0 + rng.uniform(-1e-3, 1e-3, 20000)).astype(np.float32)
    large_y = rng.uniform(-8e4, 8e4, 20000).astype(np.float32)
    negative = (rng.standard_normal(20000) * 4).astype(np.float32)
    integer_y = rng.integers(-40, 40, 20000).astype(np.float32)
    negative_x = -np.abs(negative[:2000]) - np.float32(0.01)
    fraction_y = (rng.integers(-5, 5, 2000) + 0.25).astype(np.float32)  # negative base: NaN
    subnormal = rng.integers(1, FLT_BITS_MIN_NORMAL, 4000, dtype=np.uint32).view(np.float32)
    subnormal_y = rng.uniform(-0.9, 1.3, 4000).astype(np.float32)
    grid_x, grid_y = np.meshgrid(np.array(POW_SPECIAL_X, np.float32), np.array(POW_SPECIAL_Y, np.float32))
    x = np.concatenate([spread, plain[0], near_one, negative, negative_x, subnormal, grid_x.ravel()])
    y = np.concatenate([spread_y, plain[1], large_y, integer_y, fraction_y, subnormal_y, grid_y.ravel()])
    return x, y


@pytest.mark.parametrize("form", ["vector", "scalar"])
def test_pow_is_correctly_rounded_but_for_a_hair_and_follows_c_on_special_values(
    form: str, tmp_path: Path
) -> None:
    """Every finite nonzero result (subnormals too) within POW_MAX_ULP; zeros, infinities and NaNs
    (overflow, underflow, 0 and inf bases, y = 0, x = 1, negative bases) exactly as C's pow."""
    x, y = _pow_inputs(np.random.default_rng(1))
    got = _run_elementwise("Pow", [x, y], form, tmp_path)
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), y.astype(np.float64))
        rounded = exact.astype(np.float32)
    regular = np.isfinite(rounded) & (rounded != 0)
    worst = _ulps(got[regular], exact[regular])
    at = worst.argmax()
    assert float(worst.max()) <= POW_MAX_ULP, (
        f"worst {worst.max():.3f} ulp at {x[regular][at]!r} ** {y[regular][at]!r}"
    )
    assert _same(got[~regular], rounded[~regular]).all(), np.flatnonzero(~_same(got, rounded))
    invalid = (x < 0) & np.isfinite(x) & np.isfinite(y) & (np.trunc(y) != y)
    assert invalid.sum() >= 2000 and np.isnan(got[invalid]).all()


def test_exp_is_exact_through_the_subnormals_and_up_to_the_largest_float(tmp_path: Path) -> None:
    """Between e^-103.97 and e^-87.34 the result is a subnormal, rounded once (2^n applied as two
    normal factors); just below ln(FLT_MAX) it is still finite, just above it inf."""
    top = np.float32([88.70, 88.72, 88.7228, 88.7229, 88.75])
    x = np.concatenate([np.linspace(-104.0, -86.0, 2051, dtype=np.float32), top])
    compiled = compile_model(_unary_model("Exp", x.size), CompileOptions(opt_level=3))
    path = tmp_path / "exp.temper"
    compiled.save(path)
    y = compiler.runtime.load(path).run({"x": x})["y"]
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    small = want < 1.0
    subnormal_ulp = float(np.finfo(np.float32).smallest_subnormal)
    np.testing.assert_allclose(y[small], want[small], rtol=2e-6, atol=subnormal_ulp)
    assert (y[small] > 0).sum() >= (want[small] >= subnormal_ulp).sum()
    big = ~small
    np.testing.assert_array_equal(np.isinf(y[big]), want[big] > np.finfo(np.float32).max)
    finite = big & np.isfinite(y)
    np.testing.assert_allclose(y[finite], want[finite], rtol=2e-6)
