"""A tuning run's progress: what the tuner reports after every round, as one typed record.

The same record is what a tuning job stores (`to_json`, infinities as null), what the HTTP API
returns and what the CLI renders (`from_json` for a remote job), so its shape has one definition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

INF = float("inf")


def _num(value: float | None) -> float | None:
    """JSON has no infinity: unknown times are null."""
    return None if value is None or not math.isfinite(value) else float(value)


def _secs(value: Any) -> float:
    return INF if value is None else float(value)


@dataclass
class TaskReport:
    name: str
    key: str
    weight: int
    flops: int
    trials: int
    best_secs: float
    default_secs: float
    # (trials of the run, the task's best time) each time the task's best improved
    curve: list[tuple[int, float]] = field(default_factory=list)

    @property
    def best_gflops(self) -> float:
        return self.flops / self.best_secs / 1e9 if 0 < self.best_secs < INF else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "weight": int(self.weight),
            "flops": int(self.flops),
            "trials": int(self.trials),
            "best_secs": _num(self.best_secs),
            "best_gflops": _num(self.best_gflops),
            "default_secs": _num(self.default_secs),
            "curve": [[int(n), _num(secs)] for n, secs in self.curve],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskReport:
        return cls(
            name=str(data.get("name", "?")),
            key=str(data.get("key", "")),
            weight=int(data.get("weight") or 0),
            flops=int(data.get("flops") or 0),
            trials=int(data.get("trials") or 0),
            best_secs=_secs(data.get("best_secs")),
            default_secs=_secs(data.get("default_secs")),
            curve=[(int(n), _secs(secs)) for n, secs in data.get("curve") or []],
        )


@dataclass
class Progress:
    """Snapshot sent to the progress callback after every round (and at the end)."""

    trials_done: int
    trials_total: int
    elapsed_s: float
    estimated_latency_s: float
    tasks: list[TaskReport]
    # (trials, estimated model latency, seconds since the run began) after every round
    curve: list[tuple[int, float, float | None]] = field(default_factory=list)
    finished: bool = False
    phase: str = "search"  # "search", then "confirm" while the finalists are timed in the model
    confirmation: dict[str, Any] | None = None  # tuner.confirm.summary(), or {"error": ...}
    trials_base: int = 0  # records of the model's tasks that were in the database before this run
    # why the search ended (None while it runs): budget, time budget, converged, space exhausted,
    # cancelled, each with its detail
    stop_reason: str | None = None
    # seconds left at the pace so far (None when finished or before the first trial); computed from
    # the other fields unless given
    eta_s: float | None = None
    # the model's latency estimated from every task's default schedule (what an untuned compile runs)
    default_latency_s: float = INF
    # onnxruntime's latency for the same model on the same machine, when the service measured it
    onnxruntime_latency_s: float | None = None

    def __post_init__(self) -> None:
        if self.eta_s is None and self.trials_done > 0 and not self.finished:
            self.eta_s = self.elapsed_s / self.trials_done * max(0, self.trials_total - self.trials_done)
        if self.finished:
            self.eta_s = None

    def headline(self) -> str:
        """The run at a glance, one line: trials done of the budget, the model's estimated latency,
        the time spent and what is left (the time to go at the pace so far, or the phase)."""
        latency = self.estimated_latency_s
        estimate = f"{latency * 1e3:.3f} ms" if 0 < latency < INF else "-"
        if self.finished:
            left = "done"
        elif self.phase == "confirm":
            left = "timing the finalists inside the model"
        else:
            left = f"ETA {'-' if self.eta_s is None else f'{self.eta_s:.0f} s'}"
        return (
            f"trials {self.trials_done}/{self.trials_total}   estimated latency {estimate}   "
            f"elapsed {self.elapsed_s:.0f} s   {left}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "trials_done": int(self.trials_done),
            "trials_total": int(self.trials_total),
            "trials_base": int(self.trials_base),
            "elapsed_s": float(self.elapsed_s),
            "eta_s": _num(self.eta_s),
            "estimated_latency_s": _num(self.estimated_latency_s),
            "tasks": [t.to_json() for t in self.tasks],
            "curve": [[int(n), _num(latency), _num(at)] for n, latency, at in self.curve],
            "default_latency_s": _num(self.default_latency_s),
            "onnxruntime_latency_s": _num(self.onnxruntime_latency_s),
            "finished": bool(self.finished),
            "phase": str(self.phase),
            "confirmation": self.confirmation,
            "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        confirmation = data.get("confirmation")
        return cls(
            trials_done=int(data.get("trials_done") or 0),
            trials_total=int(data.get("trials_total") or 0),
            elapsed_s=float(data.get("elapsed_s") or 0.0),
            estimated_latency_s=_secs(data.get("estimated_latency_s")),
            tasks=[TaskReport.from_json(t) for t in data.get("tasks") or []],
            curve=[_point(p) for p in data.get("curve") or []],
            finished=bool(data.get("finished")),
            phase=str(data.get("phase") or "search"),
            confirmation=dict(confirmation) if isinstance(confirmation, Mapping) else None,
            trials_base=int(data.get("trials_base") or 0),
            stop_reason=None if data.get("stop_reason") is None else str(data["stop_reason"]),
            eta_s=None if data.get("eta_s") is None else float(data["eta_s"]),
            default_latency_s=_secs(data.get("default_latency_s")),
            onnxruntime_latency_s=_optional(data.get("onnxruntime_latency_s")),
        )


def _optional(value: Any) -> float | None:
    return None if value is None else _num(float(value))


def _point(item: Any) -> tuple[int, float, float | None]:
    """A curve point as stored: [trials, latency, elapsed]; runs before elapsed was kept stored two."""
    at = item[2] if len(item) > 2 else None
    return int(item[0]), _secs(item[1]), None if at is None else float(at)
