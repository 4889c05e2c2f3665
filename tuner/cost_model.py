"""Cost models: rank candidates before measuring them.

`XGBoostModel` learns a ranking of candidates of the same task from measured (features,
throughput) pairs, throughput normalized by the task's best so tasks of different sizes share one
model. It is retrained on everything measured so far (warm-started with the records already in
the database for the target), so the second model of a family starts from what the first taught.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import xgboost as xgb


class CostModel(Protocol):
    def update(
        self, features: Sequence[np.ndarray], throughputs: Sequence[float], groups: Sequence[str]
    ) -> None:
        """Add measured samples (throughput 0 for failures); `groups` names each sample's task."""

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Scores, higher is better (only the order matters)."""


class RandomModel:
    """No learning: random scores (the ε-greedy baseline and the cold start)."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def update(
        self, features: Sequence[np.ndarray], throughputs: Sequence[float], groups: Sequence[str]
    ) -> None:
        return None

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        return self.rng.random(len(features))


class XGBoostModel:
    """Gradient-boosted trees with a pairwise ranking objective, per-task query groups."""

    def __init__(self, min_samples: int = 16, rounds: int = 60, seed: int = 0) -> None:
        self.min_samples = min_samples
        self.rounds = rounds
        self.seed = seed
        self._x: list[np.ndarray] = []
        self._y: list[float] = []
        self._g: list[str] = []
        self._booster: xgb.Booster | None = None
        self._fallback = RandomModel(seed)

    @property
    def trained(self) -> bool:
        return self._booster is not None

    @property
    def samples(self) -> int:
        return len(self._y)

    def update(
        self, features: Sequence[np.ndarray], throughputs: Sequence[float], groups: Sequence[str]
    ) -> None:
        self._x.extend(np.asarray(f, dtype=np.float32) for f in features)
        self._y.extend(float(t) for t in throughputs)
        self._g.extend(groups)
        if len(self._y) >= self.min_samples:
            self._fit()

    def _fit(self) -> None:
        import xgboost as xgb

        order = np.argsort(np.asarray(self._g), kind="stable")
        x = np.stack([self._x[i] for i in order])
        y = np.asarray([self._y[i] for i in order], dtype=np.float64)
        g = [self._g[i] for i in order]
        labels = np.zeros_like(y)
        sizes = []
        start = 0
        while start < len(g):
            end = start
            while end < len(g) and g[end] == g[start]:
                end += 1
            best = y[start:end].max()
            labels[start:end] = y[start:end] / best if best > 0 else 0.0
            sizes.append(end - start)
            start = end
        dtrain = xgb.DMatrix(x, label=labels)
        dtrain.set_group(sizes)
        params = {
            "objective": "rank:pairwise",
            "eta": 0.2,
            "max_depth": 6,
            "min_child_weight": 1,
            "subsample": 1.0,
            "seed": self.seed,
            "nthread": 1,
            "verbosity": 0,
        }
        self._booster = xgb.train(params, dtrain, num_boost_round=self.rounds)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        if self._booster is None or not len(features):
            return self._fallback.predict(features)
        import xgboost as xgb

        return np.asarray(self._booster.predict(xgb.DMatrix(np.stack(list(features)).astype(np.float32))))
