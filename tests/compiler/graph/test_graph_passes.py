"""Each graph pass: its effect, the verifier after it, and unchanged numerics."""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import compiler.runtime
from compiler.frontend.onnx import load_onnx
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Const, Graph, Var
from compiler.graph.passes import (
    PASSES_BY_LEVEL,
    PassContext,
    common_subexpression_elimination,
    dead_code_elimination,
    fold_batch_norm,
    fold_constants,
    fuse_ops,
    pointwise_conv_to_matmul,
    run_passes,
    simplify,
)
from compiler.graph.passes.fuse import groups_of
from compiler.graph.verify import verify_graph
from compiler.pipeline import CompileOptions, compile_model
from tests.compiler.frontend.onnx_check import make_model
from tests.compiler.graph.graph_builders import CONV, call, const, feeds, graph, var
from tests.models import builders

# the module (the package attribute of this name is the pass function)
fold_module = importlib.import_module("compiler.graph.passes.fold_constants")


def check_pass(before: Graph, after: Graph, atol: float = 1e-5) -> None:
    """The pass output verifies and computes what its input computed."""
    verify_graph(after)
    x = feeds(before)
    want, got = run_graph(before, x), run_graph(after, x)
    for name in before.output_names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=atol)


def ops(g: Graph) -> list[str]:
    return [c.op for c in g.calls()]


def bn_params(c: int, name: str = "bn") -> list[Const]:
    rng = np.random.default_rng(len(name))
    arrays = [rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(c), rng.uniform(0.5, 2, c)]
    return [Const(f"{name}.{k}", a.astype(np.float32)) for k, a in zip("sbmv", arrays, strict=True)]


def bn(x, name: str = "bn"):
    return call("batch_norm", x, *bn_params(x.type.shape[1], name), epsilon=1e-5, name=name)


# ---- fold_constants ---------------------------------------------------------------------------------


def test_fold_constants_folds_constant_subgraphs_only() -> None:
    x = var("x", 2, 4)
    w = const("w", 3, 4)
    wt = call("transpose", w, perm=(1, 0))
    scaled = call("mul", wt, const("two", value=2.0))
    g = graph([x], call("relu", call("matmul", x, scaled)))
    folded = fold_constants(g)
    assert ops(folded) == ["matmul", "relu"]
    weight = folded.calls()[0].args[1]
    assert isinstance(weight, Const) and weight.name == "w" and weight.type.shape == (4, 3)
    check_pass(g, folded)


