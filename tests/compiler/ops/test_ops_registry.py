"""The op vocabulary (the contract with lowering), shape rules and their errors, and the references
against naive loop implementations on randomized shapes."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from compiler.errors import ShapeError
from compiler.graph.ir import attrs_of
from compiler.ops import common
from compiler.ops.registry import Pattern, all_ops, get
from compiler.tensor_type import TensorType

VOCABULARY = {
    Pattern.ANCHOR: {
        "conv2d",
        "conv2d_nchwc",
        "conv2d_nchwc_u8s8",
        "matmul_u8s8",
        "conv2d_winograd_nchwc",
        "conv_transpose2d",
        "matmul",
        "max_pool2d",
        "avg_pool2d",
    },
    Pattern.REDUCTION: {
        *("reduce_sum", "reduce_mean", "reduce_max", "softmax", "log_softmax", "layer_norm", "cumsum"),
        *("reduce_prod", "cumprod"),
    },
    Pattern.ELEMWISE: {
        *("neg", "abs", "exp", "log", "sqrt", "reciprocal", "tanh", "sigmoid", "relu", "erf", "sin", "cos"),
        *("leaky_relu", "clip", "hard_sigmoid", "hard_swish", "gelu", "cast"),
        *("softplus", "mish", "softsign", "elu", "celu", "selu", "thresholded_relu"),
        *("floor", "ceil", "round", "sign", "isnan", "isinf"),
        *("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"),
    },
    Pattern.BROADCAST: {
        *("add", "sub", "mul", "div", "pow", "minimum", "maximum", "equal", "less", "greater"),
        *("where", "prelu", "batch_norm", "mod"),
    },
    Pattern.INJECTIVE: {
        *("reshape", "transpose", "concat", "slice", "gather", "expand", "pad", "resize"),
        *("gather_nd", "gather_elements", "layout_transform", "grid_sample"),
    },
    Pattern.OPAQUE: {"scatter_nd", "scatter_elements", "topk_values", "topk_indices"},
}


def t(*shape: int, dtype: str = "float32") -> TensorType:
    return TensorType(shape, dtype)


GRID = {"mode": "linear", "padding_mode": "zeros", "align_corners": 0}


def infer(op: str, types: list[TensorType], **attrs: Any) -> TensorType:
    return get(op).infer(types, dict(attrs_of(attrs)))


def run(op: str, arrays: list[np.ndarray], **attrs: Any) -> np.ndarray:
    plain = dict(attrs_of(attrs))
    out_type = get(op).infer([TensorType(a.shape, str(a.dtype)) for a in arrays], plain)
    out = get(op).reference(arrays, plain)
    assert out.shape == out_type.shape and str(out.dtype) == out_type.dtype
    return out


def test_vocabulary_and_patterns_are_the_contract() -> None:
    ops = all_ops()
    assert set(ops) == set().union(*VOCABULARY.values())
    for pattern, names in VOCABULARY.items():
        for name in names:
            assert ops[name].pattern == pattern, name
            assert ops[name].name == name


def test_unknown_op() -> None:
    with pytest.raises(KeyError, match="unknown graph op"):
        get("conv3d")


CONV = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1}


@pytest.mark.parametrize(
    ("op", "types", "attrs", "message"),
    [
        ("conv2d", [t(1, 3, 8, 8), t(4, 2, 3, 3)], CONV, "groups"),
        ("conv2d", [t(1, 4, 8, 8), t(4, 2, 3, 3)], {**CONV, "groups": 3}, "groups"),
        ("conv2d", [t(1, 3, 2, 2), t(4, 3, 3, 3)], CONV, "empty"),
        ("conv2d", [t(1, 3, 8, 8), t(4, 3, 3, 3)], {**CONV, "pads": (1, 1)}, "pads"),
        ("conv2d", [t(1, 3, 8, 8), t(4, 3, 3, 3)], {**CONV, "strides": (0, 1)}, "positive"),
        ("conv2d", [t(1, 3, 8, 8, dtype="int64"), t(4, 3, 3, 3)], CONV, "dtype"),
        ("matmul", [t(2, 3), t(4, 5)], {}, "inner"),
        ("matmul", [t(3), t(3, 5)], {}, "rank"),
        ("matmul", [t(2, 2, 3), t(3, 3, 4)], {}, "broadcast"),
        ("add", [t(2, 3), t(4)], {}, "broadcast"),
        ("add", [t(2, 3), t(3, dtype="int64")], {}, "dtypes"),
        ("exp", [t(3, dtype="int64")], {}, "dtype"),
        ("where", [t(3), t(3), t(3)], {}, "condition"),
        ("prelu", [t(3), t(2, 3)], {}, "slope"),
        ("reshape", [t(2, 3)], {"shape": (4, 2)}, "cannot"),
        ("reshape", [t(2, 3)], {"shape": (-1, 3)}, "non-negative"),
        ("transpose", [t(2, 3)], {"perm": (0, 0)}, "permutation"),
        ("concat", [t(2, 3), t(3, 3)], {"axis": 1}, "differ"),
        ("slice", [t(5)], {"starts": (-1,), "ends": (5,), "axes": (0,), "steps": (1,)}, "clamped"),
        ("slice", [t(5, 2)], {"starts": (0,), "ends": (5,), "axes": (0,), "steps": (1,)}, "2 values"),
        ("gather", [t(5), t(2)], {"axis": 0}, "indices"),
        ("expand", [t(3, 2)], {"shape": (3, 4)}, "broadcast"),
        ("pad", [t(3)], {"pads": (-1, 0), "mode": "constant", "value": 0.0}, "non-negative"),
        ("pad", [t(3)], {"pads": (3, 0), "mode": "reflect", "value": 0.0}, "reflect"),
        ("pad", [t(3)], {"pads": (1, 0), "mode": "wrap", "value": 0.0}, "mode"),
        ("reduce_sum", [t(2, 3)], {"axes": (1, 0), "keepdims": 1}, "sorted"),
        ("reduce_mean", [t(2, 3)], {"axes": (2,), "keepdims": 1}, "within"),
        ("softmax", [t(2, 3)], {"axis": -1}, "range"),
        ("layer_norm", [t(2, 3), t(2), t(3)], {"axis": 1, "epsilon": 1e-5}, "scale"),
        ("batch_norm", [t(2, 3), t(2), t(3), t(3), t(3)], {"epsilon": 1e-5}, "scale"),
        (
            "max_pool2d",
            [t(1, 1, 4, 4)],
            {"kernel": (2, 2), "strides": (1, 1), "pads": (2, 0, 0, 0), "dilations": (1, 1), "ceil_mode": 0},
            "smaller",
        ),
        (
            "resize",
            [t(1, 4)],
            {
                "mode": "bicubic",
                "coordinate_transformation_mode": "half_pixel",
                "nearest_mode": "floor",
                "sizes": (1, 8),
                "scales": (1.0, 2.0),
            },
            "mode",
        ),
        (
            "resize",
            [t(1, 4)],
            {
                "mode": "cubic",
                "coordinate_transformation_mode": "half_pixel",
                "nearest_mode": "floor",
                "sizes": (1, 8),
                "scales": (1.0, 2.0),
                "cubic_coeff_a": -0.75,
                "exclude_outside": 2,
            },
            "exclude_outside",
        ),
        ("grid_sample", [t(1, 2, 4, 4), t(1, 3, 3, 3)], GRID, "grid \\[N, Ho, Wo, 2\\]"),
        ("grid_sample", [t(1, 2, 4, 4, 4), t(1, 3, 3, 3, 3)], GRID, "x \\[N, C, H, W\\]"),
        ("grid_sample", [t(1, 2, 4, 4), t(1, 3, 3, 2, dtype="int64")], GRID, "grid has dtype int64"),
        ("grid_sample", [t(1, 2, 4, 4), t(1, 3, 3, 2)], {**GRID, "mode": "bicubic"}, "mode"),
        ("grid_sample", [t(1, 2, 4, 4), t(1, 3, 3, 2)], {**GRID, "padding_mode": "wrap"}, "padding_mode"),
        ("grid_sample", [t(1, 2, 4, 4), t(1, 3, 3, 2)], {**GRID, "align_corners": 2}, "align_corners"),
        ("cast", [t(3)], {"to": "complex64"}, "to"),
        ("clip", [t(3)], {"min": 0, "max": 1.0}, "float"),
        ("leaky_relu", [t(3)], {}, "alpha"),
    ],
)
def test_infer_rejects(op: str, types: list[TensorType], attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        infer(op, types, **attrs)


def test_broadcast_shapes_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        rank = int(rng.integers(0, 5))
        base = rng.integers(1, 4, rank)
        shapes = []
        for _ in range(int(rng.integers(1, 4))):
            keep = int(rng.integers(0, rank + 1))
            s = [1 if rng.random() < 0.4 else int(d) for d in base[rank - keep :]]
            shapes.append(tuple(s))
        assert common.broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)


# ---- references against naive loops ------------------------------------------------------------------


def naive_conv2d(x: np.ndarray, w: np.ndarray, strides, pads, dilations, groups) -> np.ndarray:
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    oh = common.conv_out_size(h, kh, strides[0], pads[0], pads[2], dilations[0])
    ow = common.conv_out_size(wd, kw, strides[1], pads[1], pads[3], dilations[1])
    out = np.zeros((n, m, oh, ow))
    for b, o, i, j in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = o // (m // groups)
        patch = xp[
            b,
            g * cg : (g + 1) * cg,
            i * strides[0] : i * strides[0] + (kh - 1) * dilations[0] + 1 : dilations[0],
            j * strides[1] : j * strides[1] + (kw - 1) * dilations[1] + 1 : dilations[1],
        ]
        out[b, o, i, j] = np.sum(patch * w[o])
    return out


def naive_conv_transpose2d(x: np.ndarray, w: np.ndarray, strides, pads, dilations, groups, output_padding):
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // groups
    full_h = strides[0] * (h - 1) + output_padding[0] + (kh - 1) * dilations[0] + 1
    full_w = strides[1] * (wd - 1) + output_padding[1] + (kw - 1) * dilations[1] + 1
    out = np.zeros((n, groups * mg, full_h, full_w))
    for b, ci, i, j, m, p, q in itertools.product(
        range(n), range(c), range(h), range(wd), range(mg), range(kh), range(kw)
    ):
        g = ci // cg
        out[b, g * mg + m, i * strides[0] + p * dilations[0], j * strides[1] + q * dilations[1]] += (
            x[b, ci, i, j] * w[ci, m, p, q]
        )
    return out[:, :, pads[0] : full_h - pads[2], pads[1] : full_w - pads[3]]


def test_conv2d_reference_matches_naive_loops() -> None:
    rng = np.random.default_rng(1)
    for _ in range(25):
        groups = int(rng.choice([1, 2, 3]))
        cg, mg = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        kh, kw = (int(k) for k in rng.integers(1, 4, 2))
        strides = tuple(int(s) for s in rng.integers(1, 3, 2))
        dilations = tuple(int(d) for d in rng.integers(1, 3, 2))
        pads = tuple(int(p) for p in rng.integers(0, 3, 4))
        h, w = (int(d) for d in rng.integers(5, 9, 2))
        x = rng.standard_normal((2, groups * cg, h, w)).astype(np.float32)
        wt = rng.standard_normal((groups * mg, cg, kh, kw)).astype(np.float32)
        attrs = {"strides": strides, "pads": pads, "dilations": dilations, "groups": groups}
        got = run("conv2d", [x, wt], **attrs)
        np.testing.assert_allclose(got, naive_conv2d(x, wt, **attrs), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_reference_matches_naive_loops() -> None:
    rng = np.random.default_rng(2)
    for _ in range(20):
        groups = int(rng.choice([1, 2]))
        cg, mg = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        kh, kw = (int(k) for k in rng.integers(1, 4, 2))
        strides = tuple(int(s) for s in rng.integers(1, 4, 2))
        dilations = tuple(int(d) for d in rng.integers(1, 3, 2))
        output_padding = tuple(
            int(rng.integers(0, max(s, d))) for s, d in zip(strides, dilations, strict=True)
        )
        pads = tuple(int(p) for p in rng.integers(0, 2, 4))
        x = rng.standard_normal((1, groups * cg, 4, 3)).astype(np.float32)
        wt = rng.standard_normal((groups * cg, mg, kh, kw)).astype(np.float32)
        attrs = {
            "strides": strides,
            "pads": pads,
            "dilations": dilations,
            "groups": groups,
            "output_padding": output_padding,
        }
        got = run("conv_transpose2d", [x, wt], **attrs)
        np.testing.assert_allclose(got, naive_conv_transpose2d(x, wt, **attrs), rtol=1e-4, atol=1e-4)


def naive_pool(
    x: np.ndarray, kernel, strides, pads, dilations, ceil_mode, kind: str, include_pad: bool = False
):
    n, c, h, w = x.shape
    oh = common.pool_out_size(h, kernel[0], strides[0], pads[0], pads[2], dilations[0], ceil_mode)
    ow = common.pool_out_size(w, kernel[1], strides[1], pads[1], pads[3], dilations[1], ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        values, count = [], 0
        for p, q in itertools.product(range(kernel[0]), range(kernel[1])):
            r = i * strides[0] - pads[0] + p * dilations[0]
            s = j * strides[1] - pads[1] + q * dilations[1]
            if 0 <= r < h and 0 <= s < w:
                values.append(x[:, :, r, s])
                count += 1
            elif include_pad and -pads[0] <= r < h + pads[2] and -pads[1] <= s < w + pads[3]:
                count += 1
        if kind == "max":
            out[:, :, i, j] = np.max(values, axis=0)
        else:
            out[:, :, i, j] = np.sum(values, axis=0) / count
    return out


def test_pool_references_match_naive_loops() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        kernel = tuple(int(k) for k in rng.integers(1, 4, 2))
        strides = tuple(int(s) for s in rng.integers(1, 3, 2))
        pads = tuple(int(rng.integers(0, kernel[i % 2])) for i in range(4))
        ceil_mode = int(rng.integers(0, 2))
        x = rng.standard_normal((1, 2, int(rng.integers(4, 8)), int(rng.integers(4, 8)))).astype(np.float32)
        common_attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
        dil = tuple(int(d) for d in rng.integers(1, 3, 2))
        got = run("max_pool2d", [x], dilations=dil, **common_attrs)
        np.testing.assert_allclose(
            got, naive_pool(x, kernel, strides, pads, dil, ceil_mode, "max"), rtol=1e-6
        )
        for include in (0, 1):
            got = run("avg_pool2d", [x], count_include_pad=include, **common_attrs)
            want = naive_pool(x, kernel, strides, pads, (1, 1), ceil_mode, "avg", bool(include))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reduce_and_softmax_references() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run("reduce_sum", [x], axes=(0, 2), keepdims=0), x.sum(axis=(0, 2)), rtol=1e-6)
    np.testing.assert_allclose(
        run("reduce_mean", [x], axes=(1,), keepdims=1), x.mean(axis=1, keepdims=True), rtol=1e-6
    )
    assert run("reduce_max", [x], axes=(), keepdims=0).shape == x.shape
    sm = run("softmax", [x], axis=1)
    np.testing.assert_allclose(sm.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.exp(run("log_softmax", [x], axis=1)), sm, rtol=1e-5)


def test_integer_division_truncates_like_c() -> None:
    a = np.array([7, -7, 7, -7], np.int64)
    b = np.array([2, 2, -2, -2], np.int64)
    np.testing.assert_array_equal(run("div", [a, b]), [3, -3, -3, 3])


@pytest.mark.parametrize(
    ("sizes", "separable"),
    [
        ((1, 3, 32, 40), True),
        ((1, 3, 8, 40), False),
        ((1, 3, 32, 10), False),
        ((1, 3, 32, 7), True),
        ((1, 3, 4, 5), False),
    ],
)
def test_resize_resamples_the_columns_first_when_the_rows_grow(
    sizes: tuple[int, ...], separable: bool
) -> None:
    """An upsampling resize resamples the innermost axis in a stage of its own over the input's rows
    (its lane-by-lane reads are fewer there), kept by the schedule; otherwise one stage."""
    from onnx import TensorProto, helper, numpy_helper

    from compiler.pipeline import CompileOptions, inspect_model

    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")],
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(sizes))],
        [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    scheduled = inspect_model(model.SerializeToString(), "scheduled", CompileOptions())
    assert ("block('resize_rows'" in scheduled) == separable


def test_resize_nearest_rounding_modes() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    base = {
        "mode": "nearest",
        "coordinate_transformation_mode": "asymmetric",
        "sizes": (1, 8),
        "scales": (1.0, 2.0),
    }
    # asymmetric with scale 2: source coordinates 0, .5, 1, 1.5, ...: the tie-breaking rule decides
    floor = run("resize", [x], nearest_mode="round_prefer_floor", **base)
    ceil = run("resize", [x], nearest_mode="round_prefer_ceil", **base)
    np.testing.assert_array_equal(floor[0], [0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(ceil[0], [0, 1, 1, 2, 2, 3, 3, 3])


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("expand", {"shape": ()}),  # BEiT's relative position index: Expand(scalar, Shape(scalar))
        ("transpose", {"perm": ()}),
        ("slice", {"starts": (), "ends": (), "steps": (), "axes": ()}),
    ],
)
def test_references_keep_a_scalar_a_scalar(op: str, attrs: dict[str, Any]) -> None:
    """A 0-d argument gives a 0-d result, as inferred (np.ascontiguousarray would make it 1-d)."""
    x = np.array(3, np.int64)
    inferred = get(op).infer([TensorType((), "int64")], dict(attrs_of(attrs)))
    out = get(op).reference([x], attrs)
    assert out.shape == inferred.shape == ()
    assert out == 3
