"""Functions that die, hang, allocate or refuse, for the worker's and the sandbox's tests; they live
in a module of their own because they run in child processes (they are pickled by name)."""

from __future__ import annotations

import os
from typing import Any


def abort_compile(model: bytes, options: Any, database_url: str | None) -> bytes:
    os.abort()


def allocate(nbytes: int) -> int:
    """Fill `nbytes` of memory (for the sandbox's memory limit)."""
    return len(bytearray(nbytes))


def sleep(seconds: float) -> str:
    import time

    time.sleep(seconds)
    return "woke"


def refuse(message: str) -> None:
    from compiler.errors import UnsupportedOpError

    raise UnsupportedOpError([("n", "Det", 17)], message)


def abort() -> None:
    os.abort()
