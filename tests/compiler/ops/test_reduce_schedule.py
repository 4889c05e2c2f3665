"""The reductions' own schedules (reduce ops, and the average pool's window sum): results against
onnxruntime over random shapes and axes, and the shape of the loop nest each builds (the kept innermost
axis as the vector with the reduced loops outside it, or the reduced row innermost; the kept axes in
parallel when there is enough input)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compiler.kernels import Workload, choose_rule
from compiler.pipeline import CompileOptions, frontier_for
from compiler.tir.ir import For, ForKind, walk_stmts
from compiler.tir.rules import MIN_PARALLEL_WORK, root_loops
from compiler.tir.trace import Schedule
from tests.compiler.frontend.onnx_check import run_ort, single_op
from tests.compiler.test_compiled_ops import compile_and_run

KINDS = ("ReduceMean", "ReduceSum", "ReduceMax")


def _model(kind: str, x: np.ndarray, axes: Sequence[int], keepdims: int) -> tuple[Any, dict[str, np.ndarray]]:
    return single_op(kind, {"x": x}, {"axes": np.array(axes, np.int64)}, keepdims=keepdims, opset=18)


def _workload(model: Any) -> Workload:
    fr = frontier_for(model.SerializeToString(), CompileOptions(target="haswell"), None)
    (kernel,) = fr.kernels
    return kernel.workload


class _Record:
    def __init__(self) -> None:
        self.asked: dict[str, Any] = {}

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        self.asked[name] = default
        return default


def _schedule(w: Workload) -> tuple[Schedule, str, dict[str, Any]]:
    record = _Record()
    sch, rule, fallback = choose_rule(w, record)
    assert fallback is None, fallback
    return sch, rule, record.asked


def _loops(w: Workload) -> tuple[list[For], str, dict[str, Any]]:
    sch, rule, asked = _schedule(w)
    return [s for s in walk_stmts(sch.func.body) if isinstance(s, For)], rule, asked


@pytest.mark.parametrize("seed", range(15))
def test_random_reductions_match_onnxruntime(seed: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(900 + seed)
    rank = int(rng.integers(1, 5))
    shape = [int(rng.choice([1, 2, 3, 7, 16, 17, 40])) for _ in range(rank)]
    axes = sorted({int(a) for a in rng.integers(0, rank, size=int(rng.integers(1, rank + 1)))})
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    model, feeds = _model(KINDS[seed % 3], x, axes, keepdims=int(rng.integers(0, 2)))
    want = run_ort(model, feeds)
    got = compile_and_run(model, feeds, tmp_path, 3)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, atol=1e-4, rtol=1e-4, err_msg=f"{shape} {axes}")


@pytest.mark.parametrize("kind", KINDS)
def test_a_blocked_global_pool_sums_channel_vectors_in_parallel(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """NCHW{16}c reduced over H, W: the 16 kept channels are the vector, the H, W loops outside it."""
    x = np.random.default_rng(1).standard_normal((1, 4, 30, 30, 16)).astype(np.float32)
    model, feeds = _model(kind, x, [2, 3], keepdims=1)
    sch, rule, asked = _schedule(_workload(model))
    assert rule == {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}[kind]
    assert set(asked) == {"vector_width", "parallel"}
    # one parallel loop over the 4 channel blocks, the 30 x 30 window, then two 8-lane sums at a time
    chain = root_loops(sch, "reduce_mean_sum" if kind == "ReduceMean" else rule)
    assert [(f.extent, f.kind) for f in chain] == [
        (4, ForKind.PARALLEL),
        (30, ForKind.SERIAL),
        (30, ForKind.SERIAL),
        (16, ForKind.VECTORIZED),
    ]
    np.testing.assert_allclose(
        compile_and_run(model, feeds, tmp_path, 3)["y0"], run_ort(model, feeds)["y0"], rtol=1e-4, atol=1e-4
    )


def test_a_row_reduction_keeps_the_row_innermost_and_rows_in_parallel() -> None:
    x = np.zeros((64, 1024), np.float32)
    model, _ = _model("ReduceSum", x, [1], keepdims=0)
    loops, _, asked = _loops(_workload(model))
    assert set(asked) == {"parallel"}
    assert MIN_PARALLEL_WORK <= 64 * 1024
    assert [f.kind for f in loops if f.extent == 64] == [ForKind.PARALLEL]


def test_a_small_reduction_stays_on_one_core() -> None:
    x = np.zeros((4, 8, 16), np.float32)
    model, _ = _model("ReduceMean", x, [1], keepdims=1)
    loops, _, _ = _loops(_workload(model))
    assert not any(f.kind == ForKind.PARALLEL for f in loops)
    assert any(f.kind == ForKind.VECTORIZED for f in loops)


def test_a_reduction_to_one_value_falls_back_with_its_reason() -> None:
    x = np.zeros((5, 7), np.float32)
    model, _ = _model("ReduceSum", x, [0, 1], keepdims=0)
    _, rule, fallback = choose_rule(_workload(model))
    assert rule == "generic"
    assert fallback is not None and "no kept axis" in fallback


@pytest.mark.parametrize("layout", ["planar", "blocked"])
def test_average_pools_get_the_pool_schedule_not_the_generic_one(layout: str) -> None:
    """The window sum is scheduled like a max pool's running max: planes (or rows of blocks) in
    parallel, the window unrolled around vectors of output columns (or channel lanes)."""
    shape = (1, 3, 20, 20) if layout == "planar" else (1, 2, 20, 20, 16)
    x = np.zeros(shape, np.float32)
    if layout == "planar":
        model, _ = single_op("AveragePool", {"x": x}, kernel_shape=[3, 3], pads=[1] * 4)
    else:  # a pool over NCHW{16}c is what alter_layout makes of one after a blocked conv
        fr = frontier_for(_blocked_pool_model(), CompileOptions(target="haswell"), None)
        (w,) = [k.workload for k in fr.kernels if k.workload.anchor_op == "avg_pool2d"]
        loops, rule, asked = _loops(w)
        assert rule == "avg_pool2d" and {"owt", "parallel"} <= set(asked)
        assert any(f.kind == ForKind.VECTORIZED for f in loops)
        return
    loops, rule, asked = _loops(_workload(model))
    assert rule == "avg_pool2d" and {"vector_width", "rows", "parallel"} <= set(asked)
    assert any(f.kind == ForKind.VECTORIZED for f in loops)
    assert any(f.kind == ForKind.UNROLLED for f in loops)


def _blocked_pool_model() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, name="conv"),
        helper.make_node("AveragePool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1] * 4, name="pool"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 20, 20])],
        [numpy_helper.from_array(w, "w")],
    )
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


@pytest.mark.parametrize(("shape", "axis"), [((2, 12, 37, 197), -1), ((3, 5, 130), 2), ((4, 50, 9), 1)])
def test_softmax_rows_run_their_exponentials_as_vectors(
    shape: tuple[int, ...], axis: int, tmp_path: Path
) -> None:
    """The generic schedule gives a softmax over the last axis its exponentials as (masked) vectors;
    any axis matches onnxruntime."""
    x = (np.random.default_rng(7).standard_normal(shape) * 4).astype(np.float32)
    model, feeds = single_op("Softmax", {"x": x}, axis=axis)
    if axis == -1:
        sch, _, _ = _schedule(_workload(model))
        exp = next(b for b in sch.blocks() if b.endswith("_exp"))
        assert root_loops(sch, exp)[-1].kind is ForKind.VECTORIZED
    got = compile_and_run(model, feeds, tmp_path)
    (expected,) = run_ort(model, feeds).values()
    np.testing.assert_allclose(next(iter(got.values())), expected, rtol=1e-5, atol=1e-6)
