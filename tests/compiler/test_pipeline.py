"""The pipeline as a user drives it: every stage printable, IR dumps, named targets, opt levels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.codegen.library import CodeLibrary
from compiler.errors import CompilerError
from compiler.pipeline import (
    PIPELINE,
    STAGES,
    Build,
    CompileOptions,
    compile_model,
    inspect_model,
    run_stages,
)
from tests.models.builders import small_conv_model


@pytest.fixture(scope="module")
def model() -> bytes:
    return small_conv_model().SerializeToString()


def test_every_stage_prints(model: bytes) -> None:
    texts = {stage: inspect_model(model, stage, CompileOptions()) for stage in STAGES}
    assert "conv2d(" in texts["graph"] and "def @main" in texts["graph"]
    assert "fused" in texts["fused"]
    # the conv runs in the blocked channel layout: converted at the chain's ends, weights pre-packed
    assert "layout_transform(" in texts["optimized"] and "conv2d_nchwc(" in texts["optimized"]
    assert "with block('conv2d_nchwc'" in texts["tir"]
    assert "parallel(" in texts["scheduled"] or "vectorized(" in texts["scheduled"]
    assert "define" in texts["llvm"] and "fmul" in texts["llvm"]
    assert "vfmadd" in texts["asm"] or "vmulps" in texts["asm"]


def test_stages_run_in_order_and_stop_at_the_one_asked(model: bytes) -> None:
    assert tuple(s.name for s in PIPELINE) == STAGES
    assert STAGES[0] == "graph" and STAGES[-1] == "asm"
    for k, stage in enumerate(STAGES):
        b = run_stages(Build.start(model, CompileOptions()), stage)
        assert list(b.seconds) == list(STAGES[: k + 1])  # what ran, in order, and nothing after
    fused = run_stages(Build.start(model, CompileOptions()), "fused")
    assert fused.frontier is None and fused.kernels == [] and fused.fused is not None
    assert fused.passes[-1] == "fuse_ops"  # the partition closes the passes
    with pytest.raises(CompilerError, match="unknown stage 'link'"):
        run_stages(Build.start(model, CompileOptions()), "link")


def test_the_dump_shows_what_inspect_shows(model: bytes, tmp_path: Path) -> None:
    compile_model(model, CompileOptions(dump_ir=str(tmp_path)))
    assert inspect_model(model, "optimized", CompileOptions()) == (tmp_path / "optimized.txt").read_text()
    assert inspect_model(model, "fused", CompileOptions()) == (tmp_path / "fused.txt").read_text()


def test_inspect_one_kernel_by_name_or_node(model: bytes) -> None:
    scheduled = inspect_model(model, "scheduled", CompileOptions())
    first = scheduled.split("def ", 1)[1].split("(", 1)[0]
    one = inspect_model(model, "tir", CompileOptions(), kernel=first)
    assert one.count("@prim_func") == 1
    by_node = inspect_model(model, "tir", CompileOptions(), kernel="conv")
    assert by_node.count("@prim_func") == 1
    with pytest.raises(CompilerError, match="no kernel 'nope'"):
        inspect_model(model, "tir", CompileOptions(), kernel="nope")
    with pytest.raises(CompilerError, match="unknown stage"):
        inspect_model(model, "bytecode", CompileOptions())


def test_dump_ir_writes_every_stage_of_every_kernel(model: bytes, tmp_path: Path) -> None:
    compiled = compile_model(model, CompileOptions(dump_ir=str(tmp_path)))
    for name in ("graph.txt", "optimized.txt", "fused.txt", "module.ll", "module.s"):
        assert (tmp_path / name).read_text().strip(), name
    for k in compiled.kernels:
        for suffix in (".tir.py", ".scheduled.py", ".trace.json"):
            assert (tmp_path / "kernels" / f"{k.symbol}{suffix}").read_text().strip()


@pytest.mark.parametrize(("cpu", "register"), [("skylake-avx512", "%zmm"), ("haswell", "%ymm")])
def test_named_targets_generate_their_vector_width(model: bytes, cpu: str, register: str) -> None:
    asm = inspect_model(model, "asm", CompileOptions(target=cpu))
    assert register in asm
    compiled = compile_model(model, CompileOptions(target=cpu))
    assert compiled.manifest["target"]["cpu"] == cpu


def test_inspect_asm_emits_the_assembly_without_building_objects(
    model: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_objects(self: CodeLibrary) -> list[bytes]:
        raise AssertionError("inspect built the objects before emitting the assembly")

    monkeypatch.setattr(CodeLibrary, "objects", no_objects)
    assert "ret" in inspect_model(model, "asm", CompileOptions())


def test_unknown_target_and_bad_opt_level_are_clear_errors(model: bytes) -> None:
    with pytest.raises(CompilerError, match=r"unknown target 'pentium-9000'.*znver4"):
        compile_model(model, CompileOptions(target="pentium-9000"))
    with pytest.raises(CompilerError, match=r"opt level must be 0\.\.3"):
        CompileOptions(opt_level=7)


def test_opt_levels_choose_passes_and_fusion(model: bytes) -> None:
    low = compile_model(model, CompileOptions(opt_level=0)).manifest
    high = compile_model(model, CompileOptions(opt_level=3)).manifest
    assert "fuse_ops" in high["passes"] and "fuse_ops" not in low["passes"]
    assert len(high["kernels"]) < len(low["kernels"])
    for k in high["kernels"]:
        assert len(k["workload_key"]) == 24 and k["schedule"]["source"] == "default"


def test_the_manifest_says_what_the_layout_pass_decided() -> None:
    from compiler.target import host_target
    from tests.compiler.frontend.onnx_check import single_op

    rng = np.random.default_rng(0)
    lanes = host_target().lanes()
    x = rng.standard_normal((1, 2 * lanes, 6, 6)).astype(np.float32)
    narrow = rng.standard_normal((1, 2 * lanes, 3, 3)).astype(np.float32)  # one output channel
    model, _ = single_op("Conv", {"x": x}, {"w": narrow}, pads=[1, 1, 1, 1])
    layout = compile_model(model.SerializeToString(), CompileOptions()).manifest["layout"]
    assert layout["channel_block"] == lanes and layout["blocked_convs"] == 0
    (reason,) = layout["planar_convs"].values()
    assert "1 output channels would be mostly padding" in reason
    wide = rng.standard_normal((2 * lanes, 2 * lanes, 3, 3)).astype(np.float32)
    model, _ = single_op("Conv", {"x": x}, {"w": wide}, pads=[1, 1, 1, 1])
    on = compile_model(model.SerializeToString(), CompileOptions()).manifest["layout"]
    assert on["blocked_convs"] == 1 and on["layout_transforms"] == 2 and on["planar_convs"] == {}
    off = compile_model(model.SerializeToString(), CompileOptions(disabled_passes={"alter_layout"}))
    assert "did not run" in next(iter(off.manifest["layout"]["planar_convs"].values()))


class _Timed:
    """A schedule source with records of given times (the default schedules, as a tuner stores
    them when nothing beat them)."""

    def __init__(self, seconds: dict[str, float], in_model: dict[str, float] | None = None) -> None:
        self.seconds = seconds
        self.in_model = in_model or {}  # workload key -> seconds per call timed inside the model
        self.traces: dict[str, object] = {}

    def lookup(self, workload_key: str, target_key: str):  # type: ignore[no-untyped-def]
        from compiler.kernels import ScheduleChoice

        if workload_key not in self.seconds:
            return None
        provenance = {"source": "record", "record_id": 1, "measured_s": self.seconds[workload_key]}
        if workload_key in self.in_model:
            provenance["model_s"] = self.in_model[workload_key]
        return ScheduleChoice(self.traces[workload_key], provenance, self.seconds[workload_key])  # type: ignore[arg-type]


def test_a_conv_measured_faster_direct_than_winograd_stays_direct() -> None:
    from compiler.kernels import default_schedule
    from compiler.pipeline import algorithm_alternatives, build_frontier
    from tests.compiler.frontend.onnx_check import single_op

    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 32, 12, 12)).astype(np.float32)
    w = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    model, _ = single_op("Conv", {"x": x}, {"w": w}, pads=[1, 1, 1, 1])
    data = model.SerializeToString()
    fr = build_frontier(data, CompileOptions())
    (alt,) = algorithm_alternatives(data, CompileOptions(), fr)
    wino = alt.kernel.workload
    assert wino.anchor_op == "conv2d_winograd_nchwc" and alt.twin.anchor_op == "conv2d_nchwc"
    assert set(wino.nodes) == set(alt.twin.nodes)
    for direct_s, winograd_s, expect in ((1e-4, 2e-4, "direct"), (3e-4, 2e-4, "winograd")):
        source = _Timed({alt.twin.key: direct_s, wino.key: winograd_s})
        source.traces = {k.key: default_schedule(k)[0].trace for k in (alt.twin, wino)}
        compiled = compile_model(data, CompileOptions(), source)
        algorithms = compiled.manifest["conv_algorithms"]
        assert len(algorithms[expect]) == 1 and not algorithms["winograd" if expect == "direct" else "direct"]
        if expect == "direct":
            assert "measured its direct kernel faster" in next(iter(algorithms["direct"].values()))
        passes = compiled.manifest["passes"]
        assert len(passes) == len(set(passes)) and passes[-1] == "fuse_ops"  # each pass once, as it ran
        used = {k["workload_key"]: k["schedule"]["source"] for k in compiled.manifest["kernels"]}
        assert used[alt.twin.key if expect == "direct" else wino.key] == "record"
    # a Winograd kernel timed inside the model gives way only to a twin with an in-model time (stored
    # only when the model ran faster whole with it), never to one faster alone only
    for in_model, expect in (
        ({wino.key: 2e-4}, "winograd"),
        ({wino.key: 2e-4, alt.twin.key: 3e-4}, "direct"),
    ):
        source = _Timed({alt.twin.key: 1e-4, wino.key: 2e-4}, in_model)
        source.traces = {k.key: default_schedule(k)[0].trace for k in (alt.twin, wino)}
        algorithms = compile_model(data, CompileOptions(), source).manifest["conv_algorithms"]
        assert len(algorithms[expect]) == 1, (in_model, algorithms)
    # without measurements of both, the rule stands
    only_one = _Timed({alt.twin.key: 1e-6})
    only_one.traces = {alt.twin.key: default_schedule(alt.twin)[0].trace}
    kept = compile_model(data, CompileOptions(), only_one).manifest
    assert kept["conv_algorithms"]["winograd"] and kept["passes"].count("fuse_ops") == 1


def test_a_conv_the_cost_rule_keeps_direct_runs_as_winograd_when_measured_faster(tmp_path: Path) -> None:
    """The reverse switch: a conv on a 5x5 plane, which the cost rule keeps direct (its Winograd
    weights cost more bytes than the FLOPs they save, on every target's bar), has a Winograd twin that
    tuning measures; a compilation runs it as Winograd when that twin measured faster, under the
    same in-model gate as the other way round, and computes what onnxruntime does."""
    import onnxruntime as ort

    import compiler.runtime
    from compiler.graph.passes.conv_algorithm import MEASURED_WINOGRAD
    from compiler.kernels import default_schedule
    from compiler.pipeline import algorithm_alternatives, build_frontier
    from tests.compiler.frontend.onnx_check import single_op

    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 32, 5, 5)).astype(np.float32)
    w = (rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    model, _ = single_op("Conv", {"x": x}, {"w": w}, pads=[1, 1, 1, 1])
    data = model.SerializeToString()
    fr = build_frontier(data, CompileOptions())
    (alt,) = algorithm_alternatives(data, CompileOptions(), fr)
    direct = alt.kernel.workload
    assert direct.anchor_op == "conv2d_nchwc" and alt.twin.anchor_op == "conv2d_winograd_nchwc"
    assert set(direct.nodes) == set(alt.twin.nodes)
    traces = {k.key: default_schedule(k)[0].trace for k in (direct, alt.twin)}
    cases: list[tuple[dict[str, float], dict[str, float], str]] = [
        ({direct.key: 1e-4, alt.twin.key: 2e-4}, {}, "direct"),  # slower alone
        ({direct.key: 3e-4, alt.twin.key: 2e-4}, {}, "winograd"),  # faster alone, nothing in the model
        ({direct.key: 3e-4, alt.twin.key: 2e-4}, {direct.key: 3e-4}, "direct"),  # the model not run with it
        ({direct.key: 3e-4, alt.twin.key: 2e-4}, {direct.key: 3e-4, alt.twin.key: 2e-4}, "winograd"),
    ]
    for alone, in_model, expect in cases:
        source = _Timed(alone, in_model)
        source.traces = traces
        compiled = compile_model(data, CompileOptions(), source)
        algorithms = compiled.manifest["conv_algorithms"]
        assert len(algorithms[expect]) == 1, (alone, in_model, algorithms)
        if expect == "winograd":
            assert next(iter(algorithms["winograd"].values())) == f"F(2x2, 3x3): {MEASURED_WINOGRAD}"
            used = {k["workload_key"]: k["schedule"]["source"] for k in compiled.manifest["kernels"]}
            assert used[alt.twin.key] == "record"
            compiled.save(tmp_path / "m.temper")
            (got,) = compiler.runtime.load(tmp_path / "m.temper").run({"x": x}).values()
            want = ort.InferenceSession(data).run(None, {"x": x})[0]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        else:
            assert "FLOPs per byte" in next(iter(algorithms["direct"].values()))


def test_kernels_prefetch_their_weights_ahead() -> None:
    """Weight streaming (compiler/codegen/stream.py): a kernel with a large constant and a loop
    doing a register tile's work per iteration prefetches the constant ahead of its reads."""
    from tests.models.builders import mlp

    text = inspect_model(mlp().SerializeToString(), "llvm", CompileOptions())
    assert "call void @llvm.prefetch" in text
    # the manifest says which constant each kernel streams, and from which loop
    kernels = compile_model(mlp().SerializeToString(), CompileOptions()).manifest["kernels"]
    streamed = [k["prefetch"] for k in kernels if k["prefetch"] is not None]
    assert streamed and all(
        p["weight"].startswith("p") and p["loop"] and p["lead_bytes"] > 0 and p["lines_per_step"] >= 1
        for p in streamed
    )


@pytest.mark.parametrize("target", ["znver3", "haswell", "sapphirerapids", "znver4"])
def test_conv_kernels_stream_from_their_input_channel_loop_at_any_vector_width(target: str) -> None:
    """A conv's weight streaming steps run in the loop over input-channel blocks of its register
    tile, whatever the vector width: a 256-bit core's channel blocks have half the lanes, so that
    loop holds half the FMAs of a 512-bit core's, and a step loop a level further out (one step per
    row of tiles) fetched dozens of lines at a time."""
    rng = np.random.default_rng(0)
    channels, size = 256, 14
    weights = {
        "w1": rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.05,
        "w3": rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.02,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="pointwise"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Conv", ["b", "w3"], ["y"], pads=[1, 1, 1, 1], name="three"),
    ]
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_model(model.SerializeToString(), CompileOptions(target=target))
    streamed = {
        k["name"]: k["prefetch"]
        for k in compiled.manifest["kernels"]
        if "conv2d" in k["name"] and k["prefetch"] is not None
    }
    assert any("winograd" in name for name in streamed) and len(streamed) == 2, streamed
    assert all(p["loop"].endswith("_rcb") for p in streamed.values()), streamed
    # the manifest says how many lines a step fetches: at most about what the core's miss buffers
    # hold, never dozens at once
    assert all(1 <= p["lines_per_step"] <= 16 for p in streamed.values()), streamed


def test_a_slice_of_one_contiguous_run_is_a_view_not_a_kernel(tmp_path: Path) -> None:
    """Rows of a row-major tensor are one run of its memory: the slice feeding a matmul is a view at
    their byte offset (no kernel, no copy), as a reshape is a view at offset 0; columns are not one
    run, so that slice is computed. Both matmuls see the right operands."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import compiler.runtime
    from compiler.ops.transform import contiguous_slice_offset

    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    v = rng.standard_normal((2, 5)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(v, "v"),
        *(numpy_helper.from_array(np.array(a, np.int64), n) for n, a in
          (("r0", [2]), ("r1", [4]), ("c0", [3]), ("c1", [5]), ("ax0", [0]), ("ax1", [1]))),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Slice", ["x", "r0", "r1", "ax0"], ["rows"], name="rows"),
        helper.make_node("MatMul", ["rows", "w"], ["a"], name="mm_rows"),
        helper.make_node("Slice", ["x", "c0", "c1", "ax1"], ["cols"], name="cols"),
        helper.make_node("MatMul", ["cols", "v"], ["b"], name="mm_cols"),
    ]
    graph = helper.make_graph(
        nodes,
        "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2 if n == "a" else 4, 5]) for n in ("a", "b")],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    names = [k["name"] for k in compiled.manifest["kernels"]]
    views = [b for b in compiled.plan["buffers"] if b["kind"] == "alias" and b.get("offset")]
    assert [b["offset"] for b in views] == [2 * 8 * 4]  # rows 2.. of float32 rows of 8
    assert sum(n.startswith("fused_slice") for n in names) == 1  # the columns' copy
    compiled.save(tmp_path / "m.temper")
    x = rng.standard_normal((4, 8)).astype(np.float32)
    got = compiler.runtime.load(tmp_path / "m.temper").run({"x": x})
    np.testing.assert_allclose(got["a"], x[2:4] @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["b"], x[:, 3:5] @ v, rtol=1e-5, atol=1e-5)
    # which slices are one run: leading axes at one index, then a range, then whole axes
    attrs = {"starts": (1, 0, 0), "ends": (2, 3, 4), "steps": (1, 1, 1), "axes": (0, 1, 2)}
    assert contiguous_slice_offset((3, 3, 4), attrs) == 12
    assert contiguous_slice_offset((3, 3, 4), {**attrs, "starts": (1, 1, 0)}) == 16
    assert (
        contiguous_slice_offset((3, 3, 4), {**attrs, "starts": (0, 1, 0)}) is None
    )  # 2 blocks, part of each
    assert contiguous_slice_offset((3, 3, 4), {**attrs, "starts": (1, 2, 0), "ends": (2, 3, 4)}) == 20
    assert contiguous_slice_offset((3, 3, 4), {**attrs, "ends": (2, 3, 2)}) is None  # part of each row
    assert (
        contiguous_slice_offset(
            (3, 3, 4), {**attrs, "starts": (0, 0, 0), "ends": (3, 3, 4), "steps": (2, 1, 1)}
        )
        is None
    )
