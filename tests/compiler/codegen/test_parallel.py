"""temper's parallel runtime (compiler/codegen/parallel.c), through real compiled parallel loops.

Every iteration of every loop must run exactly once, whatever the extent, the number of threads, the
other Python threads calling kernels, a forked child or busy neighbour processes. No timing is asserted.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from compiler.pipeline import CompileOptions, compile_model
from compiler.runtime import load
from tests.compiler.codegen import parallel_kernels
from tests.compiler.codegen.parallel_kernels import check, pool_threads, workers
from tests.models import builders

DRIVER = Path(parallel_kernels.__file__)
REPO = DRIVER.parents[3]


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parallel") / "kernels.so"
    path.write_bytes(parallel_kernels.build_library())
    return path


def _load(path: Path, tmp_path: Path, name: str) -> ctypes.CDLL:
    """A separate copy of the library (dlopen of another path): a pool of its own."""
    copy = tmp_path / name
    copy.write_bytes(path.read_bytes())
    return ctypes.CDLL(str(copy))


def _driver(*args: str, threads: int | None = None, timeout: float = 120) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("TEMPER_NUM_THREADS", None)
    if threads is not None:
        env["TEMPER_NUM_THREADS"] = str(threads)
    proc = subprocess.run(
        [sys.executable, str(DRIVER), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_iteration_runs_once(library: Path, tmp_path: Path) -> None:
    lib = _load(library, tmp_path, "a.so")
    for _ in range(20):
        check(lib)


def test_the_library_needs_only_libc_and_keeps_its_runtime_to_itself(library: Path) -> None:
    needed = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True)
    libraries = [line.split("[")[1].rstrip("]") for line in needed.stdout.splitlines() if "(NEEDED)" in line]
    assert all(name.startswith(("libc.so", "libm.so", "libpthread.so")) for name in libraries), libraries
    assert "NODELETE" in needed.stdout
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True)
    exported = {line.split()[-1] for line in symbols.stdout.splitlines()}
    assert {"temper_parallel_threads", "temper_parallel_stop"} <= exported
    assert "temper_parallel_for" not in exported


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_thread_count_comes_from_the_environment(library: Path, threads: int) -> None:
    result = _driver("check", str(library), "5", threads=threads)
    assert result == {"threads": threads, "workers": threads - 1}


def test_default_thread_count_is_the_cpu_affinity(library: Path) -> None:
    result = _driver("check", str(library))
    assert result["threads"] == len(os.sched_getaffinity(0))


def test_two_python_threads_share_a_library_or_use_two(library: Path, tmp_path: Path) -> None:
    shared = _load(library, tmp_path, "shared.so")
    other = _load(library, tmp_path, "other.so")
    errors: list[BaseException] = []

    def calls(lib: ctypes.CDLL) -> None:
        try:
            for _ in range(30):
                check(lib)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(lib,)) for lib in (shared, shared, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@pytest.fixture
def busy_neighbours() -> Iterator[int]:
    """One process per core busy-looping for the length of the test."""
    count = len(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield count
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def test_correct_next_to_busy_neighbours(
    library: Path, mlp: Path, tmp_path: Path, busy_neighbours: int, rng: np.random.Generator
) -> None:
    lib = _load(library, tmp_path, "busy.so")
    for _ in range(20):
        check(lib)
    assert _driver("check", str(library), "10", threads=3)["threads"] == 3
    module = load(mlp)
    (spec,) = module.inputs
    feeds = {spec.name: rng.uniform(-1, 1, spec.shape).astype(np.float32)}
    expected = _driver_model(mlp, feeds, tmp_path, threads=1)  # one thread: nothing to share
    for _ in range(50):
        got = module.run(feeds)
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name], value)


def test_a_forked_child_starts_a_pool_of_its_own(library: Path) -> None:
    assert _driver("fork", str(library), threads=3) == {"child": 0}


def test_the_process_exits_while_workers_wait_or_work(library: Path) -> None:
    assert _driver("exit", str(library), timeout=60) == {"exiting": True}


def test_idle_workers_sleep(library: Path) -> None:
    assert _driver("sleep", str(library), threads=3) == {"workers": 2, "asleep": True}


def _gone(tids: set[int]) -> bool:
    """Whether all of `tids` have exited (polled: a stopped worker ends on its own schedule)."""
    deadline = time.monotonic() + 30
    while tids & set(workers()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_stopping_ends_the_workers_and_the_next_loop_starts_new_ones(
    library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPER_NUM_THREADS", "3")  # read when the pool starts
    lib = _load(library, tmp_path, "stop.so")
    before = set(workers())
    check(lib)
    first = set(workers()) - before
    assert len(first) == 2
    lib.temper_parallel_stop()
    assert _gone(first)
    check(lib)
    second = set(workers()) - before
    assert len(second) == 2 and not second & first
    lib.temper_parallel_stop()
    assert _gone(second)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An artifact whose layers run in parallel (each streams a weight matrix too big for one core)."""
    artifact = tmp_path_factory.mktemp("mlp") / "mlp.temper"
    compiled = compile_model(builders.mlp(batch=4).SerializeToString(), CompileOptions())
    assert sum(f"{k['symbol']}.par".encode() in compiled.library for k in compiled.manifest["kernels"]) >= 2
    compiled.save(artifact)
    return artifact