def test_a_large_weight_transpose_folds_past_the_fold_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Gemm's transposed weight past FOLD_ELEMENTS is still folded: it only rearranges what the
    model holds (otherwise it would be transposed again on every run)."""
    monkeypatch.setattr(fold_module, "FOLD_ELEMENTS", 8)
    x = var("x", 2, 4)
    wt = call("transpose", const("w", 3, 4), perm=(1, 0))
    g = graph([x], call("matmul", x, wt))
    folded = fold_constants(g)
    assert ops(folded) == ["matmul"]
    check_pass(g, folded)


def test_past_the_fold_limit_only_rearrangements_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold_module, "FOLD_ELEMENTS", 8)
    x = var("x", 4, 4)
    grown = call("expand", const("row", 1, 4), shape=(4, 4))  # 16 elements out of 4: it amplifies
    product = call("matmul", const("a", 4, 4), const("b", 4, 4))  # no larger, but not a rearrangement
    g = graph([x], call("add", call("add", x, grown), product))
    folded = fold_constants(g)
    assert Counter(ops(folded)) == Counter(["expand", "matmul", "add", "add"])
    check_pass(g, folded)


def test_large_folds_stay_within_the_models_own_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    """Results past the limit together take no more elements than the model's constants hold: a chain
    of transposes of one large weight folds once, then runs."""
    monkeypatch.setattr(fold_module, "FOLD_ELEMENTS", 8)
    once = call("transpose", const("w", 3, 4), perm=(1, 0))
    twice = call("transpose", once, perm=(1, 0))
    x = var("x", 3, 4)
    g = graph([x], call("add", x, twice))
    folded = fold_constants(g)
    assert ops(folded) == ["transpose", "add"]
    assert isinstance(folded.calls()[0].args[0], Const)
    check_pass(g, folded)


# ---- simplify ---------------------------------------------------------------------------------------


def test_simplify_removes_no_ops_and_merges_chains() -> None:
    x = var("x", 2, 3, 4)
    a = call("reshape", x, shape=(2, 3, 4))
    b = call("transpose", a, perm=(0, 1, 2))
    c = call("add", b, const("zero", 4, value=0.0))
    d = call("mul", const("one", value=1.0), c)
    e = call("div", d, const("one_b", 1, value=1.0))
    f = call("reshape", call("reshape", e, shape=(6, 4)), shape=(24,))
    t = call("transpose", call("transpose", x, perm=(2, 0, 1)), perm=(1, 2, 0))
    u = call("transpose", call("transpose", x, perm=(2, 0, 1)), perm=(2, 1, 0))
    s = call("slice", x, starts=(0, 0, 0), ends=(2, 3, 4), axes=(0, 1, 2), steps=(1, 1, 1))
    p = call("pad", s, pads=(0, 0, 0, 0, 0, 0), mode="constant", value=0.0)
    g = graph([x], f, t, u, p)
    out = simplify(g)
    assert ops(out) == ["reshape", "transpose"]
    assert out.calls()[0].args[0] is x and out.calls()[0].attr("shape") == (24,)
    assert out.outputs[1] is x and out.outputs[3] is x
    assert out.outputs[2].attr("perm") == (1, 0, 2)
    check_pass(g, out)


@pytest.mark.parametrize(
    ("rate", "kernel", "pads"),
    [
        (36, (1, 1), (0, 0, 0, 0)),  # DeepLab's atrous rates past a 14x14 plane: only the centre tap
        (24, (1, 1), (0, 0, 0, 0)),
        (12, (3, 3), (12, 12, 12, 12)),  # every tap reads the input at some output position
    ],
)
def test_simplify_cuts_the_taps_that_read_only_padding(
    rate: int, kernel: tuple[int, int], pads: tuple[int, ...]
) -> None:
    x = var("x", 1, 8, 14, 14)
    attrs = {**CONV, "pads": (rate,) * 4, "dilations": (rate, rate)}
    conv = call("conv2d", x, const("w", 4, 8, 3, 3), **attrs)
    g = graph([x], conv)
    out = simplify(g)
    (after,) = out.calls()
    assert after.args[1].type.shape[2:] == kernel and tuple(after.attr("pads")) == pads
    check_pass(g, out)


def test_simplify_cuts_padding_taps_on_one_side_only_when_the_pads_stay_whole() -> None:
    x = var("x", 1, 2, 4, 5)
    # rows: the top tap reads row o - 6 for o < 4, always padding; columns: every tap is needed
    attrs = {**CONV, "pads": (6, 1, 0, 1), "dilations": (3, 1)}
    top = call("conv2d", x, const("w", 3, 2, 3, 3), **attrs)
    out = simplify(graph([x], top))
    (after,) = out.calls()
    assert after.args[1].type.shape[2:] == (2, 3) and tuple(after.attr("pads")) == (3, 1, 0, 1)
    check_pass(graph([x], top), out)
    # only the bottom tap reads the input, but cutting the others would leave a negative pad (a crop)
    y = var("y", 1, 2, 6, 5)
    attrs = {**CONV, "pads": (8, 0, 0, 0), "dilations": (6, 1)}
    crop = call("conv2d", y, const("w", 3, 2, 3, 3), **attrs)
    assert simplify(graph([y], crop)).calls()[0].args[1].type.shape[2:] == (3, 3)


def test_simplify_keeps_broadcasting_neutral_ops_and_real_work() -> None:
    x = var("x", 3)
    widened = call("add", x, const("zeros", 2, 3, value=0.0))  # changes the shape: must stay
    flipped = call("slice", x, starts=(2,), ends=(-1,), axes=(0,), steps=(-1,))  # same shape, reversed
    g = graph([x], widened, flipped)
    out = simplify(g)
    assert ops(out) == ["add", "slice"]
    check_pass(g, out)


@pytest.mark.parametrize(
    ("exponent", "rewritten"),
    [
        (1.0, []),
        (2.0, ["mul"]),
        (3.0, ["mul", "mul"]),
        (4.0, ["mul", "mul"]),
        (0.5, ["sqrt"]),
        (-1.0, ["reciprocal"]),
    ],
)
@pytest.mark.parametrize("shape", [(), (1,), (5,), (1, 5)])
def test_simplify_turns_pow_by_a_special_constant_into_cheaper_ops(
    exponent: float, rewritten: list[str], shape: tuple[int, ...]
) -> None:
    x = var("x", 3, 5)
    g = graph([x], call("pow", x, const("c", *shape, value=exponent), name="block0.pow"))
    out = simplify(g)
    assert ops(out) == rewritten
    assert all(c.name == "block0.pow" and c.type == x.type for c in out.calls())  # explain maps them back
    if not rewritten:
        assert out.outputs[0] is x
    verify_graph(out)
    feed = {"x": np.abs(feeds(g)["x"]) + 0.1 if exponent == 0.5 else feeds(g)["x"]}
    want, got = run_graph(g, feed)["out0"], run_graph(out, feed)["out0"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_simplify_takes_an_integer_exponent_constant() -> None:
    x = var("x", 4)
    g = graph([x], call("pow", x, Const("three", np.full((4,), 3, np.int64))))
    out = simplify(g)
    assert ops(out) == ["mul", "mul"]
    check_pass(g, out)


def test_simplify_keeps_pow_it_cannot_replace() -> None:
    x = var("x", 3)
    general = call("pow", x, const("c", value=2.5))
    mixed = call("pow", x, Const("mixed", np.array([2.0, 3.0, 2.0], np.float32)))
    widened = call("pow", x, const("wide", 2, 3, value=2.0))  # broadcasts x to (2, 3)
    runtime = call("pow", x, var("y", 3))
    n = var("n", 3, dtype="int64")
    integer = call("pow", n, Const("two", np.full((), 2, np.int64)))
    g = graph([x, var("y", 3), n], general, mixed, widened, runtime, integer)
    out = simplify(g)
    assert ops(out) == ["pow"] * 5
    assert all(a is b for a, b in zip(out.outputs, g.outputs, strict=True))


def test_compiled_pow_by_special_constants_matches_numpy(tmp_path: Path) -> None:
    """Through the whole pipeline (negative bases included): the rewritten pows and the kept ones."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 37)) * 3).astype(np.float32)
    p = rng.uniform(0.01, 20.0, (4, 37)).astype(np.float32)
    exponents = {
        "one": ("x", np.float32(1.0)),
        "square": ("x", np.full((1, 37), 2.0, np.float32)),
        "cube": ("x", np.int64(3)),
        "fourth": ("x", np.float32(4.0)),
        "root": ("p", np.float32(0.5)),
        "inverse": ("x", np.float32(-1.0)),
        "general": ("p", np.float32(2.5)),
        "mixed": ("x", np.where(np.arange(37) % 2 == 0, 2.0, 3.0).astype(np.float32)),
    }
    nodes = [
        helper.make_node("Pow", [base, f"{name}_c"], [name], name=name)
        for name, (base, _) in exponents.items()
    ]
    initializers = {f"{name}_c": np.asarray(c) for name, (_, c) in exponents.items()}
    shape = [4, 37]
    model = make_model(
        nodes,
        {"x": (TensorProto.FLOAT, shape), "p": (TensorProto.FLOAT, shape)},
        list(exponents),
        initializers,
    )
    fused, _ = run_passes(load_onnx(model.SerializeToString()), 3)
    kept = [c.attr("group").name for c in fused.calls() if "pow" in c.attr("group").ops]
    assert len(kept) == 2, kept  # general and mixed
    compiled = compile_model(model.SerializeToString(), CompileOptions(opt_level=3))
    compiled.save(tmp_path / "pow.temper")
    got = compiler.runtime.load(tmp_path / "pow.temper").run({"x": x, "p": p})
    feeds64 = {"x": x.astype(np.float64), "p": p.astype(np.float64)}
    for name, (base, c) in exponents.items():
        want = np.power(feeds64[base], np.asarray(c, np.float64)).astype(np.float32)
        assert got[name].dtype == np.float32 and got[name].shape == want.shape, name
        # a rounding per multiply: a cube or fourth power may be off by a few ulps
        np.testing.assert_allclose(got[name], want, rtol=3e-7, atol=0, err_msg=name)


