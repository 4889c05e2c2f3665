"""Tan, the inverse trigonometric and hyperbolic functions, Shrink, ReduceProd, ReduceLogSum,
ReduceLogSumExp and CumProd end to end: imported, compiled at opt level 3, run natively, and compared
with onnxruntime and with numpy in float64. The functions must be float32 roundings of the exact
value over their whole domains (large arguments, domain edges, infinities and NaN included); the
reductions must match over random shapes, axes and keepdims, with both spellings of the axes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.runtime
from compiler.errors import UnsupportedOpError
from compiler.frontend.onnx import import_model
from compiler.pipeline import CompileOptions, compile_model
from tests.compiler.frontend.onnx_check import make_model, run_ort, single_op

FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
}
# where each function is defined and finite (the random-shape cases draw from it)
DOMAIN = {
    "Tan": (-1e4, 1e4),
    "Asin": (-1.0, 1.0),
    "Acos": (-1.0, 1.0),
    "Atan": (-1e3, 1e3),
    "Sinh": (-89.0, 89.0),
    "Cosh": (-89.0, 89.0),
    "Asinh": (-1e6, 1e6),
    "Acosh": (1.0, 1e6),
    "Atanh": (-1.0, 1.0),
}
ODD = ("Tan", "Asin", "Atan", "Sinh", "Asinh", "Atanh")
F32 = np.finfo(np.float32)


def _compile_and_run(
    model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], tmp_path: Path
) -> dict[str, np.ndarray]:
    path = tmp_path / "model.temper"
    compile_model(model.SerializeToString(), CompileOptions(opt_level=3)).save(path)
    module = compiler.runtime.load(path)
    return module.run({k: np.asarray(v) for k, v in feeds.items() if k in {i.name for i in module.inputs}})


def _float64(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(fn(x.astype(np.float64)))


def _near(v: float) -> list[float]:
    """v and its float32 neighbours."""
    f = np.float32(v)
    return [float(np.nextafter(f, np.float32(-np.inf))), float(f), float(np.nextafter(f, np.float32(np.inf)))]


def _edges() -> np.ndarray:
    """Values where the functions change behaviour: the domain edges +-1 and their neighbours, 0 and
    -0, the smallest normal and subnormal, the overflow of sinh and cosh, large arguments, multiples
    of pi/2 (tan's poles and zeros), float32's largest value, the infinities and NaN."""
    values = [*_near(1.0), *_near(-1.0), 0.0, -0.0, F32.tiny, 1e-45, 2.0**-12, 2.0**-5, 0.5, -0.5]
    values += [*_near(88.72), *_near(89.41), 89.5, 1e10, 1e20, 1e30, float(F32.max), np.inf, np.nan]
    # 16367173 * 2^72 lies within 2^-29 of a multiple of pi/2: tan there is -6.2e8, and any error in
    # the reduced argument shows in the result as a relative error 2^29 times larger
    values += [*(np.arange(-200, 200) * (np.pi / 2)), 16367173.0 * 2.0**72]
    edges = np.array(values, np.float32)
    return np.concatenate([edges, -edges])


def _whole_range(rng: np.random.Generator, n: int) -> np.ndarray:
    """n finite float32 values drawn uniformly over the bit patterns: every binade equally often."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return bits[np.isfinite(bits)]


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at the exact value."""
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def _unary_model(op: str, shape: Sequence[int]) -> onnx.ModelProto:
    x = np.zeros(shape, np.float32)
    model, _ = single_op(op, {"x": x})
    return model


def _assert_same_specials(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> None:
    """NaN exactly where the reference is NaN, the same infinities where it has them."""
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"NaN differs at x = {x[np.isnan(got) != nan][:5]}"
    inf = np.isinf(want)
    assert (got[inf] == want[inf]).all(), f"inf differs at x = {x[inf][got[inf] != want[inf]][:5]}"


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_function_is_float32_rounding_of_its_float64_value(op: str, tmp_path: Path) -> None:
    """Over every binade, the domain's interior and the edges: within 1 ulp of numpy's float64 value
    (so within 1e-6 relative), NaN and inf where numpy has them, and equal to onnxruntime."""
    rng = np.random.default_rng(sorted(FUNCTIONS).index(op))
    low, high = DOMAIN[op]
    x = np.concatenate(
        [
            _whole_range(rng, 60_000),
            rng.uniform(low, high, 20_000).astype(np.float32),
            rng.uniform(-1.0, 1.0, 20_000).astype(np.float32),
            (1.0 - np.geomspace(1e-8, 1.0, 2000)).astype(np.float32),  # to the edges at +-1
            (1.0 + np.geomspace(1e-8, 1.0, 2000)).astype(np.float32),
            _edges(),
        ]
    )
    x = np.concatenate([x, -x])
    model = _unary_model(op, x.shape)
    got = _compile_and_run(model, {"x": x}, tmp_path)["y0"]
    exact = _float64(FUNCTIONS[op], x)
    with np.errstate(over="ignore"):
        want = exact.astype(np.float32)
    _assert_same_specials(got, want, x)
    finite = np.isfinite(want)
    worst = _ulps(got[finite], exact[finite])
    assert worst.max() <= 1.0, f"{op}: {worst.max():.2f} ulp at x = {x[finite][worst.argmax()]!r}"
    np.testing.assert_allclose(got[finite], exact[finite], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y0"], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_function_on_random_shapes_matches_onnxruntime(op: str, tmp_path: Path) -> None:
    """Shapes whose rows are no whole number of vectors (the loops' scalar tails run too)."""
    rng = np.random.default_rng(100 + sorted(FUNCTIONS).index(op))
    shape = tuple(int(d) for d in rng.integers(1, 12, rng.integers(1, 5)))
    x = rng.uniform(*DOMAIN[op], shape).astype(np.float32)
    model, feeds = single_op(op, {"x": x})
    got = _compile_and_run(model, feeds, tmp_path)["y0"]
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, run_ort(model, feeds)["y0"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, _float64(FUNCTIONS[op], x), rtol=1e-6, atol=1e-6)


def test_odd_functions_keep_the_sign_of_zero(tmp_path: Path) -> None:
    x = np.array([0.0, -0.0, 1e-30, -1e-30], np.float32)
    for op in ODD:
        got = _compile_and_run(_unary_model(op, x.shape), {"x": x}, tmp_path)["y0"]
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x), err_msg=op)
        np.testing.assert_array_equal(got[2:], x[2:], err_msg=op)  # a tiny x is its own value


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_function_fused_into_a_matmul_epilogue(op: str, tmp_path: Path) -> None:
    """The function inside another kernel's vector loops: a matmul's epilogue, after its bias."""
    rng = np.random.default_rng(200 + sorted(FUNCTIONS).index(op))
    x = rng.uniform(-1, 1, (5, 24)).astype(np.float32)
    w = rng.uniform(-0.05, 0.05, (24, 40)).astype(np.float32)
    bias = np.full(40, 2.0 if op == "Acosh" else 0.25, np.float32)  # results within the domain
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["a"]),
        helper.make_node(op, ["a"], ["y"]),
    ]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [5, 24])}, ["y"], {"w": w, "bias": bias})
    got = _compile_and_run(model, {"x": x}, tmp_path)["y"]
    a = (x @ w + bias).astype(np.float32)  # the matmul's own rounding is not the function's to judge
    np.testing.assert_allclose(got, _float64(FUNCTIONS[op], a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], rtol=1e-5, atol=1e-6)


