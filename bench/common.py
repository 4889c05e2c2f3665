"""What both benchmarks share: timing, the peers' sessions, temper compilation, and the report.

Every system is timed the same way, through its ordinary Python call (temper `Module.run`, onnxruntime
`InferenceSession.run`, a torch function under `inference_mode`, a numpy function): warm-up runs, then
`repeat` samples, each the mean over enough back-to-back calls to last `min_time`; the median sample is
the latency. A peer that fails (cannot compile an op, runs out of time) is reported as an error for
that row and never stops the run.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench import THREADS


@dataclass(frozen=True, slots=True)
class Settings:
    """How hard to measure: `--quick` trades precision for a run of a few minutes."""

    warmup: int
    repeat: int
    min_time: float
    """Seconds each sample lasts at least (the call is repeated back to back)."""
    max_time: float
    """Seconds one system may spend on one row; sampling stops early past it (at least 3 samples)."""

    @classmethod
    def from_args(cls, quick: bool) -> Settings:
        if quick:
            return cls(warmup=1, repeat=5, min_time=0.05, max_time=5.0)
        return cls(warmup=3, repeat=15, min_time=0.2, max_time=30.0)


@dataclass(frozen=True, slots=True)
class Timing:
    median: float
    """Seconds per call."""
    samples: tuple[float, ...]
    number: int
    """Calls averaged in each sample."""


def measure(fn: Callable[[], object], settings: Settings) -> Timing:
    """Median per-call latency of `fn` (see the module docstring)."""
    start = time.perf_counter()
    for _ in range(settings.warmup):
        fn()
        if time.perf_counter() - start > settings.max_time:
            break

    def sample(number: int) -> float:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        return (time.perf_counter() - t0) / number

    first = sample(1)
    number = max(1, math.ceil(settings.min_time / max(first, 1e-9)))
    samples = [first] if number == 1 else []
    budget_start = time.perf_counter()
    while len(samples) < settings.repeat:
        samples.append(sample(number))
        if len(samples) >= 3 and time.perf_counter() - budget_start > settings.max_time:
            break
    return Timing(statistics.median(samples), tuple(samples), number)


PAUSE_S = 0.1
"""Idle time before each sample of `interleaved`: the previous system's spinning worker threads go to
sleep first (with a shorter pause, whichever system followed onnxruntime shared a core with them)."""


def error_of(exc: Exception) -> dict[str, str]:
    """A failed system's entry in a result: {"error": its first line}."""
    message = f"{type(exc).__name__}: {exc}".strip()
    return {"error": message.splitlines()[0][:400] if message else type(exc).__name__}


def interleaved(
    fns: Mapping[str, Callable[[], object]], settings: Settings, *, pause: float = PAUSE_S
) -> dict[str, dict[str, Any]]:
    """Median latency of every system, sampled in alternating rounds so that all see the same machine.

    Each system is warmed up and calibrated (calls per sample so that a sample lasts `min_time`); then every
    round takes one sample of each system, in an order rotated every round and after `pause` seconds idle,
    `repeat` rounds or fewer past the time budget (at least 3). A system that raises is reported as
    {"error": ...} and left out.
    """
    results: dict[str, dict[str, Any]] = {}
    numbers: dict[str, int] = {}
    for name, fn in fns.items():
        try:
            for _ in range(max(1, settings.warmup)):
                fn()
            start = time.perf_counter()
            fn()
            numbers[name] = max(1, math.ceil(settings.min_time / max(time.perf_counter() - start, 1e-9)))
        except Exception as exc:  # a failing system never stops the others
            results[name] = error_of(exc)
    samples: dict[str, list[float]] = {name: [] for name in numbers}
    budget_start = time.perf_counter()
    order = list(numbers)
    for round_ in range(settings.repeat):
        for name in order[round_ % len(order) :] + order[: round_ % len(order)]:  # each goes first in turn
            number = numbers[name]
            time.sleep(pause)
            start = time.perf_counter()
            for _ in range(number):
                fns[name]()
            samples[name].append((time.perf_counter() - start) / number)
        if round_ >= 2 and time.perf_counter() - budget_start > settings.max_time * len(numbers):
            break
    for name, values in samples.items():
        results[name] = {
            "latency_s": statistics.median(values),
            "min_s": min(values),
            "samples": values,
            "calls_per_sample": numbers[name],
        }
    return results