# ---- fold_batch_norm --------------------------------------------------------------------------------


def test_bn_after_conv_scales_the_weight() -> None:
    x = var("x", 1, 3, 6, 6)
    conv = call("conv2d", x, const("w", 4, 3, 3, 3), **CONV)
    g = graph([x], call("relu", bn(conv)))
    out = fold_batch_norm(g)
    assert ops(out) == ["conv2d", "add", "relu"]
    check_pass(g, out, atol=1e-4)


def test_bn_after_conv_and_bias_folds_into_the_bias() -> None:
    x = var("x", 1, 3, 6, 6)
    conv = call("conv2d", x, const("w", 4, 3, 3, 3), **CONV)
    biased = call("add", conv, const("b", 1, 4, 1, 1))
    g = graph([x], bn(biased))
    out = fold_batch_norm(g)
    assert ops(out) == ["conv2d", "add"]
    check_pass(g, out, atol=1e-4)


@pytest.mark.parametrize("groups", [1, 2])
def test_bn_after_conv_transpose(groups: int) -> None:
    x = var("x", 1, 4, 5, 5)
    w = const("w", 4, 3, 3, 3)
    attrs = {
        "strides": (2, 2),
        "pads": (1, 1, 1, 1),
        "dilations": (1, 1),
        "groups": groups,
        "output_padding": (1, 1),
    }
    g = graph([x], bn(call("conv_transpose2d", x, w, **attrs)))
    out = fold_batch_norm(g)
    assert ops(out) == ["conv_transpose2d", "add"]
    check_pass(g, out, atol=1e-4)


