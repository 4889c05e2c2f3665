"""Compile one zoo model with temper and compare every output with onnxruntime.

    python -m tests.zoo.check [--all | NAME...] [--json OUT]

prints the zoo's table (model, source, exporter, opset, status, worst relative error, onnxruntime's own
noise, compile time, naive kernels: serial scalar loop nests of real work); the tests call
`check` for one model. Missing generated files are made first, in one child process.

The error measure is per output: max |temper - onnxruntime| / max |onnxruntime|, the worst over the
outputs. fp32 results agree when it is at most `TOLERANCE`, or twice onnxruntime's own disagreement
with itself (its optimized graph against its unoptimized one) where that is larger: both are valid fp32
evaluations of the model, and some models amplify rounding (onnxruntime's Sigmoid, for one, is a fast
approximation whose relative error reaches ~1e-3 for outputs below ~1e-3). A reference output without
real spread fails the check: random weights must not hide a wrong kernel behind an output that is ~0
everywhere.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from tests.zoo.catalog import SHIPPED, SHIPPED_MODELS, ZOO, ZooModel
from tests.zoo.generate import CACHE

NAIVE_FLOPS = 1 << 20
"""A kernel with this much arithmetic must use the machine: threads or vectors (the issue's "no naive
single-threaded scalar loop nest")."""

TOLERANCE = 1e-4
"""Worst relative error (of the output's largest magnitude) an fp32 output may have."""

REPO = Path(__file__).resolve().parents[2]


class ExportFailed(RuntimeError):
    """The torch exporter could not make this entry's file (not temper's doing)."""


@dataclass(frozen=True)
class Result:
    name: str
    source: str
    exporter: str
    opset: int | None
    status: str
    """ok, mismatch, error (temper refused or failed), export (the exporter failed), flat."""
    worst_error: float | None
    compile_seconds: float | None
    message: str = ""
    reference_noise: float | None = None
    """onnxruntime's optimized against its unoptimized graph, in the same measure."""
    naive_kernels: tuple[str, ...] = ()
    """Kernels of real work (NAIVE_FLOPS or more) whose loop nest is neither parallel nor vectorized."""

    @property
    def allowed(self) -> float:
        return max(TOLERANCE, 2 * (self.reference_noise or 0.0))


def ensure_generated(names: list[str], out: Path = CACHE) -> None:
    """Make the files of every generated entry among `names` that is not cached, in one child process."""
    missing = [
        name
        for name in names
        if ZOO[name].exporter != SHIPPED
        and not (out / f"{name}.onnx").exists()
        and not (out / f"{name}.error").exists()
    ]
    if missing:
        subprocess.run(
            [sys.executable, "-m", "tests.zoo.generate", "--out", str(out), *missing],
            cwd=REPO,
            check=True,
            stdout=subprocess.DEVNULL,
        )


def model_and_feeds(entry: ZooModel, out: Path = CACHE) -> tuple[bytes, dict[str, np.ndarray]]:
    """The entry's ONNX bytes and the inputs to run it on."""
    if entry.exporter == SHIPPED:
        path = SHIPPED_MODELS[entry.network].path()
        data = path.read_bytes()
        model = onnx.load_from_string(data)
        rng = np.random.default_rng(0)
        feeds = {}
        initializers = {t.name for t in model.graph.initializer}
        for value in model.graph.input:
            if value.name in initializers:
                continue
            declared = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
            shape = entry.shapes.get(value.name) or declared
            if entry.feeds == "document":
                feeds[value.name] = document_image(shape, rng)
            else:
                feeds[value.name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        return data, feeds
    error = out / f"{entry.name}.error"
    if error.exists():
        raise ExportFailed(error.read_text().strip().splitlines()[-1])
    with np.load(out / f"{entry.name}.npz") as inputs:
        feeds = {name: inputs[name] for name in inputs.files}
    return (out / f"{entry.name}.onnx").read_bytes(), feeds


def document_image(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A page as the OCR models see it: white with dark strokes in lines, normalized to [-1, 1] as the
    package does ((pixel / 255 - 0.5) / 0.5); on plain noise the detector finds no text at all."""
    batch, _channels, height, width = shape
    page = np.ones(shape, dtype=np.float32)
    for image in range(batch):
        for top in range(height // 8, height - 12, max(height // 3, 16)):
            left = int(rng.integers(0, max(width // 8, 1)))
            while left < width - 8:
                stroke = int(rng.integers(2, 6))
                page[image, :, top : top + int(rng.integers(8, 14)), left : left + stroke] = 0.0
                left += stroke + int(rng.integers(2, 10))
    page += rng.normal(0.0, 0.02, shape).astype(np.float32)
    return ((page - 0.5) / 0.5).astype(np.float32)


def onnxruntime_outputs(
    data: bytes, feeds: dict[str, np.ndarray], *, optimize: bool = True
) -> dict[str, np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != onnxruntime's {expected.shape}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"dtype {actual.dtype} != onnxruntime's {expected.dtype}")
    if expected.size == 0:
        return 0.0
    if expected.dtype.kind in "biu":
        return float(np.mean(actual != expected))
    scale = float(np.max(np.abs(expected.astype(np.float64))))
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) / max(scale, 1e-30)


def has_spread(expected: np.ndarray) -> bool:
    """Not (nearly) constant: a comparison against a constant output proves little."""
    if expected.size < 2 or expected.dtype.kind not in "fc":
        return True
    values = expected.astype(np.float64)
    return float(np.std(values)) > 1e-6 * max(float(np.max(np.abs(values))), 1e-30)


def check(entry: ZooModel, out: Path = CACHE) -> Result:
    """Compile `entry` (binding only the dims its file leaves dynamic) and compare with onnxruntime."""
    import compiler.runtime
    from compiler.errors import CompilerError
    from compiler.pipeline import CompileOptions, compile_model

    noise: float | None = None

    naive: tuple[str, ...] = ()

    def result(status: str, worst: float | None, seconds: float | None, message: str = "") -> Result:
        return Result(
            entry.name,
            entry.source,
            entry.exporter,
            entry.opset,
            status,
            worst,
            seconds,
            message,
            noise,
            naive,
        )

    try:
        data, feeds = model_and_feeds(entry, out)
    except ExportFailed as exc:
        return result("export", None, None, str(exc))
    expected = onnxruntime_outputs(data, feeds)
    unoptimized = onnxruntime_outputs(data, feeds, optimize=False)
    noise = max(relative_error(unoptimized[name], values) for name, values in expected.items())
    flat = [name for name, values in expected.items() if not has_spread(values)]
    if flat:
        return result("flat", None, None, f"onnxruntime's outputs {flat} have no spread")
    shapes = {name: tuple(values.shape) for name, values in feeds.items()} if entry.dynamic else {}
    started = time.perf_counter()
    try:
        compiled = compile_model(data, CompileOptions(opt_level=3, shapes=shapes))
    except CompilerError as exc:
        return result("error", None, None, f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - started
    naive = naive_kernels(compiled.kernels)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{entry.name}.temper"
        compiled.save(path)
        actual = compiler.runtime.load(path).run(feeds)
    worst = 0.0
    for name, reference in expected.items():
        try:
            worst = max(worst, relative_error(np.asarray(actual[name]), reference))
        except AssertionError as exc:
            return result("mismatch", None, seconds, f"output {name!r}: {exc}")
    outcome = result("ok", worst, seconds)
    return outcome if worst <= outcome.allowed else result("mismatch", worst, seconds)


def naive_kernels(kernels: list[Any]) -> tuple[str, ...]:
    """Names of the kernels with NAIVE_FLOPS or more whose scheduled loops are all serial or unrolled."""
    from compiler.tir.ir import For, ForKind, walk_stmts

    fast = {ForKind.PARALLEL, ForKind.VECTORIZED}
    return tuple(
        k.name
        for k in kernels
        if k.workload.flops >= NAIVE_FLOPS
        and not any(isinstance(s, For) and s.kind in fast for s in walk_stmts(k.scheduled.body))
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    names = sorted(ZOO) if args.all or not args.names else args.names
    ensure_generated(names)
    results = []
    for name in names:
        try:
            outcome = check(ZOO[name])
        except Exception as exc:  # one model's crash is a row of the table, never the end of the run
            entry = ZOO[name]
            outcome = Result(name, entry.source, entry.exporter, entry.opset, "crash", None, None, repr(exc))
        results.append(outcome)
        worst = f"{outcome.worst_error:.2e}" if outcome.worst_error is not None else "-"
        noise = f"{outcome.reference_noise:.2e}" if outcome.reference_noise is not None else "-"
        seconds = f"{outcome.compile_seconds:.1f}s" if outcome.compile_seconds is not None else "-"
        print(
            f"| {name} | {outcome.source} | {outcome.exporter} | {outcome.opset or '-'} | {outcome.status} "
            f"| {worst} | {noise} | {seconds} | {len(outcome.naive_kernels)} | {outcome.message[:160]} |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
