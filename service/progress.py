"""Live tuning progress for the terminal (rich): per-task trials and best GFLOP/s, estimated
end-to-end latency and ETA. The same view renders local runs and, later, remote jobs' progress."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tuner.progress import Progress


def _ms(secs: float) -> str:
    return f"{secs * 1e3:.3f}" if 0 < secs < float("inf") else "-"


def render(progress: Progress) -> Group:
    """The run's headline over a table of its tasks."""
    header = Text(progress.headline())
    table = Table(
        "task",
        "weight",
        "trials",
        "default ms",
        "best ms",
        "GFLOP/s",
        "speedup",
        box=None,
        title_justify="left",
    )
    for t in progress.tasks:
        speed = (
            t.default_secs / t.best_secs
            if 0 < t.best_secs < float("inf") and t.default_secs < float("inf")
            else 0.0
        )
        table.add_row(
            Text(t.name),
            str(t.weight),
            str(t.trials),
            _ms(t.default_secs),
            _ms(t.best_secs),
            f"{t.best_gflops:.1f}" if t.best_gflops else "-",
            f"{speed:.2f}x" if speed else "-",
        )
    return Group(header, table)


def stop_line(progress: Any) -> str | None:
    """Why the search ended, for the line the CLI prints after a run (None while it runs)."""
    reason = getattr(progress, "stop_reason", None)
    return f"search stopped: {reason}" if reason else None


def confirmation_lines(confirmation: Any) -> list[str]:
    """What the in-model check after the search found, for the end of `temper tune`."""
    if not confirmation:
        return []
    if confirmation.get("error"):
        return [f"in-model check failed (records kept as measured alone): {confirmation['error']}"]
    variants = confirmation.get("variant_secs") or []
    lines = [
        f"in-model check ({confirmation.get('seconds', 0):.0f} s): the model ran "
        f"{_ms(variants[0])} ms with every kernel's fastest-alone schedule, {_ms(variants[-1])} ms with "
        "the defaults"
        if len(variants) >= 2
        else f"in-model check ({confirmation.get('seconds', 0):.0f} s): the model ran {_ms(variants[0])} ms "
        "with one schedule per kernel (nothing to choose between; their in-model times are stored)"
        if variants
        else "in-model check done"
    ]
    whole = confirmation.get("whole_model")
    if whole:
        verdict = (
            "kept" if confirmation.get("kept") != "defaults" else "no faster: the default schedules are kept"
        )
        lines.append(
            f"whole model with the in-model picks: {_ms(whole['picks'])} ms against "
            f"{_ms(whole['defaults'])} ms with the defaults, {verdict}"
        )
    kept = "; kept" if confirmation.get("kept") != "defaults" else "; not kept: the model was no faster"
    for key, how in (("direct", "direct, not Winograd"), ("winograd", "as Winograd, not direct")):
        switched = confirmation.get(key) or []
        if switched:
            names = ", ".join(switched)
            lines.append(f"the picks ran {len(switched)} conv(s) {how} (faster alone{kept}): {names}")
    changed = confirmation.get("changed") or []
    if changed:
        lines.append(
            f"{len(changed)} kernel(s) keep the finalist that ran fastest in the model instead: "
            + ", ".join(changed)
        )
    return lines
