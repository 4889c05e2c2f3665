"""bench/zoo.py's own correctness (no timing asserted): one export per network, and one model's row
with every system measured and temper checked against onnxruntime."""

from __future__ import annotations

import io
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


def test_a_resumed_tuning_run_measures_only_what_its_budget_still_allows(tmp_path: Path) -> None:
    """bench.zoo --tune-dir: the database stays, and a rerun counts its records against the budget."""
    from bench.tune import temper_tune
    from compiler.target import host_target
    from storage.records import SqlDatabase
    from tests.tuner.test_tune import twin_conv_model

    model = twin_conv_model().SerializeToString()

    def recorded() -> int:
        db = SqlDatabase(f"sqlite:///{tmp_path / 'records.sqlite'}")
        try:
            return sum(1 for _ in db.iter_records(host_target().key))
        finally:
            db.close()

    log = io.StringIO()
    first = temper_tune(
        model,
        {},
        2,
        opt_level=3,
        patience=None,
        directory=tmp_path,
        resume=True,
        report=log,
        report_every_s=0,
    )
    assert first["trials"] == first["budget"] == 2 * first["tasks"] == recorded()
    lines = log.getvalue().splitlines()  # a progress line per round (every 0 s), the last one the end
    head = f"  tuning ({first['tasks']} tasks): trials "
    assert len(lines) >= 2 and all(line.startswith(head) for line in lines)
    assert lines[0].startswith(head) and "ETA" in lines[0]  # the first round: the time to go
    assert lines[-1].startswith(f"{head}{first['trials']}/{first['budget']}   estimated latency ")
    assert lines[-1].endswith("   done")
    again = temper_tune(model, {}, 2, opt_level=3, patience=None, directory=tmp_path, resume=True)
    assert again["trials"] == first["trials"] and recorded() == first["trials"]  # nothing measured again
    more = temper_tune(model, {}, 3, opt_level=3, patience=None, directory=tmp_path, resume=True)
    assert recorded() == more["trials"] == 3 * first["tasks"]  # one more per task, no more
    assert (tmp_path / "tuned.temper").is_file()


def test_onnxruntime_nodes_are_matched_to_the_models_nodes_they_came_from() -> None:
    """--profile sets each temper kernel beside onnxruntime's nodes for the same model nodes: its QDQ
    fusions carry the op's name and a counter, its NCHWc rewrites the output's name."""
    seconds = {"/layer1/conv1/Conv_token_12": 2e-3, "/layer1/conv1/Conv_token_13": 1e-3, "relu_token": 5e-4}
    by_source = zoo._by_source_node(seconds)
    assert by_source == {"/layer1/conv1/Conv": 3e-3, "relu_token": 5e-4}
    outputs_of = {"conv": ["y"], "add": ["z"]}
    assert zoo._ort_sources(["conv", "add"], outputs_of) == ["conv", "add", "y_nchwc", "z_nchwc"]
