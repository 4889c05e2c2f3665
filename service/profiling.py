"""Where an artifact's time goes, measured on the server: each kernel's median time per call
(`Module.profile`), beside onnxruntime's per-node profile of the same model when onnxruntime is
installed. Both run in a sandboxed child (service.sandbox): the artifact's code and the model are a
client's, and a profile costs its request, never the API.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from compiler.errors import CompilerError

MAX_RUNS = 100


class ProfileError(CompilerError):
    """The artifact cannot run here (another CPU's features, a damaged file): nothing to measure."""


def profile_artifact(artifact: bytes, key: bytes | None, model: bytes | None, runs: int) -> dict[str, Any]:
    """{"runs", "kernels": [{step, kernel, median, share, nodes}], "total_s", "onnxruntime"}: every
    kernel call's median seconds over `runs` runs on seeded random inputs, with the ONNX nodes it
    runs; "onnxruntime" is its per-node profile of `model` on the same inputs, or None."""
    from compiler.runtime import ArtifactError, load

    try:
        module = load(artifact, key=key)
    except ArtifactError as exc:
        raise ProfileError(f"the artifact cannot run on this server: {exc}") from None
    feeds = module.sample_inputs()
    nodes = {k["symbol"]: list(k.get("nodes", [])) for k in module.manifest.get("kernels", [])}
    entries = module.profile(feeds, repeat=runs)
    return {
        "runs": runs,
        "kernels": [{**e, "nodes": nodes.get(e["kernel"], [])} for e in entries],
        "total_s": sum(e["median"] for e in entries),
        "onnxruntime": None if model is None else onnxruntime_profile(model, feeds, runs),
    }


def onnxruntime_profile(model: bytes, feeds: Mapping[str, np.ndarray], runs: int) -> dict[str, Any] | None:
    """{"ops": [{node, op, seconds}], "total_s"}: each node's median kernel time per run from
    onnxruntime's own profiler (SessionOptions.enable_profiling), or None without onnxruntime."""
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]  # ships no type information
    except ImportError:
        return None
    from compiler.frontend.onnx import parse_model

    parse_model(model)  # the frontend's guard first: no external data, sizes within the limits
    with tempfile.TemporaryDirectory(prefix="temper-ort-") as tmp:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        options.log_severity_level = 3
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        inputs = {name: array for name, array in feeds.items() if name in wanted}
        for _ in range(runs + 1):  # the first run warms up, and is left out below
            session.run(None, inputs)
        events = json.loads(Path(session.end_profiling()).read_text())
    return _per_node(events, runs)


def onnxruntime_latency(model: bytes, shapes: Mapping[str, Sequence[int]], runs: int = 20) -> float | None:
    """onnxruntime's median latency for `model` with these input shapes on seeded random inputs (the
    reference line of a tuning curve); None without onnxruntime or with an unbound dimension, and a
    ProfileError naming why when onnxruntime cannot run the model."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from compiler.frontend.onnx import parse_model

    parse_model(model)  # the frontend's guard first: no external data, sizes within the limits
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds: dict[str, np.ndarray] = {}
        for spec in session.get_inputs():
            shape = tuple(shapes.get(spec.name, spec.shape))
            if not all(isinstance(d, int) and d > 0 for d in shape):
                return None  # a dynamic dimension nobody bound: nothing comparable to time
            dtype = _ORT_DTYPES.get(spec.type)
            if dtype is None:
                return None
            kind = np.dtype(dtype).kind
            values = rng.standard_normal(shape) if kind == "f" else rng.integers(0, 2, shape)
            feeds[spec.name] = values.astype(dtype)
        session.run(None, feeds)  # warm-up
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - start)
    except Exception as exc:  # onnxruntime's own errors have no common type
        raise ProfileError(f"onnxruntime cannot run the model: {type(exc).__name__}: {exc}") from None
    return statistics.median(times)


_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def _per_node(events: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    times: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name.removesuffix("_kernel_time")
        times.setdefault(node, []).append(float(event.get("dur", 0)) / 1e6)
        ops[node] = str(event.get("args", {}).get("op_name", ""))
    rows = [
        {"node": node, "op": ops[node], "seconds": statistics.median(samples[-runs:])}
        for node, samples in times.items()
    ]
    return {"ops": rows, "total_s": sum(r["seconds"] for r in rows)}
