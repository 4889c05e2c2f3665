"""The lines `temper tune` prints about the in-model check (service/progress.py)."""

from __future__ import annotations

import io

from rich.console import Console

from service.progress import confirmation_lines, render
from tuner.progress import Progress, TaskReport


def _report(kept: str, whole: dict[str, float] | None) -> dict[str, object]:
    return {
        "seconds": 12.0,
        "variant_secs": [0.010, 0.011, 0.012],
        "whole_model": whole,
        "kept": kept,
        "changed": ["fused_conv2d_1"],
        "tasks": [],
    }


def test_the_whole_model_verdict_is_printed_with_both_latencies() -> None:
    kept = confirmation_lines(_report("picks", {"picks": 0.0100, "defaults": 0.0120}))
    assert any("10.000 ms against 12.000 ms with the defaults, kept" in line for line in kept)
    reverted = confirmation_lines(_report("defaults", {"picks": 0.0125, "defaults": 0.0120}))
    assert any("no faster: the default schedules are kept" in line for line in reverted)
    nothing = confirmation_lines(_report("picks", None))  # every pick was the default
    assert not any("whole model" in line for line in nothing)
    assert confirmation_lines({"error": "boom"}) == [
        "in-model check failed (records kept as measured alone): boom"
    ]


def test_algorithm_switches_are_printed_each_way_with_whether_they_were_kept() -> None:
    report = {
        **_report("picks", {"picks": 0.0100, "defaults": 0.0120}),
        "direct": ["conv_a"],
        "winograd": ["c7"],
    }
    lines = confirmation_lines(report)
    assert "the picks ran 1 conv(s) direct, not Winograd (faster alone; kept): conv_a" in lines
    assert "the picks ran 1 conv(s) as Winograd, not direct (faster alone; kept): c7" in lines
    lost = confirmation_lines({**report, "kept": "defaults"})
    assert any(line.endswith("(faster alone; not kept: the model was no faster): c7") for line in lost)
    assert not any("conv(s)" in line for line in confirmation_lines(_report("picks", None)))


def test_the_live_view_is_the_runs_headline_over_a_row_per_task() -> None:
    task = TaskReport("fused_conv2d_1", "k1", 2, 2_000_000, 3, 1e-3, 2e-3)
    progress = Progress(3, 12, 6.0, 2e-3, [task])
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(render(progress))
    lines = console.export_text().splitlines()
    assert lines[0] == progress.headline()
    row = next(line for line in lines if "fused_conv2d_1" in line).split()
    assert row == ["fused_conv2d_1", "2", "3", "2.000", "1.000", "2.0", "2.00x"]
