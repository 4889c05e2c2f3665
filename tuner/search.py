"""Model-guided evolutionary search over one task's schedule decisions.

Each round breeds a population from the best measured candidates (mutating their decisions) plus
fresh random samples, drops everything already measured, ranks the rest with the cost model and
proposes the best ones, with a fraction ε chosen at random instead (exploration).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from compiler.errors import ScheduleError
from compiler.kernels import default_schedule
from compiler.tir.trace import Schedule, Trace
from tuner.cost_model import CostModel
from tuner.features import extract
from tuner.records import trace_hash
from tuner.space import MutateDecider, RandomDecider
from tuner.task import Task


@dataclass
class Candidate:
    trace: Trace
    features: np.ndarray
    hash: str


@dataclass
class TaskState:
    """What the search knows about one task: measured traces, the best so far, its parents."""

    task: Task
    measured: set[str] = field(default_factory=set)
    best_secs: float = float("inf")
    default_secs: float = float("inf")
    best_record_id: int | None = None
    trials: int = 0
    rounds_without_gain: int = 0
    elite: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (secs, decisions)
    secs_by_hash: dict[str, float] = field(default_factory=dict)

    def add(self, secs: float, trace: Trace, record_id: int | None = None) -> bool:
        """Account for one measurement; True when it is a new best."""
        h = trace_hash(trace.to_json())
        self.measured.add(h)
        self.secs_by_hash[h] = secs
        self.trials += 1
        if secs < float("inf"):
            self.elite.append((secs, dict(trace.decisions)))
            self.elite.sort(key=lambda e: e[0])
            del self.elite[16:]
        if secs < self.best_secs:
            self.best_secs = secs
            self.best_record_id = record_id
            return True
        return False


def candidate(task: Task, sch: Schedule) -> Candidate:
    trace = sch.trace
    feats = extract(sch.func, task.flops, task.workload.info.anchor_block)
    return Candidate(trace, feats, trace_hash(trace.to_json()))


def _draw(task: Task, rng: random.Random, parent: dict[str, Any] | None) -> Schedule | None:
    decider = MutateDecider(parent, rng) if parent else RandomDecider(rng)
    try:
        return default_schedule(task.workload, decider)[0]
    except ScheduleError:
        return None


def propose(
    state: TaskState, model: CostModel, n: int, rng: random.Random, epsilon: float = 0.2, population: int = 96
) -> list[Candidate]:
    """Up to n unmeasured candidates for this task, best predicted first."""
    pool: dict[str, Candidate] = {}
    parents = [d for _, d in state.elite[:8]]
    attempts = 0
    while len(pool) < population and attempts < population * 3:
        attempts += 1
        parent = rng.choice(parents) if parents and rng.random() < 0.7 else None
        sch = _draw(state.task, rng, parent)
        if sch is None:
            continue
        c = candidate(state.task, sch)
        if c.hash in state.measured or c.hash in pool:
            continue
        pool[c.hash] = c
    cands = list(pool.values())
    if not cands:
        return []
    scores = model.predict([c.features for c in cands])
    order = list(np.argsort(-scores))
    n_greedy = max(1, round(n * (1 - epsilon)))
    chosen = [cands[i] for i in order[:n_greedy]]
    rest = [cands[i] for i in order[n_greedy:]]
    rng.shuffle(rest)
    chosen += rest[: max(0, n - len(chosen))]
    return chosen[:n]
