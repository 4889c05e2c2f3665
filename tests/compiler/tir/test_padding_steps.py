"""Steps of a sum of products that only multiply zero padding are guarded off (padding_steps).

The guards must never skip a product that is not zero: convs with padding, dilation and strides
of every kind (dense, depthwise, grouped, register tiles with tails) are compiled and compared
with onnxruntime; an atrous conv whose taps mostly land in the padding shows its guards in the
flattened kernel. Buffers that are mostly input (a 'same' conv's) or not zero padding (a max
pool's -inf) get none.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.kernels import Workload, default_schedule
from compiler.pipeline import CompileOptions, frontier_for
from compiler.tir.flatten import flatten
from compiler.tir.ir import BinOp, FloatImm, For, IfThenElse, PrimFunc, Store, Var, walk_expr, walk_stmts
from compiler.tir.padding_steps import support_breaks, zero_padded
from compiler.tir.rules import block_of
from compiler.tir.trace import Schedule
from tests.compiler.frontend.onnx_check import run_ort
from tests.compiler.test_compiled_ops import compile_and_run


def _conv(
    c: int, oc: int, hw: int, k: int, *, pad: int, dilation: int = 1, stride: int = 1, groups: int = 1
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(c * 100 + k * 10 + dilation)
    w = rng.standard_normal((oc, c // groups, k, k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    out = (hw + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], pads=[pad] * 4, dilations=[dilation] * 2,
        strides=[stride] * 2, group=groups,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, out, out])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    return model, {"x": x}


CASES = {
    "atrous rate 12 on 14x14": dict(c=64, oc=32, hw=14, k=3, pad=12, dilation=12),
    "atrous rate 6 on 13x13 (tile tails)": dict(c=32, oc=48, hw=13, k=3, pad=6, dilation=6),
    "atrous rate 2": dict(c=16, oc=16, hw=20, k=3, pad=2, dilation=2),
    "atrous rate 8 on 6x6, stride 2": dict(c=32, oc=16, hw=6, k=3, pad=8, dilation=8, stride=2),
    "5x5 pad 4 on 3x3": dict(c=32, oc=32, hw=3, k=5, pad=4),
    "same 3x3": dict(c=32, oc=32, hw=9, k=3, pad=1),
    "5x5 pad 4 stride 2": dict(c=16, oc=32, hw=11, k=5, pad=4, stride=2),
    "7x7 pad 3 stride 2 from 3 channels": dict(c=3, oc=16, hw=23, k=7, pad=3, stride=2),
    "depthwise atrous rate 4": dict(c=32, oc=32, hw=10, k=3, pad=4, dilation=4, groups=32),
    "depthwise 5x5 stride 2": dict(c=32, oc=32, hw=15, k=5, pad=2, stride=2, groups=32),
    "grouped pad 2": dict(c=32, oc=64, hw=8, k=3, pad=2, groups=4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_guarded_convs_match_onnxruntime(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, feeds = _conv(**CASES[name])
    (want,) = run_ort(model, feeds).values()
    (got,) = compile_and_run(model, feeds, tmp_path).values()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _flat_conv(model: onnx.ModelProto) -> PrimFunc:
    fr = frontier_for(model.SerializeToString(), CompileOptions(target="skylake-avx512"), None)
    (w,) = [k.workload for k in fr.kernels if k.workload.anchor_op == "conv2d_nchwc"]
    sch, _ = default_schedule(w)
    return flatten(sch.func)


def _guarded_loops(func: PrimFunc) -> list[str]:
    """Names of the loops whose body is a guard on their own variable."""
    return [
        s.var.name
        for s in walk_stmts(func.body)
        if isinstance(s, For) and isinstance(s.body, IfThenElse) and s.var in set(walk_expr(s.body.cond))
    ]


def test_an_atrous_conv_on_a_small_plane_guards_its_window_rows_and_columns() -> None:
    model, _ = _conv(**CASES["atrous rate 12 on 14x14"])
    guarded = _guarded_loops(_flat_conv(model))
    assert any(name.endswith("_ry") for name in guarded), guarded
    assert any(name.endswith("_rx") for name in guarded), guarded


def test_a_conv_without_padding_gets_no_guard() -> None:
    model, _ = _conv(c=32, oc=32, hw=9, k=3, pad=0)
    assert _guarded_loops(_flat_conv(model)) == []


def test_only_buffers_filled_with_zero_outside_a_condition_count_as_padding() -> None:
    """An atrous conv's padded input counts (mostly padding); a 'same' conv's (mostly input) and a
    max pool's (-inf outside) do not, and get no guards."""
    same, _ = _conv(c=16, oc=16, hw=8, k=3, pad=1)
    assert _guarded_loops(_flat_conv(same)) == []
    conv, _ = _conv(c=16, oc=16, hw=8, k=3, pad=6, dilation=6)
    sch, _ = default_schedule(
        next(
            k.workload
            for k in frontier_for(conv.SerializeToString(), CompileOptions(), None).kernels
            if k.workload.anchor_op == "conv2d_nchwc"
        )
    )
    found = zero_padded(sch.func.body)
    assert [b.name for b in found] == ["conv2d_nchwc_pad"]
    ivs, cond = next(iter(found.values()))
    assert all(isinstance(v, Var) for v in ivs)
    assert isinstance(cond, BinOp)

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
    )
    pool = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    pool.ir_version = 8
    (kernel,) = frontier_for(pool.SerializeToString(), CompileOptions(), None).kernels
    func = default_schedule(kernel.workload)[0].func
    assert any(
        isinstance(x, FloatImm) and x.value == -np.inf
        for s in walk_stmts(func.body)
        if isinstance(s, Store)
        for x in walk_expr(s.value)
    )
    assert zero_padded(func.body) == {}
    assert _guarded_loops(flatten(func)) == []


