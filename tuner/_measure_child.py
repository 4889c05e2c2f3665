"""The body of the short-lived process that loads one candidate library and times its kernel.

It runs in a process of its own so that a segfault, an abort or an endless loop in generated code
costs only this process. It imports the standard library alone (no numpy, no compiler) so that it
starts in milliseconds; the parent sends raw bytes and does every numerical comparison itself.

The parent starts it as a script of a fresh interpreter (`python -I -S <this file> FD`, see
`command`), not through multiprocessing: a multiprocessing child imports the parent's main module
again before it runs anything (a `python -m` module, or the script that started the parent), and a
main module that imports onnxruntime or the compiler made every measurement wait for that import.

Protocol over a duplex connection (a socket, FD in the child): the parent first sends the
arguments of `measure_child` after the connection, as one tuple; the child makes one call, sends
("output", bytes) with what the kernel wrote; the parent answers True to have it timed (then the
child sends ("timing", secs)) or False to stop. Any failure the child can observe is sent as
("error", message).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import mmap
import os
import select
import shutil
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

ALIGN = 64
_MAX_NUMBER = 10_000_000  # calls per repeat, whatever the calibration says


def die_with_parent(root: int | None = None) -> None:
    """End this process when its parent dies, and when `root` (the process that asked for this one)
    dies, so a killed server or worker leaves no builder, measuring or sandbox process behind.

    The parent is watched by Linux (SIGKILL on its death). A child of the forkserver has the
    forkserver as its parent, and the forkserver outlives a killed server for as long as any of its
    children lives (each holds the pipe whose end it waits for): so such a child also watches `root`
    itself, from a thread that exits the process when `root` is gone. Elsewhere: nothing to do."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    if root is None or root == os.getppid():
        return
    try:
        pidfd = os.pidfd_open(root)
    except ProcessLookupError:
        os._exit(1)  # it is gone already
    except (OSError, AttributeError):
        return
    threading.Thread(target=_exit_when_gone, args=(pidfd,), name="temper-die-with", daemon=True).start()


def _exit_when_gone(pidfd: int) -> None:
    select.select([pidfd], [], [])  # a pidfd becomes readable when its process has exited
    os._exit(1)


class _KernelFailed(Exception):
    pass


class _Arena:
    """All of a measurement's buffers, carved from one anonymous mapping of ordinary pages.

    Not huge pages, on purpose: a kernel may be handed the caller's arrays (Module.run is
    zero-copy), whose pages temper does not choose. Timed on huge pages, the tuner preferred a
    matmul that reads its unpacked right-hand matrix column panel by column panel (one page per
    row of the panel): 2.1 ms there, 3.9-4.6 ms on a caller's 4 KiB pages, against 2.5-2.9 ms for
    the default, which packs the panels."""

    def __init__(self, nbytes: int) -> None:
        self._map = mmap.mmap(-1, nbytes + ALIGN)
        self._view = ctypes.c_char.from_buffer(self._map)
        base = ctypes.addressof(self._view)
        self._next = base + (-base % ALIGN)
        self._end = base + nbytes + ALIGN

    @staticmethod
    def size(nbytes: int) -> int:
        return nbytes + -nbytes % ALIGN

    def take(self, data: bytes | None, nbytes: int) -> int:
        """Address of ALIGN-aligned memory holding `data` (or 0xFF bytes: NaN for floats)."""
        addr = self._next
        self._next += self.size(nbytes)
        if self._next > self._end:
            raise MemoryError("measurement arena exhausted")
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


Refresh = list[tuple[int, int, int]]  # (destination, source, bytes) copies made before a call


def _addr(pointer: int | None) -> int:
    """A c_void_p array element as an address (the arena never hands out NULL)."""
    assert pointer is not None
    return pointer


def _calls(fn: Any, arg_sets: list[Any], number: int, refresh: list[Refresh] | None = None) -> float:
    """Seconds taken by `number` calls, each on the next of `arg_sets` in turn (a non-zero return
    code stops the run). With `refresh` (one list per set), each call's activation inputs are first
    rewritten, untimed, as the kernel before it in a model has just written them."""
    sets = len(arg_sets)
    if refresh is None:
        start = time.perf_counter()
        for k in range(number):
            code = fn(arg_sets[k % sets])
            if code:
                raise _KernelFailed(f"kernel returned {code}")
        return time.perf_counter() - start
    total = 0.0
    for k in range(number):
        for dst, src, nbytes in refresh[k % sets]:
            ctypes.memmove(dst, src, nbytes)
        start = time.perf_counter()
        code = fn(arg_sets[k % sets])
        total += time.perf_counter() - start
        if code:
            raise _KernelFailed(f"kernel returned {code}")
    return total


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
    fresh: tuple[int, ...] = (),
    root: int | None = None,
) -> None:
    """Load, call once and report the output; if asked, warm up and time `repeats` repeats, each
    the mean per call over enough calls to last `min_repeat_secs`.

    Timed calls rotate through copies of the buffers spanning `rotate_bytes`, so that a kernel is
    timed with its weights and output out of the private caches, as in a model, where the kernels
    before it have evicted them: timed hot, a kernel whose working set fits in L2 looks up to twice
    as fast as it runs in the model, and the tuner picks for the wrong regime. The inputs listed in
    `fresh` (activations: in the model, the kernel before this one has just written them) are
    rewritten right before each timed call, so that they are in cache as they are there; each call
    is then timed on its own."""
    die_with_parent(root)
    try:
        fn = _load(library, symbol)
        copies = copies_for(sum(map(len, inputs)) + out_nbytes, rotate_bytes)
        per_set = sum(_Arena.size(len(data)) for data in inputs) + _Arena.size(out_nbytes)
        arena = _Arena(copies * per_set + sum(_Arena.size(len(inputs[i])) for i in fresh))
        arg_sets = [
            (ctypes.c_void_p * (len(inputs) + 1))(
                *[arena.take(data, len(data)) for data in inputs], arena.take(None, out_nbytes)
            )
            for _ in range(copies)
        ]
        out = _addr(arg_sets[0][len(inputs)])
        _calls(fn, arg_sets[:1], 1)
        conn.send(("output", ctypes.string_at(out, out_nbytes)))
        if not conn.recv():
            return
        refresh = None
        if fresh:
            sources = {i: arena.take(inputs[i], len(inputs[i])) for i in fresh}
            refresh = [[(_addr(args[i]), sources[i], len(inputs[i])) for i in fresh] for args in arg_sets]
        _calls(fn, arg_sets, warmup * len(arg_sets), refresh)
        once = _calls(fn, arg_sets, len(arg_sets), refresh) / len(arg_sets)
        number = max(1, min(_MAX_NUMBER, math.ceil(min_repeat_secs / max(once, 1e-9))))
        secs = tuple(_calls(fn, arg_sets, number, refresh) / number for _ in range(repeats))
        conn.send(("timing", secs))
    except Exception as exc:  # everything observable here is the candidate's failure, sent as data
        with contextlib.suppress(OSError):  # the parent may have given up already
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def command(fd: int) -> list[str]:
    """The command line of a measuring process talking over the inherited descriptor `fd`: this file
    as a script of an isolated interpreter (-I: no environment variables of Python's, no user or
    script directory on sys.path; -S: no site-packages), which finds nothing but the standard library."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(fd)]


def main(argv: list[str]) -> None:
    """Entry point of a measuring process started with `command`."""
    conn = Connection(int(argv[1]))
    try:
        args = conn.recv()
    except (EOFError, OSError):  # the parent gave up before sending anything
        conn.close()
        return
    measure_child(conn, *args)


if __name__ == "__main__":
    main(sys.argv)
