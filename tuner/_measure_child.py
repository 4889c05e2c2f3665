"""The body of the short-lived process that loads one candidate library and times its kernel.

It runs in a process of its own so that a segfault, an abort or an endless loop in generated code
costs only this process. It imports the standard library alone (no numpy, no compiler) so that it
starts in milliseconds; the parent sends raw bytes and does every numerical comparison itself.

Protocol over a duplex pipe: the child makes one call, sends ("output", bytes) with what the
kernel wrote; the parent answers True to have it timed (then the child sends ("timing", secs)) or
False to stop. Any failure the child can observe is sent as ("error", message).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import shutil
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

from compiler.runtime.module import openmp_wait_defaults

ALIGN = 64
_MAX_NUMBER = 10_000_000  # calls per repeat, whatever the calibration says


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed server or worker leaves
    no builder or measuring processes behind (elsewhere: nothing to do)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL


class _KernelFailed(Exception):
    pass


def _aligned(data: bytes | None, nbytes: int, keep: list[Any]) -> int:
    """Address of ALIGN-aligned memory holding `data` (or 0xFF bytes: NaN for floats)."""
    raw = ctypes.create_string_buffer(nbytes + ALIGN)
    keep.append(raw)
    addr = ctypes.addressof(raw)
    addr += -addr % ALIGN
    if data is None:
        ctypes.memset(addr, 0xFF, nbytes)
    else:
        ctypes.memmove(addr, data, nbytes)
    return addr


def _load(library: bytes, symbol: str) -> Any:
    """dlopen the library from a private temp dir (removed at once) and find the kernel."""
    directory = tempfile.mkdtemp(prefix="temper-measure-")
    try:
        path = os.path.join(directory, "candidate.so")
        with open(path, "wb") as out:
            out.write(library)
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    fn = getattr(lib, symbol)
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    return fn


def _calls(fn: Any, arg_sets: list[Any], number: int) -> float:
    """Seconds taken by `number` back-to-back calls, each on the next of `arg_sets` in turn (a
    non-zero return code stops the run)."""
    sets = len(arg_sets)
    start = time.perf_counter()
    for k in range(number):
        code = fn(arg_sets[k % sets])
        if code:
            raise _KernelFailed(f"kernel returned {code}")
    return time.perf_counter() - start


def copies_for(set_bytes: int, rotate_bytes: int) -> int:
    """How many copies of a kernel's buffers to rotate through so that together they span
    `rotate_bytes` (at least one; 0 disables the rotation)."""
    if rotate_bytes <= 0 or set_bytes <= 0:
        return 1
    return max(1, min(64, math.ceil(rotate_bytes / set_bytes)))


def measure_child(
    conn: Connection,
    library: bytes,
    symbol: str,
    inputs: list[bytes],
    out_nbytes: int,
    warmup: int,
    repeats: int,
    min_repeat_secs: float,
    rotate_bytes: int = 0,
) -> None:
    """Load, call once and report the output; if asked, warm up and time `repeats` repeats, each
    the mean per call over enough calls to last `min_repeat_secs`.

    Timed calls rotate through copies of the buffers spanning `rotate_bytes`, so that a kernel is
    timed with its weights and activations out of the private caches, as in a model, where the
    kernels before it have evicted them: timed hot, a kernel whose working set fits in L2 looks up
    to twice as fast as it runs in the model, and the tuner picks for the wrong regime."""
    die_with_parent()
    # libgomp reads its wait policy when the library is loaded: the same as in a compiled model, so
    # that a candidate is timed as it will run (threads kept hot from one call to the next)
    openmp_wait_defaults()
    try:
        fn = _load(library, symbol)
        keep: list[Any] = []
        pointers = [_aligned(data, len(data), keep) for data in inputs]
        out = _aligned(None, out_nbytes, keep)
        first = [(ctypes.c_void_p * (len(pointers) + 1))(*pointers, out)]
        _calls(fn, first, 1)
        conn.send(("output", ctypes.string_at(out, out_nbytes)))
        if not conn.recv():
            return
        arg_sets = first
        for _ in range(copies_for(sum(map(len, inputs)) + out_nbytes, rotate_bytes) - 1):
            more = [_aligned(data, len(data), keep) for data in inputs]
            arg_sets.append((ctypes.c_void_p * (len(more) + 1))(*more, _aligned(None, out_nbytes, keep)))
        _calls(fn, arg_sets, warmup * len(arg_sets))
        once = _calls(fn, arg_sets, len(arg_sets)) / len(arg_sets)
        number = max(1, min(_MAX_NUMBER, math.ceil(min_repeat_secs / max(once, 1e-9))))
        secs = tuple(_calls(fn, arg_sets, number) / number for _ in range(repeats))
        conn.send(("timing", secs))
    except Exception as exc:  # everything observable here is the candidate's failure, sent as data
        with contextlib.suppress(OSError):  # the parent may have given up already
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