def _conv_workload(model: onnx.ModelProto, target: str = "host") -> Workload:
    """The direct conv's workload (a 'same' 3x3 conv would be a Winograd one)."""
    options = CompileOptions(target=target, disabled_passes=frozenset({"conv_algorithm"}))
    fr = frontier_for(model.SerializeToString(), options, None)
    (w,) = [k.workload for k in fr.kernels if k.workload.anchor_op == "conv2d_nchwc"]
    return w


@pytest.mark.parametrize(
    ("name", "edges"),
    [
        ("atrous rate 12 on 14x14", (2, 12)),  # the outer taps read input at columns 12-13 and 0-1
        ("atrous rate 6 on 13x13 (tile tails)", (6, 7)),
        ("atrous rate 8 on 6x6, stride 2", ()),  # its outer taps never read input
        ("5x5 pad 4 on 3x3", (1, 2, 3, 4, 5, 6)),
        ("same 3x3", ()),  # mostly input: not a padded buffer
    ],
)
def test_the_columns_where_a_tap_reads_enter_or_leave_the_input(name: str, edges: tuple[int, ...]) -> None:
    """support_breaks: the output columns at which some tap's reads cross the input's edge (the
    column tiles of an atrous conv start there, so its guards skip exactly)."""
    w = _conv_workload(_conv(**CASES[name])[0])
    sch = Schedule(w.func, w.const_params)
    assert w.info.anchor_block is not None
    blk = block_of(sch, w.info.anchor_block)
    assert support_breaks(blk, zero_padded(sch.func.body), axis=3) == edges


@pytest.mark.parametrize("target", ["host", "znver3", "skylake-avx512"])
def test_an_atrous_convs_column_tiles_start_at_the_inputs_edges(target: str) -> None:
    """The rate-12 conv over 14x14 takes column tiles dividing 2 (each tile's outer taps read only
    input or only padding) with enough accumulators; a 'same' conv keeps its row tile."""
    w = _conv_workload(_conv(**CASES["atrous rate 12 on 14x14"])[0], target)
    decisions = default_schedule(w)[0].decisions
    assert 2 % decisions["owt"] == 0 and decisions["nb"] * decisions["owt"] >= 4, decisions
    assert not decisions["plane_tile"]
    same = _conv_workload(_conv(c=64, oc=64, hw=14, k=3, pad=1)[0], target)
    assert default_schedule(same)[0].decisions["owt"] > 2
