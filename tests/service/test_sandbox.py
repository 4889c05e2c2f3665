"""The sandbox runs compiler work in a child with time and memory limits: results and typed errors
come back as they are, and a child that runs out of memory or time, or crashes, costs only its call."""

from __future__ import annotations

import pytest

from compiler.errors import UnsupportedOpError
from service.sandbox import SandboxCrash, SandboxError, run_limited
from tests.service import crashing

GIB = 1 << 30


def test_results_and_typed_errors_come_back() -> None:
    assert run_limited(crashing.allocate, 1 << 20, seconds=60, memory_bytes=4 * GIB, what="it") == 1 << 20
    with pytest.raises(UnsupportedOpError, match="Det") as info:
        run_limited(crashing.refuse, "why", seconds=60, memory_bytes=4 * GIB, what="it")
    assert info.value.nodes == [("n", "Det", 17)]


def test_memory_is_limited() -> None:
    with pytest.raises(SandboxError, match="ran out of memory"):
        run_limited(crashing.allocate, 3 * GIB, seconds=60, memory_bytes=1 * GIB, what="the analysis")


def test_time_is_limited() -> None:
    with pytest.raises(SandboxError, match="longer than its limit of 1 s"):
        run_limited(crashing.sleep, 30, seconds=1, memory_bytes=4 * GIB, what="the analysis")


def test_a_crash_is_reported_not_raised_through() -> None:
    with pytest.raises(SandboxCrash, match="died"):
        run_limited(crashing.abort, seconds=60, memory_bytes=4 * GIB, what="the compiler")
    assert run_limited(crashing.sleep, 0, seconds=60, memory_bytes=4 * GIB, what="it") == "woke"
