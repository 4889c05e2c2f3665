"""The progress record: one shape for the tuner, a job's stored JSON, the API and the CLI."""

from __future__ import annotations

import json

from tuner.progress import Progress, TaskReport

INF = float("inf")


def test_json_round_trip_keeps_everything_and_has_no_infinities() -> None:
    tasks = [
        TaskReport("conv", "k1", 2, 1000, 5, 1e-3, 2e-3, [(1, 2e-3), (4, 1e-3)]),
        TaskReport("relu", "k2", 1, 10, 0, INF, INF),
    ]
    progress = Progress(
        5, 16, 2.0, INF, tasks, [(1, INF, 0.5), (5, 3e-3, 2.0)], trials_base=7, default_latency_s=4e-3
    )
    data = json.loads(json.dumps(progress.to_json(), allow_nan=False))
    assert data["eta_s"] == 2.0 / 5 * 11 and data["estimated_latency_s"] is None
    assert data["tasks"][1]["best_secs"] is None and data["tasks"][0]["best_gflops"] == 1000 / 1e-3 / 1e9
    back = Progress.from_json(data)
    assert back == progress
    assert back.tasks[1].best_secs == INF and back.curve[0] == (1, INF, 0.5)
    assert data["curve"][1] == [5, 3e-3, 2.0] and data["tasks"][0]["curve"] == [[1, 2e-3], [4, 1e-3]]
    assert data["default_latency_s"] == 4e-3


def test_progress_stored_by_an_older_server_still_reads() -> None:
    """Curve points without their elapsed time, tasks without a curve, no default latency."""
    old = {"trials_done": 2, "trials_total": 4, "curve": [[1, 0.5], [2, None]], "tasks": [{"name": "k"}]}
    back = Progress.from_json(old)
    assert back.curve == [(1, 0.5, None), (2, INF, None)]
    assert back.tasks[0].curve == [] and back.default_latency_s == INF
    assert back.to_json()["curve"] == [[1, 0.5, None], [2, None, None]]


def test_a_finished_run_has_no_eta_and_keeps_its_stop_reason() -> None:
    done = Progress(4, 4, 9.0, 1e-3, [], finished=True, stop_reason="budget: 4 trial(s) measured")
    data = done.to_json()
    assert data["eta_s"] is None and data["stop_reason"] == "budget: 4 trial(s) measured"
    assert Progress.from_json(data).stop_reason == done.stop_reason
    assert Progress(0, 4, 0.0, INF, []).eta_s is None  # nothing measured yet: no pace to go by
    assert Progress.from_json({}).trials_done == 0  # a job that has not reported yet


def test_the_headline_gives_trials_latency_time_and_what_is_left_in_each_phase() -> None:
    """One line for every view (the CLI's table, a bench's log): the time to go while searching,
    the phase while the finalists are timed in the model, done at the end."""
    searching = Progress(5, 20, 10.0, 2.5e-3, [])
    assert searching.headline() == "trials 5/20   estimated latency 2.500 ms   elapsed 10 s   ETA 30 s"
    assert Progress(0, 20, 0.0, INF, []).headline().endswith("estimated latency -   elapsed 0 s   ETA -")
    confirming = Progress(20, 20, 40.0, 2e-3, [], phase="confirm")
    assert confirming.headline().endswith("elapsed 40 s   timing the finalists inside the model")
    done = Progress(20, 20, 41.0, 2e-3, [], phase="confirm", finished=True)
    assert done.headline() == "trials 20/20   estimated latency 2.000 ms   elapsed 41 s   done"
