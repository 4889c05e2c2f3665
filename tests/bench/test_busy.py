"""bench/busy.py's own parts (no timing is asserted): neighbours that really run and stop, and the flags."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench import busy, common


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_for(pid: int, states: str) -> str:
    deadline = time.monotonic() + 10
    while (state := _state(pid)) not in states and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


def test_neighbours_run_when_busy_stop_when_quiet_and_die_on_exit() -> None:
    with busy.Neighbours(2) as neighbours:
        pids = neighbours.pids
        assert len(pids) == 2
        assert all(_wait_for(pid, "T") == "T" for pid in pids)  # created stopped
        neighbours.set("busy")
        assert all(_wait_for(pid, "R") == "R" for pid in pids)
        neighbours.set("quiet")
        assert all(_wait_for(pid, "T") == "T" for pid in pids)
        with pytest.raises(ValueError, match="unknown condition"):
            neighbours.set("noisy")
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _state(pid) == "Z"


def test_side_by_side_samples_every_system_in_both_conditions() -> None:
    settings = common.Settings(warmup=1, repeat=3, min_time=0.0, max_time=1.0)
    calls = {"a": 0, "b": 0}

    def counting(name: str):  # type: ignore[no-untyped-def]
        def fn() -> None:
            calls[name] += 1

        return fn

    with busy.Neighbours(1) as neighbours:
        samples = busy.side_by_side({"a": counting("a"), "b": counting("b")}, neighbours, settings)
        assert _wait_for(neighbours.pids[0], "T") == "T"  # left quiet
    assert {name: {c: len(v) for c, v in by.items()} for name, by in samples.items()} == {
        "a": {"quiet": 3, "busy": 3},
        "b": {"quiet": 3, "busy": 3},
    }
    assert calls["a"] == calls["b"] > 0


def test_slowdowns_and_flags() -> None:
    fine = busy.Result(
        "fine", latency={"temper": {"quiet": 1.0, "busy": 1.5}, "onnxruntime": {"quiet": 2, "busy": 4}}
    )
    assert fine.slowdown("temper") == 1.5 and fine.slowdown("onnxruntime") == 2.0
    assert fine.relative() == pytest.approx(0.75)
    assert fine.flags() == []
    worse = busy.Result(
        "worse", latency={"temper": {"quiet": 1.0, "busy": 12.0}, "onnxruntime": {"quiet": 1, "busy": 2}}
    )
    assert worse.flags() == ["temper slows more", "temper cliff"]
    failed = busy.Result(
        "failed", latency={"onnxruntime": {"quiet": 1, "busy": 2}}, errors={"temper": "boom"}
    )
    assert failed.relative() is None and failed.flags() == []
    rows = busy.table([fine, worse, failed])
    assert rows[0] == ["fine", "1000.000", "1500.000", "1.50×", "2000.000", "4000.000", "2.00×", "0.75", "ok"]
    assert rows[1][-1] == "temper slows more, temper cliff"
    assert rows[2][1:4] == ["error", "error", "—"]


def test_rotation_lets_each_go_first_in_turn() -> None:
    assert [busy.rotated(["a", "b", "c"], k) for k in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
