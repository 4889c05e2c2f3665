"""A compile function that dies the way an LLVM assertion does (abort), for the worker's tests; it
lives in a module of its own because the worker runs it in a child process (it is pickled by name)."""

from __future__ import annotations

import os
from typing import Any


def abort_compile(model: bytes, options: Any, database_url: str | None) -> bytes:
    os.abort()