def test_float16_functions_compute_in_float32(tmp_path: Path) -> None:
    x = np.linspace(-0.99, 0.99, 37).astype(np.float16)
    node = helper.make_node("Atanh", ["x"], ["y"], name="node")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [37])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [37])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    got = _compile_and_run(model, {"x": x}, tmp_path)["y"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, np.arctanh(x.astype(np.float64)), rtol=1e-3)


# ---- Shrink -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lambd", "bias"), [(None, None), (1.5, 0.0), (0.7, 0.7), (0.0, -2.0)])
def test_shrink_matches_onnxruntime_and_numpy(
    lambd: float | None, bias: float | None, tmp_path: Path
) -> None:
    """Soft (bias = lambd) and hard (bias 0) shrinkage and the defaults (lambd 0.5, bias 0), on
    random shapes holding the thresholds themselves, infinities and NaN (which gives 0)."""
    rng = np.random.default_rng(7)
    shape = tuple(int(d) for d in rng.integers(1, 9, 3))
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    lam, b = 0.5 if lambd is None else lambd, 0.0 if bias is None else bias
    x.flat[:6] = [lam, -lam, np.inf, -np.inf, np.nan, 0.0][: x.size]
    attrs = {k: v for k, v in (("lambd", lambd), ("bias", bias)) if v is not None}
    model, feeds = single_op("Shrink", {"x": x}, **attrs)
    got = _compile_and_run(model, feeds, tmp_path)["y0"]
    lam32, b32 = np.float32(lam), np.float32(b)  # the attributes are float32: one rounding per result
    want = np.where(x < -lam32, x + b32, np.where(x > lam32, x - b32, np.float32(0.0)))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, run_ort(model, feeds)["y0"])