# -- peers ----------------------------------------------------------------------------------------


def onnxruntime_session(model: bytes) -> Any:
    """onnxruntime as a user would run it (default graph optimisations), on THREADS threads. Keep the
    session only while measuring it: its idle workers spin and slow down whatever runs next."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def torch_module() -> Any:
    """torch with its intra-op pool at THREADS (imported lazily: it takes a second)."""
    import torch

    torch.set_num_threads(THREADS)
    return torch


def tvm_available() -> bool:
    return importlib.util.find_spec("tvm") is not None


@dataclass(frozen=True, slots=True)
class TemperBuild:
    module: Any  # compiler.runtime.Module
    compile_seconds: float
    kernels: int


def temper_build(model: bytes, shapes: Mapping[str, tuple[int, ...]], opt_level: int) -> TemperBuild:
    """Compile with temper's default (untuned) schedules, save the artifact, load it as a user would."""
    import compiler.runtime
    from compiler.pipeline import CompileOptions, compile_model

    start = time.perf_counter()
    compiled = compile_model(model, CompileOptions(opt_level=opt_level, shapes=dict(shapes)))
    seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="temper-bench-") as tmp:
        path = Path(tmp) / "model.temper"
        compiled.save(path)
        module = compiler.runtime.load(path)
    return TemperBuild(module, seconds, len(compiled.manifest.get("kernels", [])))


