"""In-model confirmation: finalists timed inside the compiled model decide what compilations use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import compiler.runtime
from compiler.pipeline import CompiledModel, CompileOptions, compile_model
from compiler.target import host_target
from storage.records import SqlDatabase
from tests.tuner.test_tune import _run, twin_conv_model
from tuner.apply import DatabaseSource
from tuner.confirm import (
    Confirmation,
    ConfirmError,
    ConfirmOptions,
    ConfirmStopped,
    confirm,
    finalists,
    summary,
)
from tuner.records import TuningRecord, trace_hash
from tuner.space import default_trace, space_size
from tuner.task import Task, alternative_tasks, extract_tasks
from tuner.tune import TuneOptions, tune


def test_finalists_are_timed_in_the_model_and_compilations_use_the_fastest_there(tmp_path: Path) -> None:
    model = twin_conv_model()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    final = tune(model.SerializeToString(), CompileOptions(), db, TuneOptions(trials=14, batch=4))
    report = final.confirmation
    assert report is not None and "error" not in report, report
    assert final.phase == "confirm" and final.finished
    assert len(report["variant_secs"]) == 3 and all(s > 0 for s in report["variant_secs"])
    target = host_target().key
    extracted = {t.key: t for t in extract_tasks(model, CompileOptions())}
    default_of = {key: default_trace(t.workload).to_json() for key, t in extracted.items()}
    chosen = {}
    for task in report["tasks"]:
        in_model = {int(k): v for k, v in task["in_model"].items()}
        alone = {int(k): v for k, v in task["alone"].items()}
        # every task with a choice measured has finalists (the search may give a small task, such as
        # a layout transform, a single trial; its space may also be one schedule)
        measured = {r.trace_hash for r in db.records(task["key"], target) if r.ok}
        assert len(in_model) >= min(2, len(measured), space_size(extracted[task["key"]].workload))
        default = db.get_record(task["default"]) if task["default"] is not None else None
        ok_default = next(
            (
                r
                for r in db.records(task["key"], target)
                if r.ok and r.trace_hash == trace_hash(default_of[task["key"]])
            ),
            None,
        )
        assert (default.id if default else None) == (
            ok_default.id if ok_default else None
        )  # a finalist if ok
        assert set(in_model) == set(alone) and all(v > 0 for v in in_model.values())
        assert task["isolated_best"] == min(alone, key=lambda r: (alone[r], r))
        fastest = min(in_model, key=lambda r: (in_model[r], alone[r], r))
        kept_defaults = report["kept"] == "defaults" and task["default"] is not None
        assert task["chosen"] == (task["default"] if kept_defaults else fastest)
        stored = {r.id: r.model_secs for r in db.records(task["key"], target) if r.model_secs is not None}
        # a lone finalist's in-model time is stored too (a Winograd kernel's keeps its twin timed
        # only alone from overruling it)
        want = (
            {task["default"]: in_model[task["default"]]} if kept_defaults and len(in_model) > 1 else in_model
        )
        assert stored == pytest.approx(want)
        best = db.best(task["key"], target)
        assert best is not None and best.id == task["chosen"]
        chosen[task["key"]] = task["chosen"]
    compiled = compile_model(model.SerializeToString(), CompileOptions(), DatabaseSource(db))
    for kernel in compiled.manifest["kernels"]:
        schedule = kernel["schedule"]
        assert schedule["record_id"] == chosen[kernel["workload_key"]]
        assert schedule["measured_s"] > 0 and schedule["model_s"] > 0
    got, want = _run(model, compiled, tmp_path)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("picks_faster", [True, False])
def test_the_picks_are_kept_only_when_the_whole_model_runs_faster_with_them(
    picks_faster: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-model picks are compiled and run whole against the defaults; when they are no faster,
    only the defaults' in-model times are stored and compilations use the default schedules. The
    kernels are timed for real; the whole-model verdict is given here, so both outcomes are seen."""
    import tuner.confirm as confirm_module

    model, db, tasks = _searched(tmp_path, 16)
    timed = confirm_module._timed
    whole: list[list[bytes]] = []

    def verdict(artifacts, copts, executor, stop, profile=True):  # type: ignore[no-untyped-def]
        if profile:  # the kernels of every variant timed for real, the defaults' made to lose in place
            kernels, runs = timed(artifacts, copts, executor, stop, profile)
            kernels[-1] = [{name: 10 * secs for name, secs in round_.items()} for round_ in kernels[-1]]
            return kernels, runs
        whole.append(artifacts)
        return [], [1.0, 2.0] if picks_faster else [2.0, 1.0]

    monkeypatch.setattr(confirm_module, "_timed", verdict)
    result = confirm(model, CompileOptions(), db, tasks, host_target())
    assert result is not None
    compared = [t for t in result.tasks if len(t.in_model) >= 2]
    assert compared and all(t.fastest_in_model != t.default_id for t in compared)
    assert len(whole) == 1 and len(whole[0]) == 2  # the picks' artifact and the defaults'
    assert result.whole_model_secs == ((1.0, 2.0) if picks_faster else (2.0, 1.0))
    assert result.kept_defaults is not picks_faster
    target = host_target().key
    for t in compared:
        best = db.best(t.key, target)
        assert best is not None
        if picks_faster:
            assert best.id == t.fastest_in_model == t.chosen
        else:
            assert best.id == t.default_id == t.chosen
            assert [r.id for r in db.records(t.key, target) if r.model_secs is not None] == [t.default_id]
    assert summary(result)["kept"] == ("picks" if picks_faster else "defaults")