def test_python_threads_run_modules_at_once(mlp: Path, rng: np.random.Generator) -> None:
    """Two threads on one Module (its lock serializes them) and one on another Module of the same
    artifact (a pool of its own) at the same time: every output is the one computed alone."""
    shared, other = load(mlp), load(mlp)
    (spec,) = shared.inputs
    feeds = [{spec.name: rng.uniform(-1, 1, spec.shape).astype(np.float32)} for _ in range(6)]
    expected = [shared.run(f) for f in feeds]
    errors: list[BaseException] = []

    def calls(module: object, offset: int) -> None:
        try:
            for k in range(40):
                index = (k + offset) % len(feeds)
                got = module.run(feeds[index])  # type: ignore[attr-defined]
                for name, value in expected[index].items():
                    np.testing.assert_array_equal(got[name], value)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=args) for args in ((shared, 0), (shared, 1), (other, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_a_collected_module_takes_its_workers_along(mlp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEMPER_NUM_THREADS", "3")
    module = load(mlp)
    before = set(workers())
    module.run({spec.name: np.zeros(spec.shape, np.float32) for spec in module.inputs})
    mine = set(workers()) - before
    assert len(mine) == 2  # the MLP's layers run in parallel
    del module
    gc.collect()
    assert _gone(mine)


def test_workers_start_on_the_first_parallel_loop_only(library: Path, tmp_path: Path) -> None:
    lib = _load(library, tmp_path, "lazy.so")
    before = set(workers())
    assert pool_threads(lib) >= 1  # asking starts nothing
    assert set(workers()) == before
    check(lib)
    assert len(set(workers()) - before) == pool_threads(lib) - 1


def _driver_model(
    artifact: Path, feeds: dict[str, np.ndarray], tmp_path: Path, threads: int
) -> dict[str, np.ndarray]:
    """The artifact's outputs on `feeds`, computed in a fresh process on `threads` threads."""
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / f"out{threads}.npz"
    assert _driver("model", str(artifact), str(tmp_path / "in.npz"), str(out), threads=threads) == {
        "threads": threads
    }
    with np.load(out) as arrays:
        return dict(arrays)


def test_models_give_the_same_bits_on_any_number_of_threads(tmp_path: Path, rng: np.random.Generator) -> None:
    """Chunks change who runs an iteration, never what it computes: outputs are identical bit for bit
    with 1, 2 or 3 threads (and onnxruntime agrees, tests/compiler/test_models.py)."""
    model = builders.mobilenet_v2(image=64)
    compiled = compile_model(model.SerializeToString(), CompileOptions())
    parallel = [k for k in compiled.manifest["kernels"] if f"{k['symbol']}.par".encode() in compiled.library]
    assert len(parallel) >= 5, "the model should have kernels with parallel loops"
    artifact = tmp_path / "model.temper"
    compiled.save(artifact)
    feeds = {spec.name: rng.uniform(-1, 1, spec.shape).astype(np.float32) for spec in load(artifact).inputs}
    runs = {threads: _driver_model(artifact, feeds, tmp_path, threads) for threads in (1, 2, 3)}
    for threads in (2, 3):
        assert runs[threads].keys() == runs[1].keys()
        for name, value in runs[1].items():
            np.testing.assert_array_equal(runs[threads][name], value, err_msg=f"{name}, {threads} threads")
