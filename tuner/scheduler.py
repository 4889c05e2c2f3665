"""Task scheduler: which task gets the next batch of trials.

Every task is measured once (its default schedule) first. After that the next batch goes to the
task with the largest expected end-to-end gain: its share of the model's estimated latency
(weight x best time) times how much its last rounds improved (gradient style); tasks that stopped
improving for `patience` rounds are considered converged and skipped while others remain.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.search import TaskState


class TaskScheduler:
    def __init__(self, states: Sequence[TaskState], patience: int = 3) -> None:
        self.states = list(states)
        self.patience = patience
        self.gain: dict[str, float] = {s.task.key: 1.0 for s in self.states}

    def estimated_latency(self) -> float:
        """Model latency if every kernel ran at its task's best time (inf until all measured); a
        conv kernel with a twin of the other algorithm counts at the better of its own and its
        twin's best time, the one that compile keeps."""
        alternative = {s.task.alternative_of: s.best_secs for s in self.states if s.task.alternative_of}
        return sum(
            s.task.weight * min(s.best_secs, alternative.get(s.task.key, float("inf")))
            for s in self.states
            if s.task.alternative_of is None
        )

    def record_round(self, state: TaskState, before: float) -> None:
        after = state.best_secs
        if after == float("inf"):  # every candidate so far failed: no gain, so it converges too
            self.gain[state.task.key] *= 0.5
            state.rounds_without_gain += 1
        elif before == float("inf") or after < before * 0.995:
            improvement = 1.0 if before == float("inf") else (before - after) / before
            self.gain[state.task.key] = max(improvement, 0.01)
            state.rounds_without_gain = 0
        else:
            self.gain[state.task.key] *= 0.5
            state.rounds_without_gain += 1

    def converged(self, state: TaskState) -> bool:
        return state.rounds_without_gain >= self.patience

    def next(self) -> TaskState | None:
        """The task to tune next; None when every task converged."""
        unmeasured = [s for s in self.states if s.trials == 0]
        if unmeasured:
            return unmeasured[0]
        live = [s for s in self.states if not self.converged(s)]
        if not live:
            return None

        # a task with no working candidate yet counts like the slowest measured one, not as a second
        measured = [s.best_secs for s in self.states if s.best_secs < float("inf")]
        unknown = max(measured, default=1.0)

        def priority(s: TaskState) -> float:
            share = s.task.weight * (s.best_secs if s.best_secs < float("inf") else unknown)
            return share * self.gain[s.task.key] / (1.0 + 0.05 * s.trials)

        return max(live, key=priority)