def test_bn_after_dense_with_bias() -> None:
    x = var("x", 5, 8)
    dense = call("add", call("matmul", x, const("w", 8, 6)), const("b", 6))
    g = graph([x], bn(dense))
    out = fold_batch_norm(g)
    assert ops(out) == ["matmul", "add"]
    check_pass(g, out, atol=1e-4)


def test_bn_is_standalone_when_the_conv_has_other_users() -> None:
    x = var("x", 1, 3, 6, 6)
    conv = call("conv2d", x, const("w", 4, 3, 3, 3), **CONV)
    g = graph([x], bn(conv), call("relu", conv))
    out = fold_batch_norm(g)
    assert Counter(ops(out)) == Counter(["conv2d", "mul", "add", "relu"])
    assert out.calls()[0].args[1].name == "w" and out.calls()[0].args[1] is conv.args[1]
    check_pass(g, out, atol=1e-4)


def test_standalone_bn_on_an_input_and_runtime_statistics() -> None:
    x = var("x", 2, 3, 4)
    mean = var("mean", 3)
    params = bn_params(3)
    dynamic = call("batch_norm", x, params[0], params[1], mean, params[3], epsilon=1e-3)
    g = Graph((x, mean), (bn(x), dynamic), ("a", "b"))
    out = fold_batch_norm(g)
    assert Counter(ops(out)) == Counter(["mul", "add", "batch_norm"])
    check_pass(g, out, atol=1e-4)