def test_shrink_refuses_integer_tensors_naming_the_node() -> None:
    model, _ = single_op("Shrink", {"x": np.arange(6, dtype=np.int64)}, lambd=1.0)
    with pytest.raises(
        UnsupportedOpError, match=r"node: Shrink of int64 tensors \(supported: float32, float16\)"
    ):
        import_model(model)


# ---- reductions -------------------------------------------------------------------------------------

REDUCTIONS = ("ReduceProd", "ReduceLogSum", "ReduceLogSumExp")


def _reduction_input(op: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Products of values near 1 (no overflow), sums of positive values (a finite log), and for
    ReduceLogSumExp values far past where exp overflows float32 (only the shifted form survives)."""
    if op == "ReduceProd":
        return (rng.uniform(0.6, 1.5, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    if op == "ReduceLogSum":
        return rng.uniform(0.01, 10.0, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 60.0 + rng.choice([0.0, 300.0, -300.0])).astype(np.float32)


def _reduction_reference(op: str, x: np.ndarray, axes: tuple[int, ...] | None, keepdims: bool) -> np.ndarray:
    wide = x.astype(np.float64)
    if op == "ReduceProd":
        return np.prod(wide, axis=axes, keepdims=keepdims)
    if op == "ReduceLogSum":
        return np.log(np.sum(wide, axis=axes, keepdims=keepdims))
    peak = np.max(wide, axis=axes, keepdims=True)
    out = np.log(np.sum(np.exp(wide - peak), axis=axes, keepdims=True)) + peak
    return out if keepdims else np.squeeze(out, axis=axes)


def _reduction_model(
    op: str, x: np.ndarray, axes: list[int] | None, opset: int, **attrs: Any
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Axes as an attribute before opset 18, as a constant input from 18 on."""
    if axes is None:
        return single_op(op, {"x": x}, opset=opset, **attrs)
    if opset >= 18:
        return single_op(op, {"x": x}, {"axes": np.array(axes, np.int64)}, opset=opset, **attrs)
    return single_op(op, {"x": x}, opset=opset, axes=axes, **attrs)


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [None, [0], [-1], [1, -1]])
def test_reduction_matches_onnxruntime_and_numpy(
    op: str, opset: int, keepdims: int, axes: list[int] | None, tmp_path: Path
) -> None:
    rng = np.random.default_rng([REDUCTIONS.index(op), opset, keepdims, len(axes or [])])
    shape = tuple(int(d) for d in rng.integers(2, 9, rng.integers(2, 5)))
    x = _reduction_input(op, rng, shape)
    model, feeds = _reduction_model(op, x, axes, opset, keepdims=keepdims)
    got = _compile_and_run(model, feeds, tmp_path)["y0"]
    resolved = None if axes is None else tuple(sorted({a % x.ndim for a in axes}))
    want = _reduction_reference(op, x, resolved, bool(keepdims))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got, run_ort(model, feeds)["y0"], rtol=2e-6, atol=1e-6)