def tvm_build(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> Callable[..., Any]:
    """Apache TVM, untuned: relax's ONNX frontend and default CPU pipeline; returns f(*numpy inputs)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(model, shape_dict=dict(shapes), keep_params_in_input=False)
    target = tvm.target.Target(tvm_target_config(host_cpu_name()))
    executable = tvm.compile(mod, target=target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    main = vm["main"]

    def run(*arrays: np.ndarray) -> Any:
        return main(*(tvm.runtime.tensor(a, tvm.cpu()) for a in arrays))

    return run


def tvm_target_config(mcpu: str) -> dict[str, Any]:
    """TVM's LLVM target for CPU `mcpu` at the benchmark's threads. For this machine's own CPU, the
    AVX-512 features its name implies but it lacks (a hypervisor may hide them) are turned off, as
    temper's host target does: TVM's code would otherwise die of SIGILL."""
    config: dict[str, Any] = {"kind": "llvm", "mcpu": mcpu, "num-cores": THREADS}
    if mcpu == host_cpu_name():
        import llvmlite.binding as llvm

        missing = sorted(f for f, has in llvm.get_host_cpu_features().items() if not has)
        config["mattr"] = [f"-{f}" for f in missing if f.startswith("avx512")]
    return config


def host_cpu_name() -> str:
    try:
        import llvmlite.binding as llvm

        return llvm.get_host_cpu_name()
    except Exception:  # llvmlite is a temper dependency, but the benchmark must not die without it
        return "generic"


# -- the report -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    """One workload or model: per system its latency (and extras), or the error it hit."""

    name: str
    info: dict[str, Any] = field(default_factory=dict)
    latency: dict[str, float] = field(default_factory=dict)
    """system -> median seconds per call."""
    extra: dict[str, dict[str, float]] = field(default_factory=dict)
    """system -> other numbers (compile seconds, kernels, GFLOP/s, samples)."""
    errors: dict[str, str] = field(default_factory=dict)

    def record(self, system: str, action: Callable[[], Timing | tuple[Timing, dict[str, float]]]) -> None:
        """Run one system's measurement; any exception becomes this row's error for that system."""
        try:
            result = action()
        except Exception as exc:  # a peer failing is data, not a crash of the benchmark
            message = f"{type(exc).__name__}: {exc}".strip()
            self.errors[system] = message.splitlines()[0][:300] if message else type(exc).__name__
            return
        finally:
            # Drop the system's session/module now: idle thread pools (onnxruntime's spin-waiting workers)
            # would otherwise steal the cores from the next system measured.
            gc.collect()
        timing, extra = result if isinstance(result, tuple) else (result, {})
        self.latency[system] = timing.median
        self.extra[system] = {
            **extra,
            "min_s": min(timing.samples),  # the least disturbed sample: useful on a noisy shared machine
            "calls_per_sample": timing.number,
            "samples": len(timing.samples),
        }

    def ratios(self, base: str = "temper") -> dict[str, float]:
        """base latency / peer latency for every peer: 2.0 means temper takes twice as long."""
        if base not in self.latency:
            return {}
        return {
            f"{base}/{peer}": self.latency[base] / seconds
            for peer, seconds in self.latency.items()
            if peer != base and seconds > 0
        }


def versions() -> dict[str, str]:
    found: dict[str, str] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnx": onnx.__version__,
    }
    for name in ("onnxruntime", "torch", "tvm", "llvmlite"):
        if importlib.util.find_spec(name) is not None:
            try:
                found[name] = str(__import__(name).__version__)
            except Exception as exc:  # a broken optional install must not stop the benchmark
                found[name] = f"unusable ({type(exc).__name__})"
    try:
        from compiler.version import __version__

        found["temper"] = __version__
    except ImportError:
        pass
    return found


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "llvm_cpu": host_cpu_name(), "logical_cores": _cpu_count(), "threads": THREADS}


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results as JSON to OUT")
    parser.add_argument("--quick", action="store_true", help="fewer, shorter samples (a few minutes in all)")
    parser.add_argument("--only", metavar="NAMES", help="comma-separated names of the rows to run")
    parser.add_argument("--no-tvm", action="store_true", help="skip Apache TVM even when it is importable")
    parser.add_argument("--opt-level", type=int, default=3, help="temper's opt level (default 3)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table instead of rich")


def select(names: Sequence[str], only: str | None) -> list[str]:
    if not only:
        return list(names)
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise SystemExit(f"unknown name(s): {', '.join(unknown)}; choose from {', '.join(names)}")
    return wanted


def report(
    title: str,
    rows: Sequence[Row],
    systems: Sequence[str],
    *,
    notes: Sequence[str],
    markdown: bool,
    json_path: Path | None,
    settings: Settings,
    info_columns: Sequence[tuple[str, str]] = (),
    extra_columns: Sequence[tuple[str, str, str]] = (),
) -> None:
    """Print the table (rich or markdown) and notes; write the JSON document when asked.

    info_columns: (header, info key); extra_columns: (header, system, extra key) shown after latencies.
    """
    peers = [s for s in systems if s != "temper"]
    header = [
        "name",
        *(h for h, _ in info_columns),
        *(f"{s} ms" for s in systems),
        *(h for h, _, _ in extra_columns),
        *(f"temper/{p}" for p in peers),
    ]
    table: list[list[str]] = []
    for row in rows:
        cells = [row.name, *(_fmt(row.info.get(key)) for _, key in info_columns)]
        for system in systems:
            if system in row.latency:
                cells.append(f"{row.latency[system] * 1e3:.3f}")
            else:
                cells.append("error" if system in row.errors else "—")
        cells += [_fmt(row.extra.get(system, {}).get(key)) for _, system, key in extra_columns]
        ratios = row.ratios()
        cells += [f"{ratios[f'temper/{p}']:.2f}×" if f"temper/{p}" in ratios else "—" for p in peers]
        table.append(cells)
    if markdown:
        print(f"### {title}\n")
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for cells in table:
            print("| " + " | ".join(cells) + " |")
    else:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        if not console.is_terminal:  # piped to a file: do not squeeze the table into 80 columns
            console = Console(width=240)
        rich_table = Table(title=title)
        for column in header:
            rich_table.add_column(column, justify="left" if column == "name" else "right")
        for cells in table:
            rich_table.add_row(*cells)
        console.print(rich_table)
    print()
    for note in notes:
        print(f"note: {note}")
    for row in rows:
        for system, message in row.errors.items():
            print(f"error: {row.name} / {system}: {message}")
    if json_path is not None:
        document = {
            "title": title,
            "machine": machine(),
            "versions": versions(),
            "settings": asdict(settings),
            "notes": list(notes),
            "rows": [
                {
                    "name": row.name,
                    "info": row.info,
                    "latency_s": row.latency,
                    "extra": row.extra,
                    "ratios": row.ratios(),
                    "errors": row.errors,
                }
                for row in rows
            ],
        }
        json_path.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {json_path}")


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)