@pytest.mark.parametrize("picks_faster", [True, False])
def test_a_direct_twin_faster_alone_runs_direct_only_when_the_whole_model_runs_faster_with_it(
    picks_faster: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Winograd conv's direct twin measured faster alone goes into the picks, as a compilation from
    the database would run it; the twin's in-model time is stored only when the whole model ran
    faster, and a compilation then runs the conv direct. Otherwise the conv stays Winograd, however
    fast its twin ran alone. The kernels are timed for real; the whole-model verdict is given here."""
    import tuner.confirm as confirm_module
    from compiler.graph.passes.conv_algorithm import MEASURED_FASTER
    from tests.tuner.test_scheduler import twin_winograd_model

    proto = twin_winograd_model()
    model = proto.SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tune(model, CompileOptions(), db, TuneOptions(trials=4, confirm=False))  # every task's default
    target = host_target()
    twin = next(iter(confirm_module.algorithm_twins(model, CompileOptions(), db, target).values()))
    db.commit_record(replace_secs(twin, 1e-9))  # the twin now runs faster alone than any Winograd kernel
    result, calls = _confirmed_with_verdict(model, db, picks_faster, monkeypatch)
    assert result is not None and calls == [1, 2]  # the defaults only in the model, then picks vs defaults
    assert set(result.direct_convs) == {"conv_a", "conv_b"}
    assert summary(result)["direct"] == ["conv_a", "conv_b"]
    assert result.kept_defaults is not picks_faster
    timed_in_model = [r for r in db.records(twin.workload_key, target.key) if r.model_secs is not None]
    assert len(timed_in_model) == (1 if picks_faster else 0)
    compiled = compile_model(model, CompileOptions(), DatabaseSource(db))
    algorithms = compiled.manifest["conv_algorithms"]
    if picks_faster:
        assert algorithms["direct"] == {"conv_a": MEASURED_FASTER, "conv_b": MEASURED_FASTER}
    else:
        assert not algorithms["direct"] and len(algorithms["winograd"]) == 2
    _runs_like_onnxruntime(compiled, model, 12, tmp_path)


@pytest.mark.parametrize("picks_faster", [True, False])
def test_a_winograd_twin_faster_alone_runs_only_when_the_whole_model_runs_faster_with_it(
    picks_faster: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reverse switch: convs on a 5x5 plane, which the cost rule keeps direct, have Winograd
    twins; one measured faster alone goes into the picks, and its in-model time is stored only when
    the whole model ran faster with it (a Winograd kernel alone keeps its weights in cache, which
    in place may stream from DRAM). Only then does a compilation run the convs as Winograd."""
    import tuner.confirm as confirm_module
    from compiler.graph.passes.conv_algorithm import MEASURED_WINOGRAD
    from tests.tuner.test_scheduler import twin_winograd_model

    model = twin_winograd_model(hw=5).SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tune(model, CompileOptions(), db, TuneOptions(trials=4, confirm=False))  # every task's default
    untuned = compile_model(model, CompileOptions(), DatabaseSource(db)).manifest["conv_algorithms"]
    assert not untuned["winograd"] and len(untuned["direct"]) == 2
    target = host_target()
    twin = next(iter(confirm_module.algorithm_twins(model, CompileOptions(), db, target).values()))
    (alternative,) = alternative_tasks(model, CompileOptions())
    assert twin.workload_key == alternative.key and alternative.workload.anchor_op == "conv2d_winograd_nchwc"
    db.commit_record(replace_secs(twin, 1e-9))  # the twin now runs faster alone than the direct kernel
    result, calls = _confirmed_with_verdict(model, db, picks_faster, monkeypatch)
    assert result is not None and calls == [1, 2]
    assert set(result.winograd_convs) == {"conv_a", "conv_b"} and not result.direct_convs
    assert summary(result)["winograd"] == ["conv_a", "conv_b"]
    assert result.kept_defaults is not picks_faster
    timed_in_model = [r for r in db.records(twin.workload_key, target.key) if r.model_secs is not None]
    assert len(timed_in_model) == (1 if picks_faster else 0)
    compiled = compile_model(model, CompileOptions(), DatabaseSource(db))
    algorithms = compiled.manifest["conv_algorithms"]
    if picks_faster:
        assert algorithms["winograd"] == dict.fromkeys(
            ("conv_a", "conv_b"), f"F(2x2, 3x3): {MEASURED_WINOGRAD}"
        )
    else:
        assert not algorithms["winograd"] and len(algorithms["direct"]) == 2
    _runs_like_onnxruntime(compiled, model, 5, tmp_path)


@pytest.mark.parametrize("picks_faster", [True, False])
def test_picks_that_lost_with_an_algorithm_switch_run_again_without_it(
    picks_faster: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schedule picks and a direct twin faster alone lose whole to the defaults: the same schedule
    picks without the switch are run whole against the defaults once more, and kept when they win;
    either way the convs stay Winograd and the twin's time in the model is not stored. The kernels
    are timed for real (the defaults' made to lose in place); the whole-model verdicts are given."""
    import tuner.confirm as confirm_module
    from tests.tuner.test_scheduler import twin_winograd_model

    model = twin_winograd_model().SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tune(model, CompileOptions(), db, TuneOptions(trials=24, batch=4, confirm=False))
    target = host_target()
    twin = next(iter(confirm_module.algorithm_twins(model, CompileOptions(), db, target).values()))
    db.commit_record(replace_secs(twin, 1e-9))  # the twin now runs faster alone than any Winograd kernel
    timed = confirm_module._timed
    calls: list[tuple[int, bool]] = []

    def verdict(artifacts, copts, executor, stop, profile=True):  # type: ignore[no-untyped-def]
        kernels, runs = timed(artifacts, copts, executor, stop, profile)
        calls.append((len(artifacts), profile))
        if len(calls) == 1:  # every variant's kernels: the defaults' made to lose in place
            kernels[-1] = [{name: 10 * secs for name, secs in round_.items()} for round_ in kernels[-1]]
        elif len(calls) == 2:  # the picks with the switch lose whole
            runs = [2.0, 1.0]
        else:  # the picks without it
            runs = [1.0, 2.0] if picks_faster else [2.0, 1.0]
        return kernels, runs

    monkeypatch.setattr(confirm_module, "_timed", verdict)
    tasks = [t for t in extract_tasks(model, CompileOptions()) if t.alternative_of is None]
    result = confirm(model, CompileOptions(), db, tasks, target)
    assert result is not None
    compared = [t for t in result.tasks if len(t.in_model) >= 2]
    assert compared and any(t.fastest_in_model != t.default_id for t in compared)
    assert calls[1:] == [(2, True), (2, False)]  # picks with the switch, then without it
    assert result.whole_model_secs == ((1.0, 2.0) if picks_faster else (2.0, 1.0))
    assert result.kept_defaults is not picks_faster
    assert not result.direct_convs and summary(result)["direct"] == []
    assert [r for r in db.records(twin.workload_key, target.key) if r.model_secs is not None] == []
    for t in compared:
        best = db.best(t.key, target.key)
        assert best is not None and best.id == (t.fastest_in_model if picks_faster else t.default_id)
    compiled = compile_model(model, CompileOptions(), DatabaseSource(db))
    algorithms = compiled.manifest["conv_algorithms"]
    assert not algorithms["direct"] and len(algorithms["winograd"]) == 2
    _runs_like_onnxruntime(compiled, model, 12, tmp_path)


def _confirmed_with_verdict(
    model: bytes, db: SqlDatabase, picks_faster: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[Confirmation | None, list[int]]:
    """confirm() over the model's tasks with the kernels timed for real but the whole-model verdict
    (the picks against the defaults, the second timing) given: (its result, the artifacts per timing)."""
    import tuner.confirm as confirm_module

    timed = confirm_module._timed
    calls: list[int] = []

    def verdict(artifacts, copts, executor, stop, profile=True):  # type: ignore[no-untyped-def]
        kernels, runs = timed(artifacts, copts, executor, stop, profile)
        calls.append(len(artifacts))
        if len(calls) == 2:  # the picks against the defaults, whole
            runs = [1.0, 2.0] if picks_faster else [2.0, 1.0]
        return kernels, runs

    monkeypatch.setattr(confirm_module, "_timed", verdict)
    tasks = [t for t in extract_tasks(model, CompileOptions()) if t.alternative_of is None]
    return confirm(model, CompileOptions(), db, tasks, host_target()), calls


def _runs_like_onnxruntime(compiled: CompiledModel, model: bytes, hw: int, tmp_path: Path) -> None:
    compiled.save(tmp_path / "m.temper")
    x = np.random.default_rng(1).standard_normal((1, 32, hw, hw)).astype(np.float32)
    got = compiler.runtime.load(tmp_path / "m.temper").run({"x": x})["y"]
    want = ort.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def replace_secs(record: TuningRecord, secs: float) -> TuningRecord:
    """A copy of a record, as measured taking `secs` per call."""
    import dataclasses

    return dataclasses.replace(record, id=None, run_secs=(secs,) * 3, model_secs=None)


def _searched(tmp_path: Path, trials: int) -> tuple[bytes, SqlDatabase, list[Task]]:
    """The twin model tuned without the in-model check: (model, database, tasks)."""
    model = twin_conv_model().SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    tune(model, CompileOptions(), db, TuneOptions(trials=trials, batch=4, confirm=False))
    return model, db, extract_tasks(model, CompileOptions())


def test_finalists_are_distinct_and_end_with_the_default(tmp_path: Path) -> None:
    _, db, tasks = _searched(tmp_path, 12)
    target = host_target().key
    for task in tasks:
        finals = finalists(db, task, target, 3)
        ok = [r for r in db.records(task.key, target) if r.ok]
        assert len(finals) == min(3, len(ok))
        assert len({r.trace_hash for r in finals}) == len(finals)
        assert finals[-1].trace_hash == trace_hash(default_trace(task.workload).to_json())
        rest = sorted((r for r in ok if r.id != finals[-1].id), key=lambda r: (r.seconds, r.id))
        assert [r.id for r in finals[:-1]] == [r.id for r in rest[: len(finals) - 1]]
        assert all(r.model_secs is None for r in db.records(task.key, target))  # confirm=False


def test_with_only_defaults_measured_the_model_is_timed_once_for_their_in_model_times(tmp_path: Path) -> None:
    """Nothing to choose between, but the defaults' in-model times are stored: they are what keeps a
    conv's rule-chosen algorithm from giving way to an alternative timed only alone."""
    model = twin_conv_model().SerializeToString()
    db = SqlDatabase(f"sqlite:///{tmp_path / 'db.sqlite'}")
    final = tune(model, CompileOptions(), db, TuneOptions(trials=2))  # two tasks: their defaults
    report = final.confirmation
    assert final.trials_done == 2 and report is not None and "error" not in report, report
    assert len(report["variant_secs"]) == 1 and report["whole_model"] is None and not report["changed"]
    records = list(db.iter_records())
    assert len(records) == 2 and all(r.model_secs is not None and r.model_secs > 0 for r in records)
    assert {t["key"] for t in report["tasks"]} == {r.workload_key for r in records}


def test_a_failed_confirmation_leaves_the_records_as_they_were(tmp_path: Path) -> None:
    model, db, tasks = _searched(tmp_path, 10)
    before = {t.key: db.best(t.key, host_target().key) for t in tasks}
    with pytest.raises(ConfirmError, match="longer than"):
        confirm(model, CompileOptions(), db, tasks, host_target(), ConfirmOptions(timeout_s=1e-3))
    assert {t.key: db.best(t.key, host_target().key) for t in tasks} == before
    assert all(r.model_secs is None for r in db.iter_records())


def test_a_stop_request_ends_the_confirmation_with_nothing_stored(tmp_path: Path) -> None:
    model, db, tasks = _searched(tmp_path, 10)
    calls = []

    def stop_while_timing() -> bool:  # compiles pass (one call per variant), then the timing is stopped
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(ConfirmStopped, match="timing"):
        confirm(model, CompileOptions(), db, tasks, host_target(), should_stop=stop_while_timing)
    assert all(r.model_secs is None for r in db.iter_records())


def test_confirm_options_are_checked() -> None:
    with pytest.raises(ValueError, match="finalists"):
        ConfirmOptions(finalists=0)
    with pytest.raises(ValueError, match="timeout"):
        ConfirmOptions(timeout_s=0)