# ---- eliminate --------------------------------------------------------------------------------------


def test_cse_merges_equal_calls_and_constants() -> None:
    x = var("x", 4)
    c1, c2 = Const("c1", np.arange(4, dtype=np.float32)), Const("c2", np.arange(4, dtype=np.float32))
    a = call("mul", x, c1)
    b = call("mul", x, c2)  # same op, merged args, same attrs: one call
    e1 = call("leaky_relu", a, alpha=0.1)
    e2 = call("leaky_relu", b, alpha=0.2)  # different attrs: kept
    g = graph([x], call("add", e1, call("leaky_relu", b, alpha=0.1)), e2)
    out = common_subexpression_elimination(g)
    assert Counter(ops(out)) == Counter(["mul", "leaky_relu", "leaky_relu", "add"])
    add = out.outputs[0]
    assert add.args[0] is add.args[1]
    check_pass(g, out)


def test_cse_merges_constants_by_their_bytes() -> None:
    """Equal bytes merge whatever the arrays' memory order (a transposed view hashes as its values);
    0.0 and -0.0 compare equal as numbers but differ in their bytes, and stay apart."""
    x = var("x", 2, 3)
    values = np.arange(6, dtype=np.float32).reshape(3, 2)
    same = (Const("a", np.ascontiguousarray(values.T)), Const("b", values.T))
    signed = (Const("z", np.zeros((2, 3), np.float32)), Const("nz", np.full((2, 3), -0.0, np.float32)))
    g = graph(
        [x],
        call("add", x, same[0]),
        call("add", x, same[1]),
        call("div", x, signed[0]),
        call("div", x, signed[1]),
    )
    out = common_subexpression_elimination(g)
    assert out.outputs[0] is out.outputs[1]
    assert out.outputs[2] is not out.outputs[3]
    assert len([n for n in out.nodes() if isinstance(n, Const)]) == 3
    check_pass(g, out)


def test_cse_keeps_constants_of_other_dtypes_apart() -> None:
    x = var("x", 2, dtype="int64")
    g = graph(
        [x],
        call("add", x, Const("a", np.zeros(2, np.int64))),
        call("cast", Const("b", np.zeros(2, np.int32)), to="int64"),
    )
    out = common_subexpression_elimination(g)
    assert len([n for n in out.nodes() if isinstance(n, Const)]) == 2


def test_dead_code_elimination_keeps_what_outputs_need() -> None:
    x = var("x", 3)
    g = graph([x], call("relu", x))
    out = dead_code_elimination(g)
    assert ops(out) == ["relu"] and out.inputs == g.inputs
    check_pass(g, out)


# ---- pointwise_conv_to_matmul -----------------------------------------------------------------------

POINTWISE = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "groups": 1}


def test_pointwise_conv_becomes_a_matmul_with_its_epilogue_on_the_flat_view() -> None:
    x = var("x", 1, 32, 16, 16)
    res = var("res", 1, 8, 16, 16)
    conv = call("conv2d", x, const("w", 8, 32, 1, 1), **POINTWISE)
    y = call("add", call("clip", call("add", conv, const("b", 8, 1, 1)), min=0.0, max=6.0), res)
    g = graph([x, res], y)
    out = simplify(pointwise_conv_to_matmul(g))
    check_pass(g, out)
    assert ops(out) == ["reshape", "matmul", "add", "clip", "reshape", "add", "reshape"]
    kernels = [g.ops for g in groups_of(fuse_ops(out)) if g.ops != ["reshape"]]  # reshapes: aliases
    assert kernels == [["matmul", "add", "clip", "add"]]


