"""Python's cyclic garbage collector, paused while the compiler builds its IRs.

A compile makes millions of small objects (graph, TIR and LLVM IR nodes, llvmlite's instructions)
that live until it ends and are then freed by reference counting: they hold next to no reference
cycles. The collector's passes walk all of them again each time the young generations fill, and
the full passes grow with the heap, so on a large model they take a large share of the compile
while finding next to nothing to free (a paused collector leaves the peak memory as it was).

Compiles in several threads, or one inside another, share one pause: the collector runs again
when the last of them ends, and only if it was running when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pause:
    """How many compiles hold the pause, and whether the collector ran before the first one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.was_enabled = False


_PAUSE = _Pause()


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (reference counting still frees everything
    acyclic at once); on exit, normal or by an exception, restore it as the first holder found it."""
    with _PAUSE.lock:
        if _PAUSE.holders == 0:
            _PAUSE.was_enabled = gc.isenabled()
            gc.disable()
        _PAUSE.holders += 1
    try:
        yield
    finally:
        with _PAUSE.lock:
            _PAUSE.holders -= 1
            if _PAUSE.holders == 0 and _PAUSE.was_enabled:
                gc.enable()
