"""Schedule overrides: pinned by ONNX node or kernel name, never silently dropped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import OverrideError
from compiler.kernels import Kernel, ScheduleChoice, default_schedule
from compiler.pipeline import CompileOptions, compile_model, inspect_model
from compiler.tir.printer import func_str


def _model() -> bytes:
    """Two identical convs (one workload), a Dropout between them that inference removes, the
    second conv followed by a batch norm folded into it."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), n) for n in ("w1", "w2")
    ]
    inits += [numpy_helper.from_array(np.full(8, v, np.float32), n) for n, v in [("s", 1.5), ("b", 0.1)]]
    inits += [numpy_helper.from_array(np.full(8, v, np.float32), n) for n, v in [("m", 0.2), ("v", 2.0)]]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
        helper.make_node("Dropout", ["r1"], ["d1"], name="dropout"),
        helper.make_node("Conv", ["d1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv_b"),
        helper.make_node("BatchNormalization", ["c2", "s", "b", "m", "v"], ["y"], name="bn_b"),
    ]
    graph = helper.make_graph(
        nodes,
        "twin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


OPTIONS = CompileOptions(disabled_passes=frozenset({"alter_layout"}))


class _OtherOption:
    """Every schedule decision takes an option other than its default where it has one: a valid
    schedule unlike the default one, on any vector width."""

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        return next((o for o in reversed(options) if o != default), default)


def _other_choice(kernel: Kernel) -> ScheduleChoice:
    sch, _ = default_schedule(kernel.workload, _OtherOption())
    assert sch.trace.dumps() != kernel.trace.dumps()
    return ScheduleChoice(sch.trace, {"source": "override", "inline": True})


def _pin(name: str, model: bytes) -> tuple[ScheduleChoice, dict[str, dict[str, Any]]]:
    plain = compile_model(model, OPTIONS)
    choice = _other_choice(next(k for k in plain.kernels if "conv_b" in k.workload.nodes))
    compiled = compile_model(model, replace(OPTIONS, overrides={name: choice}))
    return choice, {k["name"]: k for k in compiled.manifest["kernels"]}


def _conv_kernels(model: bytes) -> list[str]:
    kernels = compile_model(model, OPTIONS).manifest["kernels"]
    return [k["name"] for k in kernels if any(n.startswith("conv") for n in k["nodes"])]


def test_an_override_by_node_name_pins_only_that_nodes_kernel() -> None:
    model = _model()
    _, kernels = _pin("conv_b", model)
    sources = {tuple(k["nodes"]): k["schedule"] for k in kernels.values()}
    conv_b = next(s for nodes, s in sources.items() if "conv_b" in nodes)
    conv_a = next(s for nodes, s in sources.items() if "conv_a" in nodes)
    assert conv_b["source"] == "override" and conv_b["pinned_by"] == "conv_b"
    assert conv_a["source"] == "default"


def test_an_override_by_kernel_name_is_accepted() -> None:
    model = _model()
    first, second = _conv_kernels(model)
    _, kernels = _pin(second, model)
    assert kernels[second]["schedule"]["source"] == "override"
    assert kernels[second]["schedule"]["pinned_by"] == second
    assert kernels[first]["schedule"]["source"] == "default"


def test_an_override_naming_nothing_is_an_error_with_the_closest_names() -> None:
    model = _model()
    with pytest.raises(OverrideError, match="no ONNX node and no kernel") as info:
        _pin("convX", model)
    assert "conv_a" in info.value.closest and "conv_b" in info.value.closest
    assert "closest: " in str(info.value)
    with pytest.raises(OverrideError, match="kernels: "):
        _pin("zzzzzzzzzzzz", model)


def test_an_override_of_a_removed_node_says_it_runs_in_no_kernel() -> None:
    model = _model()
    with pytest.raises(OverrideError, match="node 'dropout' runs in no kernel"):
        _pin("dropout", model)
    _, kernels = _pin("bn_b", model)  # a folded batch norm is part of its conv's kernel
    assert next(k for k in kernels.values() if "bn_b" in k["nodes"])["schedule"]["source"] == "override"


def test_two_overrides_of_one_kernel_are_an_error() -> None:
    model = _model()
    plain = compile_model(model, OPTIONS)
    conv = next(k for k in plain.kernels if "conv_b" in k.workload.nodes)
    choice = ScheduleChoice(conv.trace, {"source": "override"})
    options = CompileOptions(
        disabled_passes=OPTIONS.disabled_passes, overrides={"conv_b": choice, conv.name: choice}
    )
    with pytest.raises(OverrideError, match="both pin kernel"):
        compile_model(model, options)


def test_inspect_shows_the_overridden_schedule_as_compile_builds_it() -> None:
    model = _model()
    plain = compile_model(model, OPTIONS)
    conv = next(k for k in plain.kernels if "conv_b" in k.workload.nodes)
    choice = _other_choice(conv)
    pinned = replace(OPTIONS, overrides={"conv_b": choice})
    built = next(k for k in compile_model(model, pinned).kernels if "conv_b" in k.workload.nodes)
    shown = inspect_model(model, "scheduled", pinned, kernel="conv_b")
    assert shown.strip() == func_str(built.scheduled).strip()
    assert shown.strip() != func_str(conv.scheduled).strip()
    with pytest.raises(OverrideError):
        inspect_model(model, "tir", CompileOptions(overrides={"nope": choice}))


def test_onnx_model_is_valid() -> None:
    onnx.checker.check_model(onnx.load_from_string(_model()))


def _twin_blocks() -> bytes:
    """conv+relu twice, same shapes: one workload, so the second kernel reuses the first's code."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), n) for n in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv_b"),
        helper.make_node("Relu", ["c2"], ["y"], name="relu_b"),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 10, 10]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "twin", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class _Records:
    """A schedule source holding one record per workload key (the database's role)."""

    def __init__(self, choices: dict[str, ScheduleChoice]) -> None:
        self.choices = choices

    def lookup(self, workload_key: str, target_key: str) -> ScheduleChoice | None:
        return self.choices.get(workload_key)


def test_a_kernel_sharing_another_kernels_code_keeps_its_own_provenance() -> None:
    """conv_a takes a record, conv_b is pinned to that record's very trace: conv_b shares conv_a's
    code, and the manifest still says conv_b's schedule is an override and conv_a's a record."""
    model = _twin_blocks()
    plain = compile_model(model, OPTIONS)
    conv_b = next(k for k in plain.kernels if "conv_b" in k.workload.nodes)
    trace = _other_choice(conv_b).trace
    records = _Records({conv_b.workload.key: ScheduleChoice(trace, {"source": "record", "record_id": 7})})
    pin = ScheduleChoice(trace, {"source": "override", "inline": True})
    pinned = compile_model(model, replace(OPTIONS, overrides={"conv_b": pin}), records)
    assert next(k for k in pinned.kernels if "conv_b" in k.workload.nodes).same_as is not None
    by_node = {n: k["schedule"] for k in pinned.manifest["kernels"] for n in k["nodes"]}
    assert by_node["conv_b"]["source"] == "override" and by_node["conv_b"]["pinned_by"] == "conv_b"
    assert by_node["conv_a"] == {**by_node["conv_a"], "source": "record", "record_id": 7}
