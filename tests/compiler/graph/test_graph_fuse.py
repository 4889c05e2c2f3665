"""Operator fusion: group shapes on real networks, the rules one by one, and randomized invariants."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.frontend.onnx import load_onnx
from compiler.graph.interpret import run_graph
from compiler.graph.ir import Graph
from compiler.graph.passes import Group, partition, print_fused, run_passes
from compiler.graph.passes.fuse import groups_of
from compiler.graph.verify import verify_graph
from compiler.ops.registry import Pattern, get
from tests.compiler.graph.graph_builders import CONV, call, const, feeds, graph, var
from tests.models import builders


def mini_resnet() -> onnx.ModelProto:
    """stem conv(+bias)+BN+ReLU, a basic block with identity shortcut and one with a 1x1 downsample
    (convs with biases), global pool, Gemm."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def tensor(name: str, *shape: int, scale: float = 0.3) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, name: str, relu: bool) -> str:
        w, b = tensor(f"{name}.w", cout, cin, k, k), tensor(f"{name}.b", cout)
        nodes.append(
            helper.make_node(
                "Conv",
                [x, w, b],
                [f"{name}.c"],
                name=f"{name}.conv",
                pads=[k // 2] * 4,
                strides=[stride, stride],
            )
        )
        stats = [tensor(f"{name}.{p}", cout) for p in ("s", "o", "m")]
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 2.0, cout).astype(np.float32), f"{name}.v"))
        nodes.append(
            helper.make_node(
                "BatchNormalization", [f"{name}.c", *stats, f"{name}.v"], [f"{name}.bn"], name=f"{name}.bn"
            )
        )
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.r"], name=f"{name}.relu"))
        return f"{name}.r"

    def block(x: str, cin: int, cout: int, stride: int, name: str) -> str:
        h = conv_bn(x, cin, cout, 3, stride, f"{name}.1", relu=True)
        h = conv_bn(h, cout, cout, 3, 1, f"{name}.2", relu=False)
        short = conv_bn(x, cin, cout, 1, stride, f"{name}.down", relu=False) if stride > 1 else x
        nodes.append(helper.make_node("Add", [h, short], [f"{name}.add"], name=f"{name}.add"))
        nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.relu"))
        return f"{name}.out"

    x = conv_bn("image", 3, 8, 3, 1, "stem", relu=True)
    x = block(x, 8, 8, 1, "b1")
    x = block(x, 8, 16, 2, "b2")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    nodes.append(
        helper.make_node(
            "Gemm", ["flat", tensor("fc.w", 5, 16), tensor("fc.b", 5)], ["logits"], name="fc", transB=1
        )
    )
    g = helper.make_graph(
        nodes,
        "mini_resnet",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def signature(g: Graph) -> Counter[tuple[str, ...]]:
    return Counter(tuple(group.ops) for group in groups_of(g))


def check_fused(before: Graph, fused: Graph) -> None:
    verify_graph(fused)
    for group in groups_of(fused):
        heavy = [c for c in group.body.calls() if get(c.op).pattern in (Pattern.ANCHOR, Pattern.REDUCTION)]
        assert len(heavy) <= 1, group.name
        assert group.anchor is (heavy[0] if heavy else None)
        assert [p.name for p in group.params] == [f"p{i}" for i in range(len(group.params))]
    x = feeds(before)
    want, got = run_graph(before, x), run_graph(fused, x)
    for name in before.output_names:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_mini_resnet_fuses_conv_bias_bn_residual_relu_into_one_group() -> None:
    g = load_onnx(mini_resnet())
    fused, _ = run_passes(g, 3)
    check_fused(g, fused)
    assert signature(fused) == Counter(
        {
            ("conv2d", "add", "relu"): 3,  # stem, b1.1, b2.1: conv + (bias with BN folded in) + relu
            ("conv2d", "add", "add", "relu"): 2,  # second conv of each block: + residual + relu
            ("conv2d", "add"): 1,  # the downsample shortcut (its output feeds the residual add)
            ("reduce_mean",): 1,
            ("reshape",): 1,
            ("matmul", "add"): 1,
        }
    )
    residual = next(gr for gr in groups_of(fused) if gr.ops == ["conv2d", "add", "add", "relu"])
    assert len(residual.params) == 4  # input, weight, folded bias, residual
    assert residual.name.startswith("fused_conv2d_add_add_relu_")


def test_resnet18_group_count() -> None:
    g = load_onnx(builders.resnet18(image=32, classes=10), {"input": [1, 3, 32, 32]})
    fused, _ = run_passes(g, 3)
    check_fused(g, fused)
    sig = signature(fused)
    assert sum(sig.values()) == 24
    assert sig[("conv2d", "add", "add", "relu")] == 8 and sig[("conv2d", "add", "relu")] == 9
    assert sig[("conv2d", "add")] == 3
    names = [gr.name for gr in groups_of(fused)]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    "model",
    [
        lambda: builders.mobilenet_v2(image=32, classes=10),
        lambda: builders.bert_layer(seq=8, hidden=32, heads=2, ffn=64),
        lambda: builders.bert_layer(seq=8, hidden=32, heads=2, ffn=64, gelu="op"),
    ],
)
def test_fusion_invariants_on_other_models(model) -> None:
    g = load_onnx(model())
    fused, _ = run_passes(g, 3)
    check_fused(g, fused)
    assert len(groups_of(fused)) < len(g.calls())