def test_reduce_log_sum_exp_rows_of_infinities(tmp_path: Path) -> None:
    """A row of -inf gives -inf (its sum of exponentials is 0), a row holding +inf gives inf, NaN stays
    NaN, and values whose exp overflows float32 give their finite log-sum."""
    x = np.array(
        [[-np.inf] * 3, [1000.0, 999.0, 0.0], [np.inf, 1.0, 2.0], [np.nan, 1.0, 2.0], [-np.inf, 0.0, -1e4]],
        np.float32,
    )
    model, feeds = _reduction_model("ReduceLogSumExp", x, [1], 18, keepdims=0)
    got = _compile_and_run(model, feeds, tmp_path)["y0"]
    want = np.array([-np.inf, 1000.0 + np.log1p(np.exp(-1.0)), np.inf, np.nan, 0.0], np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, run_ort(model, feeds)["y0"], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_reduce_prod_of_integers_is_exact(dtype: type, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, (4, 5, 3)).astype(dtype)
    for opset, axes in [(13, [1]), (18, [0, 2])]:
        model, feeds = _reduction_model("ReduceProd", x, axes, opset, keepdims=0)
        got = _compile_and_run(model, feeds, tmp_path)["y0"]
        np.testing.assert_array_equal(got, np.prod(x, axis=tuple(axes), dtype=dtype))
        np.testing.assert_array_equal(got, run_ort(model, feeds)["y0"])


@pytest.mark.parametrize("op", REDUCTIONS)
def test_empty_axes_with_noop_reduce_nothing(op: str, tmp_path: Path) -> None:
    """noop_with_empty_axes: the input unreduced, the op's other arithmetic applied (ReduceLogSum is
    then log x), as onnxruntime does."""
    x = _reduction_input(op, np.random.default_rng(4), (3, 4))
    model, feeds = _reduction_model(op, x, [], 18, noop_with_empty_axes=1)
    got = _compile_and_run(model, feeds, tmp_path)["y0"]
    np.testing.assert_allclose(got, run_ort(model, feeds)["y0"], rtol=1e-6)


def _with_runtime_input(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """`model` with initializer `name` turned into a graph input."""
    (init,) = [t for t in model.graph.initializer if t.name == name]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.initializer.remove(next(t for t in out.graph.initializer if t.name == name))
    out.graph.input.append(helper.make_tensor_value_info(name, init.data_type, list(init.dims)))
    return out


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_refuses_run_time_axes_naming_the_node(op: str) -> None:
    x = np.ones((2, 3), np.float32)
    model, _ = _reduction_model(op, x, [1], 18)
    with pytest.raises(UnsupportedOpError, match=rf"node: {op} axes computed at run time"):
        import_model(_with_runtime_input(model, "axes"))


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceLogSumExp"])
def test_log_reductions_refuse_integer_tensors_naming_the_node(op: str) -> None:
    """ONNX allows integers before opset 28; a log of an integer sum has no integer answer."""
    model, _ = _reduction_model(op, np.ones((2, 3), np.int64), [1], 18)
    with pytest.raises(UnsupportedOpError, match=rf"node: {op} of int64 tensors \(supported: float32"):
        import_model(model)


# ---- CumProd ----------------------------------------------------------------------------------------

CUMPROD_OPSET = 26  # CumProd's first opset


def _cumprod_model(x: np.ndarray, axis: np.ndarray | None, **attrs: int) -> onnx.ModelProto:
    """CumProd over input x with a constant axis (None: the axis is a graph input)."""
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    inputs = [helper.make_tensor_value_info("x", dtype, list(x.shape))]
    inits = []
    if axis is None:
        inputs.append(helper.make_tensor_value_info("axis", TensorProto.INT64, []))
    else:
        inits.append(numpy_helper.from_array(axis, "axis"))
    graph = helper.make_graph(
        [helper.make_node("CumProd", ["x", "axis"], ["y"], name="node", **attrs)],
        "g",
        inputs,
        [helper.make_tensor_value_info("y", dtype, list(x.shape))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", CUMPROD_OPSET)])


def _cumprod_reference(x: np.ndarray, axis: int, exclusive: int, reverse: int) -> np.ndarray:
    y = np.flip(x, axis) if reverse else x
    if exclusive:
        y = np.concatenate([np.ones_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)], axis=axis)
    out = np.cumprod(y.astype(np.float64) if y.dtype.kind == "f" else y, axis=axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_cumprod_matches_onnxruntime_and_numpy(
    exclusive: int, reverse: int, axis: int, tmp_path: Path
) -> None:
    rng = np.random.default_rng([exclusive, reverse, axis + 1])
    shape = tuple(int(d) for d in rng.integers(2, 10, 3))
    x = (rng.uniform(0.7, 1.4, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    model = _cumprod_model(x, np.array(axis, np.int64), exclusive=exclusive, reverse=reverse)
    got = _compile_and_run(model, {"x": x}, tmp_path)["y"]
    np.testing.assert_allclose(got, _cumprod_reference(x, axis, exclusive, reverse), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got, run_ort(model, {"x": x})["y"], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_cumprod_of_integers_is_exact(dtype: type, tmp_path: Path) -> None:
    x = np.random.default_rng(9).integers(-3, 4, (3, 7)).astype(dtype)
    for exclusive, reverse in [(0, 0), (1, 1)]:
        model = _cumprod_model(x, np.array(1, np.int32), exclusive=exclusive, reverse=reverse)
        got = _compile_and_run(model, {"x": x}, tmp_path)["y"]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, _cumprod_reference(x, 1, exclusive, reverse))
        np.testing.assert_array_equal(got, run_ort(model, {"x": x})["y"])


def test_cumprod_refuses_a_run_time_axis_naming_the_node() -> None:
    model = _cumprod_model(np.ones((2, 3), np.float32), None)
    with pytest.raises(UnsupportedOpError, match="node: CumProd axis computed at run time"):
        import_model(model)
