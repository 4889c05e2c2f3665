"""Kernels whose parallel loops show any iteration that runs twice or never, and a child-process driver.

Every kernel adds its input to its output once per iteration of a parallel loop, on outputs that start
at zero, so an iteration run twice or skipped leaves a wrong value behind, exactly (the inputs are
small integers in float32). `build_library` compiles them with temper's codegen; the checks and the
driver below need numpy and ctypes only, so that this file also runs as a script in a fresh process:

    python parallel_kernels.py check LIB [ROUNDS]   check ROUNDS times, print the pool's threads as JSON
    python parallel_kernels.py fork LIB             check, fork, check in the child and in the parent
    python parallel_kernels.py exit LIB             exit while a daemon thread keeps running kernels
    python parallel_kernels.py sleep LIB            check, then wait until the idle workers sleep
    python parallel_kernels.py model ARTIFACT IN OUT   run an artifact on IN (.npz), save its outputs in OUT
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

EXTENTS = (1, 2, 3, 5, 7, 13, 64, 97, 1000, 4099, 65537)
"""One, two, odd numbers, primes, a power of two and large extents: shares and chunks of every shape."""
NESTED = 97
"""Extent of the parallel loop nested in a serial loop (whose variable the outlined body captures)."""
ROWS = 3
WORKER_NAME = "temper-worker"


def build_library() -> bytes:
    """A library with kernel `once_<E>` for every E of EXTENTS (B[i] += A[i]), `nested` (a parallel loop
    in a serial one: C[j, i] += A[i] * (j + 1)) and `twice` (two parallel loops: B += A, then C += A)."""
    from compiler.codegen.library import CodeLibrary
    from compiler.target import host_target
    from compiler.tir.ir import BinOp, Buffer, Cast, For, ForKind, IntImm, Load, PrimFunc, Seq, Store, Var

    def add_loop(out: Buffer, inp: Buffer, extent: int, row: Var | None = None) -> For:
        i = Var("i")
        index = (i,) if row is None else (row, i)
        value: object = Load(inp, (i,))
        if row is not None:
            value = BinOp("*", value, Cast("float32", BinOp("+", row, IntImm(1))))
        store = Store(out, index, BinOp("+", Load(out, index), value))  # type: ignore[arg-type]
        return For(i, extent, ForKind.PARALLEL, store)

    library = CodeLibrary(host_target())
    for extent in EXTENTS:
        a, b = Buffer("A", (extent,)), Buffer("B", (extent,))
        library.add_kernel(PrimFunc(f"once_{extent}", (a, b), add_loop(b, a, extent)), f"once_{extent}")
    a, c = Buffer("A", (NESTED,)), Buffer("C", (ROWS, NESTED))
    j = Var("j")
    nested = For(j, ROWS, ForKind.SERIAL, add_loop(c, a, NESTED, j))
    library.add_kernel(PrimFunc("nested", (a, c), nested), "nested")
    a, b, c = Buffer("A", (1000,)), Buffer("B", (1000,)), Buffer("C", (1000,))
    twice = Seq((add_loop(b, a, 1000), add_loop(c, a, 1000)))
    library.add_kernel(PrimFunc("twice", (a, b, c), twice), "twice")
    return library.shared_library()


def _call(lib: ctypes.CDLL, symbol: str, *arrays: np.ndarray) -> None:
    fn = lib[symbol]
    fn.restype = ctypes.c_int32
    code = fn((ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays)))
    if code != 0:
        raise AssertionError(f"{symbol} returned {code}")


def _expect(name: str, got: np.ndarray, want: np.ndarray) -> None:
    if not np.array_equal(got, want):
        wrong = np.flatnonzero(got.ravel() != want.ravel())
        raise AssertionError(f"{name}: {wrong.size} wrong elements, first at {wrong[:5].tolist()}")


def check(lib: ctypes.CDLL) -> None:
    """Run every kernel once on fresh outputs and compare with numpy exactly (AssertionError if not)."""
    for extent in EXTENTS:
        a = np.arange(1, extent + 1, dtype=np.float32)
        b = np.zeros(extent, np.float32)
        _call(lib, f"once_{extent}", a, b)
        _expect(f"once_{extent}", b, a)
    a = np.arange(1, NESTED + 1, dtype=np.float32)
    c = np.zeros((ROWS, NESTED), np.float32)
    _call(lib, "nested", a, c)
    _expect("nested", c, a * np.arange(1, ROWS + 1, dtype=np.float32)[:, None])
    a = np.arange(1, 1001, dtype=np.float32)
    b, c = np.zeros(1000, np.float32), np.zeros(1000, np.float32)
    _call(lib, "twice", a, b, c)
    _expect("twice (first loop)", b, a)
    _expect("twice (second loop)", c, a)


def pool_threads(lib: ctypes.CDLL) -> int:
    fn = lib.temper_parallel_threads
    fn.restype = ctypes.c_int32
    return int(fn())


def workers() -> list[int]:
    """Thread ids of this process's pool workers (every loaded library's)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().strip() == WORKER_NAME:
                found.append(int(task.name))
        except OSError:  # the thread ended meanwhile
            continue
    return found


def thread_state(tid: int) -> tuple[str, int]:
    """(state letter, user + system clock ticks) of one of this process's threads."""
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[11]) + int(fields[12])


def _fork(lib: ctypes.CDLL) -> dict[str, object]:
    check(lib)  # the parent's pool is running
    pid = os.fork()
    if pid == 0:  # the child: no workers until its first parallel loop
        try:
            before = len(workers())
            for _ in range(20):
                check(lib)
            os._exit(0 if before == 0 and len(workers()) == pool_threads(lib) - 1 else 3)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return {"child": "hung"}
    check(lib)  # the parent's pool still works
    return {"child": os.waitstatus_to_exitcode(status)}


def _exit(lib: ctypes.CDLL) -> dict[str, object]:
    def forever() -> None:
        while True:
            check(lib)

    threading.Thread(target=forever, daemon=True).start()
    check(lib)
    time.sleep(0.05)
    return {"exiting": True}


def _sleep(lib: ctypes.CDLL) -> dict[str, object]:
    check(lib)
    mine = workers()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = [thread_state(tid) for tid in mine]
        if all(state == "S" for state, _ in states):
            time.sleep(0.3)
            later = [thread_state(tid) for tid in mine]
            if later == states:  # still asleep, and no CPU time used meanwhile
                return {"workers": len(mine), "asleep": True}
        time.sleep(0.01)
    return {"workers": len(mine), "asleep": False}


def _model(artifact: str, feeds: str, out: str) -> dict[str, object]:
    from compiler.runtime import load

    module = load(artifact)
    with np.load(feeds) as arrays:
        outputs = module.run(dict(arrays))
    np.savez(out, **outputs)
    return {"threads": pool_threads(module._library)}


def main(argv: list[str]) -> None:
    mode, path = argv[0], argv[1]
    if mode == "model":
        print(json.dumps(_model(path, argv[2], argv[3])), flush=True)
        return
    lib = ctypes.CDLL(path)
    if mode == "check":
        for _ in range(int(argv[2]) if len(argv) > 2 else 1):
            check(lib)
        result: dict[str, object] = {"threads": pool_threads(lib), "workers": len(workers())}
    elif mode == "fork":
        result = _fork(lib)
    elif mode == "exit":
        result = _exit(lib)
    elif mode == "sleep":
        result = _sleep(lib)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
