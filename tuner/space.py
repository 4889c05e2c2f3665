"""The search space of a task: its schedule rule run with sampled decisions.

A candidate is the trace the rule produces for one assignment of its decisions (tile sizes, loop
orders, parallel depth, unrolling, packing). Sampling draws every decision at random; mutation
keeps a parent's decisions and redraws some. An assignment the rule rejects (a ScheduleError) is
an invalid candidate, dropped before anything is built.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from compiler.errors import ScheduleError
from compiler.kernels import Workload, default_schedule
from compiler.tir.trace import Trace


class RandomDecider:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        return self.rng.choice(list(options))


class MutateDecider:
    """Keep the parent's value of each decision, except a few redrawn at random."""

    def __init__(self, parent: Mapping[str, Any], rng: random.Random, rate: float = 0.3) -> None:
        self.parent = dict(parent)
        self.rng = rng
        self.rate = rate
        self.forced = rng.choice(sorted(self.parent)) if self.parent else None

    def choose(self, name: str, options: Sequence[Any], default: Any) -> Any:
        opts = list(options)
        keep = name in self.parent and self.parent[name] in opts
        if keep and name != self.forced and self.rng.random() > self.rate:
            return self.parent[name]
        return self.rng.choice(opts)


def default_trace(w: Workload) -> Trace:
    return default_schedule(w)[0].trace


def sample(w: Workload, rng: random.Random, parent: Mapping[str, Any] | None = None) -> Trace | None:
    """One candidate: random decisions (or a mutation of `parent`); None if the rule rejects it."""
    decider = MutateDecider(parent, rng) if parent else RandomDecider(rng)
    try:
        sch, _ = default_schedule(w, decider)
    except ScheduleError:
        return None
    return sch.trace


def space_size(w: Workload, draws: int = 64, seed: int = 0) -> int:
    """How many distinct candidates `draws` random samples reach (a cheap size estimate)."""
    rng = random.Random(seed)
    seen = set()
    for _ in range(draws):
        t = sample(w, rng)
        if t is not None:
            seen.add(t.dumps())
    return len(seen)