def test_without_fusion_every_op_is_a_group() -> None:
    g = load_onnx(mini_resnet())
    unfused = partition(g, fuse=False)
    check_fused(g, unfused)
    assert [gr.ops for gr in groups_of(unfused)] == [[c.op] for c in g.calls()]
    conv = groups_of(unfused)[0]
    assert conv.name == "fused_conv2d_0" and conv.anchor is not None and conv.anchor.op == "conv2d"


def test_injective_chains_fuse_but_not_after_an_anchor() -> None:
    x = var("x", 4, 6)
    w = const("w", 6, 6)
    mm = call("matmul", x, w)
    t = call("transpose", call("reshape", mm, shape=(4, 2, 3)), perm=(1, 0, 2))
    y = call("exp", call("reshape", t, shape=(2, 12)))
    g = graph([x], y)
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["matmul"], ["reshape", "transpose", "reshape", "exp"]]


def test_a_reshape_ending_a_chain_is_an_alias_of_its_own() -> None:
    """The chain's kernel runs over its own shape; the reshape after it is a view (a group of
    reshapes alone), where a reshape inside a chain still fuses with what follows it."""
    x = var("x", 2, 3, 4)
    y = call("reshape", call("relu", call("transpose", x, perm=(0, 2, 1))), shape=(2, 12))
    g = graph([x], call("exp", call("reshape", call("sigmoid", y), shape=(24,))))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [
        ["transpose", "relu", "reshape", "sigmoid", "reshape", "exp"]
    ]
    tail = graph([x], call("reshape", call("relu", call("transpose", x, perm=(0, 2, 1))), shape=(2, 12)))
    fused = partition(tail)
    check_fused(tail, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["transpose", "relu"], ["reshape"]]


def test_epilogue_must_keep_the_anchor_shape() -> None:
    x = var("x", 1, 3, 4, 4)
    conv = call("conv2d", x, const("w", 2, 3, 3, 3), **CONV)
    wide = call("add", conv, const("big", 2, 2, 4, 4))  # broadcasts the conv output to a larger shape
    g = graph([x], call("relu", wide))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["conv2d"], ["add", "relu"]]


def test_shared_producers_and_outputs_end_groups() -> None:
    x = var("x", 2, 3)
    a = call("exp", x)
    b = call("relu", a)
    c = call("neg", a)  # `a` has two users
    d = call("sigmoid", b)
    e = call("tanh", d)  # `d` is also a graph output
    g = graph([x], call("add", c, e), d)
    fused = partition(g)
    check_fused(g, fused)
    # the add joins its first eligible producer's group (neg) and takes in tanh's, which only it reads
    assert sorted(gr.ops for gr in groups_of(fused)) == [
        ["exp"],
        ["neg", "tanh", "add"],
        ["relu", "sigmoid"],
    ]


def _gate(z, k: int, width: int):  # type: ignore[no-untyped-def]
    rows = z.type.shape[0]
    return call("slice", z, starts=(0, k * width), ends=(rows, (k + 1) * width), steps=(1, 1), axes=(0, 1))


def test_the_gates_of_a_recurrent_step_are_one_kernel() -> None:
    """An LSTM step's gates are slices of one product; each elementwise op that meets two gates takes
    in the other gate's group, so the cell update is one kernel after the matmul, not one per gate."""
    h, c = var("h", 2, 8), var("c", 2, 8)
    z = call("matmul", h, const("r", 8, 32))
    i, o, f, g = (_gate(z, k, 8) for k in range(4))
    kept = call("mul", call("sigmoid", f), c)
    cell = call("add", kept, call("mul", call("sigmoid", i), call("tanh", g)))
    hidden = call("mul", call("sigmoid", o), call("tanh", cell))
    graph_ = graph([h, c], hidden, cell)
    fused = partition(graph_)
    check_fused(graph_, fused)
    assert sorted(gr.ops for gr in groups_of(fused)) == [
        ["matmul"],
        ["slice", "sigmoid", "mul", "slice", "sigmoid", "slice", "tanh", "mul", "add"],
        ["slice", "sigmoid", "tanh", "mul"],
    ]


