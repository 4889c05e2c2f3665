"""Generic fixtures shared by the whole suite (keep this file small)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, so random test data is the same on every run."""
    return np.random.default_rng(0)
