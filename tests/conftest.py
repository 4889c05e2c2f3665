"""Generic fixtures shared by the whole suite (keep this file small)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, so random test data is the same on every run."""
    return np.random.default_rng(0)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--zoo", action="store_true", help="check the whole model zoo, not only its CI subset")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--zoo"):
        return
    skip = pytest.mark.skip(reason="outside the zoo's CI subset: run with --zoo")
    for item in items:
        if item.get_closest_marker("zoo") is not None:
            item.add_marker(skip)