def test_only_anchor_free_groups_of_the_same_shape_are_taken_in() -> None:
    """An epilogue takes in an anchor-free operand's group (a slice of another tensor is read where
    the epilogue needs it), never a second anchor's; a smaller operand broadcast to the op's shape
    stays apart (taken in, it would be recomputed at every point it is broadcast to)."""
    x, y = var("x", 4, 8), var("y", 8)
    mm = call("matmul", x, const("w", 8, 8))
    wide = var("wide", 4, 16)
    part = call("slice", wide, starts=(0, 8), ends=(4, 16), steps=(1, 1), axes=(0, 1))
    g = graph([x, wide], call("add", call("relu", mm), call("exp", part)))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["matmul", "relu", "slice", "exp", "add"]]
    other = call("matmul", x, const("v", 8, 8))
    g = graph([x], call("add", call("relu", mm), call("exp", other)))
    fused = partition(g)
    check_fused(g, fused)
    assert sorted(gr.ops for gr in groups_of(fused)) == [["matmul", "exp"], ["matmul", "relu", "add"]]
    g = graph([x, y], call("add", call("exp", x), call("tanh", y)))
    fused = partition(g)
    check_fused(g, fused)
    assert sorted(gr.ops for gr in groups_of(fused)) == [["exp", "add"], ["tanh"]]
    assert len(groups_of(partition(g, fuse=False))) == 3


def test_two_reductions_never_share_a_group() -> None:
    x = var("x", 4, 8)
    sm = call("softmax", x, axis=1)
    g = graph([x], call("reduce_max", call("exp", sm), axes=(1,), keepdims=0))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["softmax", "exp"], ["reduce_max"]]


def test_randomized_graphs_keep_invariants() -> None:
    rng = np.random.default_rng(11)
    unary = ["relu", "exp", "neg", "tanh", "sigmoid"]
    for trial in range(30):
        x = var("x", 2, 8)
        values = [x]
        for _ in range(int(rng.integers(3, 14))):
            kind = rng.random()
            src = values[int(rng.integers(len(values)))]
            if kind < 0.4:
                v = call(str(rng.choice(unary)), src)
            elif kind < 0.6:
                v = call("add", src, values[int(rng.integers(len(values)))])
            elif kind < 0.75:
                v = call("matmul", src, const(f"w{trial}", 8, 8, value=0.1))
            elif kind < 0.85:
                v = call("softmax", src, axis=1)
            else:
                v = call("transpose", call("reshape", src, shape=(8, 2)), perm=(1, 0))
                v = call("reshape", v, shape=(2, 8))
            values.append(v)
        outs = [values[-1], *(values[int(i)] for i in rng.integers(1, len(values), 2))]
        g = Graph((x,), tuple(outs), tuple(f"o{i}" for i in range(len(outs))))
        fused = partition(g)
        check_fused(g, fused)


def test_print_fused_shows_every_group_and_main() -> None:
    g = load_onnx(mini_resnet())
    fused, _ = run_passes(g, 3)
    text = print_fused(fused)
    for group in groups_of(fused):
        assert f"def @{group.name}(%p0: " in text
        assert f"= @{group.name}(" in text
    assert text.count("def @main(%image: f32[1, 3, 8, 8]) -> (f32[1, 5]) {") == 1
    assert isinstance(groups_of(fused)[0], Group)


def test_partition_refuses_a_fused_graph() -> None:
    x = var("x", 2)
    g = partition(graph([x], call("relu", x)))
    with pytest.raises(ValueError, match="already"):
        partition(g)


def test_a_silu_diamond_after_a_conv_is_its_epilogue() -> None:
    x = var("x", 1, 3, 6, 6)
    conv = call("conv2d", x, const("w", 4, 3, 3, 3), **CONV)
    g = graph([x], call("relu", call("mul", conv, call("sigmoid", conv))))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["conv2d", "sigmoid", "mul", "relu"]]


def test_a_gelu_diamond_with_nested_branches_joins_the_matmul() -> None:
    """GELU as exporters write it: x * 0.5 * (1 + erf(x / sqrt 2)), the branches meeting twice."""
    x = var("x", 4, 8)
    mm = call("matmul", x, const("w", 8, 8))
    half = call("mul", mm, const("half", value=0.5))
    erf = call("add", call("erf", call("div", mm, const("r2", value=1.4142135))), const("one", value=1.0))
    g = graph([x], call("mul", half, erf))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["matmul", "mul", "div", "erf", "add", "mul"]]


def test_a_diamond_whose_branch_is_read_elsewhere_stays_apart() -> None:
    x = var("x", 1, 3, 6, 6)
    conv = call("conv2d", x, const("w", 4, 3, 3, 3), **CONV)
    gate = call("sigmoid", conv)
    g = graph([x], call("mul", conv, gate), gate)  # the gate is also a graph output
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["conv2d"], ["sigmoid"], ["mul"]]


def test_a_diamond_through_a_reduction_or_a_reshape_stays_apart() -> None:
    x = var("x", 4, 8)
    mm = call("matmul", x, const("w", 8, 8))
    g = graph([x], call("mul", mm, call("softmax", mm, axis=1)))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["matmul"], ["softmax", "mul"]]
    flipped = call("reshape", call("reshape", mm, shape=(8, 4)), shape=(4, 8))
    g = graph([x], call("add", mm, flipped))
    fused = partition(g)
    check_fused(g, fused)
    assert [gr.ops for gr in groups_of(fused)] == [["matmul"], ["reshape", "reshape", "add"]]
