"""Operator benchmark: each workload of workloads.json as a single-op ONNX model, temper (untuned, default
schedules) against onnxruntime, PyTorch, numpy and — when importable — Apache TVM (untuned).

    python -m bench.ops [--quick] [--json out.json] [--only gemm1024,conv_r18_l1] [--markdown]

matmul takes both operands as inputs; gemm has a constant weight and bias; conv2d has constant weights
(no bias). Every system sees the same fp32 arrays; outputs are checked against numpy before timing, and the
systems are timed in alternating rounds (common.interleaved), so that all see the same machine.
"""

from __future__ import annotations

import argparse
import gc
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench import common

WORKLOADS = Path(__file__).with_name("workloads.json")
SYSTEMS = ("temper", "onnxruntime", "pytorch", "numpy", "tvm")
CHECK_RTOL = 1e-3
"""Outputs of every system must match numpy to this relative tolerance (of the output's max) before timing."""


def load_workloads() -> list[dict[str, Any]]:
    return json.loads(WORKLOADS.read_text())["workloads"]


# -- the single-op models and their data ----------------------------------------------------------


def workload_model(
    spec: dict[str, Any], rng: np.random.Generator
) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(ONNX model, runtime feeds, constant weights) for one workload."""
    op = spec["op"]
    if op == "matmul":
        a = rng.standard_normal(spec["a"]).astype(np.float32)
        b = rng.standard_normal(spec["b"]).astype(np.float32)
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        inputs = [_info("a", a.shape), _info("b", b.shape)]
        out_shape = [a.shape[0], b.shape[1]]
        return _model(spec["name"], [node], inputs, out_shape, []), {"a": a, "b": b}, {}
    if op == "gemm":
        x = rng.standard_normal(spec["a"]).astype(np.float32)
        w = (rng.standard_normal(spec["b"]) / np.sqrt(spec["b"][0])).astype(np.float32)
        consts = {"w": w}
        names = ["x", "w"]
        if spec.get("bias"):
            consts["bias"] = rng.standard_normal(spec["b"][1]).astype(np.float32)
            names.append("bias")
        node = helper.make_node("Gemm", names, ["y"])
        inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
        model = _model(spec["name"], [node], [_info("x", x.shape)], [x.shape[0], w.shape[1]], inits)
        return model, {"x": x}, consts
    if op == "conv2d":
        x = rng.standard_normal(spec["x"]).astype(np.float32)
        o, i, kh, kw = spec["w"]
        w = (rng.standard_normal(spec["w"]) * np.sqrt(2 / (i * kh * kw))).astype(np.float32)
        stride, pad, groups = spec.get("stride", 1), spec.get("pad", 0), spec.get("groups", 1)
        node = helper.make_node(
            "Conv",
            ["x", "w"],
            ["y"],
            kernel_shape=[kh, kw],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            group=groups,
        )
        n, _, h, wd = x.shape
        out_shape = [n, o, (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1]
        model = _model(
            spec["name"], [node], [_info("x", x.shape)], out_shape, [numpy_helper.from_array(w, "w")]
        )
        return model, {"x": x}, {"w": w}
    raise ValueError(f"unknown workload op {op!r} in {spec['name']}")


def _info(name: str, shape: tuple[int, ...] | list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    out_shape: list[int],
    initializers: list[onnx.TensorProto],
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, [_info("y", out_shape)], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


# -- numpy and PyTorch implementations ------------------------------------------------------------


def numpy_fn(
    spec: dict[str, Any], feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray]
) -> Callable[[], Any]:
    op = spec["op"]
    if op == "matmul":
        a, b = feeds["a"], feeds["b"]
        return lambda: a @ b
    if op == "gemm":
        x, w, bias = feeds["x"], consts["w"], consts.get("bias")
        return (lambda: x @ w + bias) if bias is not None else (lambda: x @ w)
    x, w = feeds["x"], consts["w"]
    stride, pad, groups = spec.get("stride", 1), spec.get("pad", 0), spec.get("groups", 1)
    return lambda: conv2d_im2col(x, w, stride, pad, groups)


def conv2d_im2col(x: np.ndarray, w: np.ndarray, stride: int, pad: int, groups: int) -> np.ndarray:
    """NCHW conv by im2col + one batched matmul per group (numpy's BLAS does the work)."""
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))[
        :, :, ::stride, ::stride
    ]
    oh, ow = windows.shape[2], windows.shape[3]
    # [n, c, oh, ow, kh, kw] -> [n, groups, cg * kh * kw, oh * ow]
    cols = windows.transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, cg * kh * kw, oh * ow)
    weights = w.reshape(groups, o // groups, cg * kh * kw)
    return np.matmul(weights, cols).reshape(n, o, oh, ow)


def torch_fn(
    spec: dict[str, Any], feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray]
) -> Callable[[], Any]:
    torch = common.torch_module()
    op = spec["op"]
    t = {k: torch.from_numpy(v) for k, v in {**feeds, **consts}.items()}

    def in_inference(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.inference_mode():
                return fn().numpy()

        return run

    if op == "matmul":
        return in_inference(lambda: torch.matmul(t["a"], t["b"]))
    if op == "gemm":
        if "bias" in t:
            return in_inference(lambda: torch.addmm(t["bias"], t["x"], t["w"]))
        return in_inference(lambda: torch.matmul(t["x"], t["w"]))
    stride, pad, groups = spec.get("stride", 1), spec.get("pad", 0), spec.get("groups", 1)
    conv = torch.nn.functional.conv2d
    return in_inference(lambda: conv(t["x"], t["w"], stride=stride, padding=pad, groups=groups))


# -- the run --------------------------------------------------------------------------------------


# numpy is one of the systems: after its call OpenBLAS's idle workers spin on a core for longer than
# common.PAUSE_S, so each sample waits this long first, or the system after numpy shares a core with them
PAUSE_AFTER_NUMPY_S = 0.25


def bench_workload(
    spec: dict[str, Any], settings: common.Settings, *, opt_level: int, with_tvm: bool
) -> common.Row:
    """Every system on one workload, checked against numpy, then timed in alternating rounds
    (common.interleaved): a slow phase of a shared machine falls on every system alike."""
    rng = np.random.default_rng(0)
    model, feeds, consts = workload_model(spec, rng)
    model_bytes = model.SerializeToString()
    row = common.Row(spec["name"], info={"op": spec["op"], "gflop": spec["flops"] / 1e9})
    reference = numpy_fn(spec, feeds, consts)()

    def checked(fn: Callable[[], Any], unwrap: Callable[[Any], np.ndarray]) -> Callable[[], Any]:
        _check(unwrap(fn()), reference)
        return fn

    def temper() -> Callable[[], Any]:
        build = common.temper_build(model_bytes, {}, opt_level)
        row.extra["temper"] = {"compile_s": build.compile_seconds, "kernels": float(build.kernels)}
        return checked(lambda: build.module.run(feeds), lambda out: out["y"])

    def onnxruntime() -> Callable[[], Any]:
        session = common.onnxruntime_session(model_bytes)
        return checked(lambda: session.run(None, feeds), lambda out: out[0])

    def pytorch() -> Callable[[], Any]:
        return checked(torch_fn(spec, feeds, consts), lambda out: out)

    def numpy_peer() -> Callable[[], Any]:
        return numpy_fn(spec, feeds, consts)

    def tvm() -> Callable[[], Any]:
        run = common.tvm_build(model, {name: array.shape for name, array in feeds.items()})
        args = [feeds[i.name] for i in model.graph.input]
        return checked(lambda: run(*args), lambda out: out.numpy())

    makers = {"temper": temper, "onnxruntime": onnxruntime, "pytorch": pytorch, "numpy": numpy_peer}
    if with_tvm:
        makers["tvm"] = tvm
    systems: dict[str, Callable[[], Any]] = {}
    for system, make in makers.items():
        try:
            systems[system] = make()
        except Exception as exc:  # a peer that cannot build or check is data, not a crash of the run
            row.errors[system] = common.error_of(exc)["error"]
    for system, timing in common.interleaved(systems, settings, pause=PAUSE_AFTER_NUMPY_S).items():
        if "error" in timing:
            row.errors[system] = timing["error"]
            continue
        row.latency[system] = timing["latency_s"]
        row.extra[system] = {
            **row.extra.get(system, {}),
            "min_s": timing["min_s"],  # the least disturbed sample: useful on a noisy shared machine
            "calls_per_sample": timing["calls_per_sample"],
            "samples": len(timing["samples"]),
            "gflops": spec["flops"] / timing["latency_s"] / 1e9,
        }
    systems.clear()  # onnxruntime's idle workers spin: release the session before the next workload
    gc.collect()
    return row


def _check(actual: np.ndarray, expected: np.ndarray) -> None:
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        raise AssertionError(f"output shape {actual.shape} != {expected.shape}")
    tolerance = CHECK_RTOL * max(1.0, float(np.max(np.abs(expected))))
    error = float(np.max(np.abs(actual - expected)))
    if not error <= tolerance:
        raise AssertionError(f"wrong output: max abs error {error:.3g} > {tolerance:.3g}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ops", description=__doc__.split("\n\n")[0])
    common.add_common_flags(parser)
    args = parser.parse_args(argv)
    settings = common.Settings.from_args(args.quick)
    workloads = {spec["name"]: spec for spec in load_workloads()}
    with_tvm = common.tvm_available() and not args.no_tvm
    rows = []
    for name in common.select(list(workloads), args.only):
        print(f"… {name}", flush=True)
        rows.append(bench_workload(workloads[name], settings, opt_level=args.opt_level, with_tvm=with_tvm))
    systems = [s for s in SYSTEMS if s != "tvm" or with_tvm]
    notes = [
        f"median latency per call, fp32, batch 1, {common.THREADS} threads for every system; "
        "temper/X is temper's latency divided by X's (below 1: temper is faster)",
        f"temper: untuned (default schedules), opt level {args.opt_level}; TVM (if shown): untuned, default "
        "relax pipeline",
    ]
    if not with_tvm:
        notes.append("Apache TVM: not measured (" + ("--no-tvm" if args.no_tvm else "not importable") + ")")
    common.report(
        "temper operator benchmark",
        rows,
        systems,
        notes=notes,
        markdown=args.markdown,
        json_path=args.json,
        settings=settings,
        info_columns=[("GFLOP", "gflop")],
        extra_columns=[
            ("temper GFLOP/s", "temper", "gflops"),
            ("ort GFLOP/s", "onnxruntime", "gflops"),
            ("temper compile s", "temper", "compile_s"),
        ],
    )


if __name__ == "__main__":
    main()