def test_pointwise_layers_in_a_row_share_the_flat_view() -> None:
    x = var("x", 1, 32, 16, 16)
    a = call("relu", call("conv2d", x, const("w1", 48, 32, 1, 1), **POINTWISE))
    b = call("conv2d", a, const("w2", 24, 48, 1, 1), **POINTWISE)
    g = graph([x], b)
    out = simplify(pointwise_conv_to_matmul(g))
    check_pass(g, out)
    assert ops(out) == ["reshape", "matmul", "relu", "matmul", "reshape"]


@pytest.mark.parametrize(
    ("shape", "attrs", "why"),
    [
        ((1, 32, 14, 14), POINTWISE, "a 14x14 plane does not fill vectors evenly"),
        ((1, 16, 16, 16), POINTWISE, "16 input channels: too short a reduction"),
        ((1, 32, 32, 32), {**POINTWISE, "strides": (2, 2)}, "strided"),
        ((1, 32, 16, 16), {**POINTWISE, "pads": (1, 1, 1, 1)}, "padded"),
    ],
)
def test_other_convolutions_stay_convolutions(shape: tuple[int, ...], attrs: dict, why: str) -> None:
    x = var("x", *shape)
    g = graph([x], call("relu", call("conv2d", x, const("w", 8, shape[1], 1, 1), **attrs)))
    assert ops(pointwise_conv_to_matmul(g)) == ["conv2d", "relu"], why


def test_an_epilogue_broadcasting_along_one_spatial_axis_stays_in_nchw() -> None:
    x = var("x", 1, 32, 16, 16)
    conv = call("conv2d", x, const("w", 8, 32, 1, 1), **POINTWISE)
    g = graph([x], call("mul", conv, const("rows", 1, 1, 16, 1)))
    out = simplify(pointwise_conv_to_matmul(g))
    check_pass(g, out)
    assert ops(out) == ["reshape", "matmul", "reshape", "mul"]


# ---- levels -----------------------------------------------------------------------------------------


def test_levels_list_their_passes_and_end_with_a_partition() -> None:
    assert [n for n, _ in PASSES_BY_LEVEL[0]] == ["one_kernel_per_op"]
    assert [n for n, _ in PASSES_BY_LEVEL[3]][-1] == "fuse_ops"
    for level, passes in PASSES_BY_LEVEL.items():
        names = [n for n, _ in passes]
        assert len(names) == len(set(names)), level
    with pytest.raises(ValueError, match="opt level"):
        run_passes(graph([var("x", 1)], var("x", 1)), 7)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_level_preserves_numerics_on_resnet(level: int) -> None:
    g = load_onnx(builders.resnet18(image=32, classes=10), {"input": [1, 3, 32, 32]})
    seen: list[str] = []

    def after_each(name: str, out: Graph) -> None:
        verify_graph(out)
        seen.append(name)

    fused, ran = run_passes(g, level, on_pass=after_each)
    assert ran == seen == [n for n, _ in PASSES_BY_LEVEL[level]]
    assert all(c.op == "fused" for c in fused.calls())
    check_pass(g, fused, atol=1e-4)
    if level >= 2:
        assert "batch_norm" not in {op for c in fused.calls() for op in c.attr("group").ops}


def test_level_3_on_bert_fuses_and_matches() -> None:
    g = load_onnx(builders.bert_layer(seq=8, hidden=32, heads=2, ffn=64))
    fused, _ = run_passes(g, 3)
    check_pass(g, fused, atol=1e-4)
    unfused, _ = run_passes(g, 2)
    assert len(fused.calls()) < len(unfused.calls())


def test_inputs_are_never_rewritten() -> None:
    x = var("x", 2)
    g = graph([x], call("relu", x))
    for _, fn in PASSES_BY_LEVEL[3]:
        out = fn(g, PassContext(channel_block=8))
        assert out.inputs == g.inputs and all(isinstance(v, Var) for v in out.inputs)
