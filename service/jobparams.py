"""A job's parameters as typed values: what a route stores with the job and what a worker runs.

The routes check a request with its pydantic schema; the database then holds the parameters as JSON,
which a worker reads back here. `from_json` checks them again, because a row is data (written by an
older server, an import, a hand-edited database): a bad value is a JobParamError naming the field,
and the job fails with exactly that message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TRIALS = 64
DEFAULT_BATCH = 8


class JobParamError(ValueError):
    """A stored job parameter that is not what its field takes."""


@dataclass(frozen=True)
class CompileTarget:
    """What every job compiles for: input shapes, target CPU (None: the worker's), opt level."""

    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    target: str | None = None
    opt_level: int = 3

    def to_json(self) -> dict[str, Any]:
        return {
            "shapes": {name: list(dims) for name, dims in self.shapes.items()},
            "target": self.target,
            "opt_level": self.opt_level,
        }

    @staticmethod
    def fields_from(raw: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "shapes": _shapes(raw.get("shapes")),
            "target": _target(raw.get("target")),
            "opt_level": _opt_level(raw.get("opt_level", 3)),
        }


@dataclass(frozen=True)
class CompileParams(CompileTarget):
    """A compile job: use the records or not, and per-node overrides ('record:ID' or a trace)."""

    use_tuned: bool = True
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "use_tuned": self.use_tuned, "overrides": dict(self.overrides)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CompileParams:
        overrides = raw.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise JobParamError("overrides must map node names to 'record:ID' or a trace object")
        use_tuned = raw.get("use_tuned", True)
        if not isinstance(use_tuned, bool):
            raise JobParamError(f"use_tuned must be true or false, not {use_tuned!r}")
        return cls(
            **cls.fields_from(raw),
            use_tuned=use_tuned,
            overrides={str(k): v for k, v in overrides.items()},
        )


@dataclass(frozen=True)
class TuneParams(CompileTarget):
    """A tuning job: the candidates it measures, its wall-clock budget, batch size and seed."""

    trials: int = DEFAULT_TRIALS
    time_budget_s: float | None = None
    batch: int = DEFAULT_BATCH
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "trials": self.trials,
            "time_budget_s": self.time_budget_s,
            "batch": self.batch,
            "seed": self.seed,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TuneParams:
        trials = _positive_int(raw, "trials", DEFAULT_TRIALS)
        budget = raw.get("time_budget_s")
        number = isinstance(budget, int | float) and not isinstance(budget, bool)
        if budget is not None and (not number or budget <= 0):
            raise JobParamError(f"time_budget_s must be a positive number of seconds, not {budget!r}")
        seed = raw.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise JobParamError(f"seed must be a non-negative integer, not {seed!r}")
        return cls(
            **cls.fields_from(raw),
            trials=trials,
            time_budget_s=None if budget is None else float(budget),
            batch=_positive_int(raw, "batch", min(DEFAULT_BATCH, trials)),
            seed=seed,
        )


def _positive_int(raw: Mapping[str, Any], name: str, default: int) -> int:
    value = raw.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobParamError(f"{name} must be a positive integer, not {value!r}")
    return value


def _shapes(raw: Any) -> dict[str, tuple[int, ...]]:
    shapes = raw or {}
    if not isinstance(shapes, Mapping):
        raise JobParamError("shapes must map input names to lists of dimensions")
    bound: dict[str, tuple[int, ...]] = {}
    for name, dims in shapes.items():
        if not isinstance(dims, list | tuple) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims
        ):
            raise JobParamError(f"shape of input {name!r} must be a list of positive integers, not {dims!r}")
        bound[str(name)] = tuple(dims)
    return bound


def _target(raw: Any) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise JobParamError(f"target must be a CPU name or target key, not {raw!r}")
    return raw


def _opt_level(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise JobParamError(f"opt_level must be an integer, not {raw!r}")
    if not 0 <= raw <= 3:
        raise JobParamError(f"opt level must be 0..3, got {raw}")
    return raw
