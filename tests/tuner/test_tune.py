"""End to end tuning: records are produced, resumable, applied at compile time, numerics hold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.runtime
from compiler.kernels import ScheduleChoice
from compiler.pipeline import CompileOptions, compile_model
from compiler.target import host_target
from storage.records import SqlDatabase
from tuner.apply import DatabaseSource, parse_override
from tuner.tune import TuneOptions, tune

REPO = Path(__file__).resolve().parents[2]


def twin_conv_model() -> onnx.ModelProto:
    """Two identical conv+relu blocks (one workload, weight 2) and a matmul head."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2, n)
        for n in ("w1", "w2")
    ]
    inits.append(
        numpy_helper.from_array(rng.standard_normal((16 * 8 * 8, 10)).astype(np.float32) * 0.1, "fc")
    )
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv_b"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu_b"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "twin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, compiled, tmp_path: Path) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.temper"
    compiled.save(path)
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    got = compiler.runtime.load(path).run({"x": x})["y"]
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    return got, want


def test_tuning_records_are_applied_and_outputs_still_match(tmp_path: Path) -> None:
    model = twin_conv_model()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    final = tune(model.SerializeToString(), CompileOptions(), db, TuneOptions(trials=12, batch=4))
    assert final.trials_done == 12
    # the twin convs (one workload, weight 2) run blocked: a layout transform at each end of the chain
    assert [t.weight for t in final.tasks] == [1, 2, 1, 1]
    kinds = ["layout_transform", "conv2d_nchwc", "layout_transform", "matmul"]
    assert all(kind in t.name for kind, t in zip(kinds, final.tasks, strict=True)), final.tasks
    target = host_target().key
    for task in final.tasks:
        records = db.records(task.key, target)
        assert records, task.name
        hashes = [r.trace_hash for r in records]
        assert len(hashes) == len(set(hashes))  # nothing measured twice
        assert task.best_secs <= task.default_secs  # the default is always measured
    compiled = compile_model(model.SerializeToString(), CompileOptions(), DatabaseSource(db))
    provenance = [k["schedule"] for k in compiled.manifest["kernels"]]
    assert all(p["source"] == "record" and p["record_id"] and p["measured_s"] > 0 for p in provenance)
    got, want = _run(model, compiled, tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # records of another target are never used
    other = compile_model(
        model.SerializeToString(), CompileOptions(target="skylake-avx512"), DatabaseSource(db)
    )
    assert all(k["schedule"]["source"] == "default" for k in other.manifest["kernels"])


def test_override_pins_one_node_and_leaves_the_twin_alone(tmp_path: Path) -> None:
    model = twin_conv_model()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tune(model.SerializeToString(), CompileOptions(), db, TuneOptions(trials=6, batch=4))
    kernels = compile_model(model.SerializeToString(), CompileOptions()).manifest["kernels"]
    conv_key = next(k["workload_key"] for k in kernels if "conv_b" in k["nodes"])
    records = [r for r in db.records(conv_key, host_target().key) if r.ok]
    best = db.best(conv_key, host_target().key)
    assert best is not None
    # a record the database would not pick (it picks by in-model time where tuning confirmed one,
    # which need not follow the records' own medians)
    pinned = next((r for r in records if r.id != best.id), best)
    node, choice = parse_override(f"conv_b=record:{pinned.id}", db)
    assert isinstance(choice, ScheduleChoice)
    options = CompileOptions(overrides={node: choice})
    compiled = compile_model(model.SerializeToString(), options, DatabaseSource(db))
    by_node = {tuple(k["nodes"]): k["schedule"] for k in compiled.manifest["kernels"]}
    conv_b = next(s for nodes, s in by_node.items() if "conv_b" in nodes)
    conv_a = next(s for nodes, s in by_node.items() if "conv_a" in nodes)
    assert conv_b["source"] == "override" and conv_b["record_id"] == pinned.id
    assert conv_a["source"] == "record"
    assert conv_a["record_id"] != pinned.id or len(records) == 1
    got, want = _run(model, compiled, tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bad_overrides_are_clear_errors(tmp_path: Path) -> None:
    from compiler.errors import CompilerError

    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with pytest.raises(CompilerError, match="must look like"):
        parse_override("conv_b", db)
    with pytest.raises(CompilerError, match="no tuning record 999"):
        parse_override("conv_b=record:999", db)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(CompilerError, match="not JSON"):
        parse_override(f"conv_b={bad}", db)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(CompilerError, match="holds no schedule trace"):
        parse_override(f"conv_b={listed}", db)
    with pytest.raises(CompilerError, match="record id must be an integer"):
        parse_override("conv_b=record:abc", db)
    from tuner.apply import override_choice

    with pytest.raises(CompilerError, match="must be 'record:ID' or a trace object"):
        override_choice("conv_b", "/etc/passwd", db)
    with pytest.raises(CompilerError, match="not a schedule trace"):
        override_choice("conv_b", {"version": 99}, db)
    with pytest.raises(CompilerError, match="needs a database"):
        override_choice("conv_b", "record:1", None)


def test_killed_tuning_run_resumes_without_losing_or_remeasuring(tmp_path: Path) -> None:
    model_path = tmp_path / "twin.onnx"
    onnx.save(twin_conv_model(), model_path)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    cmd = [
        sys.executable,
        "-m",
        "service.cli",
        "tune",
        str(model_path),
        "--trials",
        "40",
        "--batch",
        "2",
        "--db",
        url,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    db = SqlDatabase(url)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(1 for _ in db.iter_records()) < 6:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {r.id: r.trace_hash for r in db.iter_records()}
    assert len(before) >= 6
    done = subprocess.run(
        [*cmd[:5], "--trials", "40", "--batch", "4", "--db", url],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    after = {r.id: (r.workload_key, r.trace_hash) for r in db.iter_records()}
    assert set(before) <= set(after)  # nothing committed was lost
    assert len(set(after.values())) == len(after)  # no trace measured twice
    # the resumed run measured new candidates only, at most its own budget (fewer when every task
    # converged); what the killed run recorded is kept and not counted
    assert len(before) < len(after) <= len(before) + 40
    assert "search stopped: " in done.stdout


def _relu_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_trials_count_this_runs_measurements_and_the_stop_reason_says_why(tmp_path: Path) -> None:
    model = twin_conv_model().SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    first = tune(model, CompileOptions(), db, TuneOptions(trials=5, batch=2, confirm=False))
    assert (first.trials_done, first.trials_total, first.trials_base) == (5, 5, 0)
    assert first.stop_reason == "budget: 5 trial(s) measured"
    again = tune(model, CompileOptions(), db, TuneOptions(trials=4, batch=2, confirm=False))
    assert (again.trials_done, again.trials_base) == (4, 5)  # 4 more, the 5 recorded kept
    assert sum(1 for _ in db.iter_records()) == 9
    # a run taken over counts from where its job began: the 9 records since 0 are spent, 2 remain
    resumed = tune(model, CompileOptions(), db, TuneOptions(trials=11, batch=2, since=0, confirm=False))
    assert (resumed.trials_done, resumed.trials_total, resumed.trials_base) == (11, 11, 0)
    assert sum(1 for _ in db.iter_records()) == 11
    stopped = tune(
        model, CompileOptions(), db, TuneOptions(trials=4, confirm=False), should_stop=lambda: True
    )
    assert stopped.stop_reason == "cancelled" and stopped.trials_done == 0


def test_a_small_space_ends_the_search_early_and_says_so(tmp_path: Path) -> None:
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    final = tune(
        _relu_model(), CompileOptions(), db, TuneOptions(trials=500, batch=4, patience=2, confirm=False)
    )
    assert final.trials_done < 500
    assert final.stop_reason is not None
    assert final.stop_reason.startswith(("converged: every task went 2 rounds", "space exhausted"))


def test_second_model_warm_starts_from_the_first_models_records(tmp_path: Path) -> None:
    """Records of other workloads train the cost model too: their descriptions rebuild the kernels."""
    from tests.models.builders import small_conv_model
    from tuner.cost_model import XGBoostModel
    from tuner.task import extract_tasks
    from tuner.tune import warm_start

    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tune(twin_conv_model().SerializeToString(), CompileOptions(), db, TuneOptions(trials=10, batch=4))
    other = extract_tasks(small_conv_model().SerializeToString(), CompileOptions())
    assert not {t.key for t in other} & {r.workload_key for r in db.iter_records()}
    model = XGBoostModel(min_samples=4)
    assert warm_start(model, db, other, host_target()) == 10
    assert model.trained


def winograd_model(c: int = 32, hw: int = 12) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    shape = [1, c, hw, hw]
    graph = helper.make_graph(
        nodes,
        "winograd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_winograd_conv_and_its_direct_twin_are_both_tuned_and_the_faster_is_kept(tmp_path: Path) -> None:
    model = winograd_model().SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    final = tune(model, CompileOptions(), db, TuneOptions(trials=16, batch=4, confirm=False))
    names = [t.name for t in final.tasks]
    wino = next(t for t in final.tasks if "winograd" in t.name)
    direct = next(t for t in final.tasks if "conv2d_nchwc" in t.name)
    assert len(names) == 4, names  # two layout transforms, the Winograd conv, its direct twin
    target = host_target().key
    assert db.records(wino.key, target) and db.records(direct.key, target)
    # the estimate counts the conv once, at the better of the two
    others = sum(t.weight * t.best_secs for t in final.tasks if t.key not in (wino.key, direct.key))
    assert final.estimated_latency_s == pytest.approx(others + min(wino.best_secs, direct.best_secs))
    compiled = compile_model(model, CompileOptions(), DatabaseSource(db))
    algorithms = compiled.manifest["conv_algorithms"]
    if direct.best_secs < wino.best_secs:
        assert algorithms["direct"] == {
            "conv": "tuning measured its direct kernel faster than its Winograd kernel"
        }
        assert any(k["workload_key"] == direct.key for k in compiled.manifest["kernels"])
    else:
        assert list(algorithms["winograd"]) == ["conv"]
        assert any(k["workload_key"] == wino.key for k in compiled.manifest["kernels"])
    x = np.random.default_rng(1).standard_normal((1, 32, 12, 12)).astype(np.float32)
    path = tmp_path / "m.temper"
    compiled.save(path)
    got = compiler.runtime.load(path).run({"x": x})["y"]
    want = ort.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_tuning_for_a_cpu_this_machine_cannot_run_is_refused_up_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tuner.tune
    from compiler.errors import CompilerError

    # this machine's CPU as one without AVX-512 (the check reads /proc/cpuinfo)
    monkeypatch.setattr(tuner.tune, "missing_features", lambda target: ["avx512f", "avx512bw"])
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    model = winograd_model().SerializeToString()
    with pytest.raises(CompilerError, match="lacks the CPU features avx512f, avx512bw"):
        tune(model, CompileOptions(target="skylake-avx512"), db, TuneOptions(trials=2))
