"""bench/zoo.py's own correctness (no timing asserted): one export per network, and one model's row
with every system measured and temper checked against onnxruntime."""

from __future__ import annotations

from pathlib import Path

from bench import common, zoo
from tests.zoo.catalog import SHIPPED, TORCHSCRIPT, ZOO

TINY = common.Settings(warmup=1, repeat=3, min_time=0.0, max_time=1.0)


def test_one_export_per_network_preferring_torchscript_17() -> None:
    names = zoo.canonical(ZOO)
    networks = [ZOO[n].network for n in names]
    assert len(networks) == len(set(networks)) == len({e.network for e in ZOO.values()})
    assert "resnet50.ts17" in names and "bert.ts17-dyn" in names
    for name in names:
        entry = ZOO[name]
        has_preferred = any(
            e.network == entry.network and e.exporter in (TORCHSCRIPT, SHIPPED) and e.opset in (17, None)
            for e in ZOO.values()
        )
        assert not has_preferred or zoo._preferred(entry)


def test_a_row_times_every_system_and_checks_temper(tmp_path: Path) -> None:
    zoo.ensure_generated(["squeezenet1_1.ts13-dyn"])
    row = zoo.bench_entry("squeezenet1_1.ts13-dyn", TINY, opt_level=3, tuned=None, directory=tmp_path)
    assert row["errors"] == {}
    assert set(row["latency_s"]) == {"temper", "onnxruntime", "pytorch"}
    assert row["worst_error"] < 1e-4 and row["kernels"] > 0


def test_a_row_summary_names_every_latency_ratio_and_failure() -> None:
    from bench.zoo import _row_summary

    row = {
        "name": "net",
        "latency_s": {"temper": 0.002, "temper_tuned": 0.001, "onnxruntime": 0.004},
        "errors": {"pytorch": "RuntimeError: no"},
        "tune": {"tasks": 3, "tune_s": 12.4},
    }
    assert _row_summary(row) == (
        "net: temper 2.00 ms, temper_tuned 1.00 ms, onnxruntime 4.00 ms, temper/onnxruntime 0.50, "
        "temper_tuned/onnxruntime 0.25, tuned 3 tasks in 12 s, pytorch failed: RuntimeError: no"
    )
    failed = {"name": "bad", "latency_s": {}, "errors": {"temper": "X"}}
    assert _row_summary(failed) == "bad: temper failed: X"
