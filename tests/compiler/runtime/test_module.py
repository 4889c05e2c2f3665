"""Loading and running an artifact with real compiled kernels, and every input/kernel error path."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import compiler.runtime.module as module_py
from compiler.runtime import ArtifactError, InputError, KernelError, TensorSpec, load, write_artifact
from tests.compiler.runtime import tiny

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(params=[True, False], ids=["step-runner", "python-loop"])
def parts(request: pytest.FixtureRequest) -> dict:
    """Every test runs on a library with temper's step runner (one foreign call per run) and on one
    without it (a library of an earlier version: the loader calls the kernels one by one)."""
    return tiny.parts(tiny.library(steps=request.param))


@pytest.fixture
def artifact(tmp_path: Path, parts: dict) -> Path:
    path = tmp_path / "tiny.temper"
    write_artifact(path, **parts)
    return path


def test_run_matches_numpy(artifact: Path, rng: np.random.Generator) -> None:
    module = load(artifact)
    for _ in range(3):  # repeated runs: no state leaks from one run into the next
        x = rng.standard_normal((2, 3), dtype=np.float32)
        got = module.run({"x": x})
        want = tiny.reference(x)
        assert list(got) == ["y", "t", "w"]
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6)


def test_signature_and_manifest(artifact: Path, parts: dict) -> None:
    module = load(artifact)
    assert module.inputs == (TensorSpec("x", (2, 3), "float32"),)
    assert [o.name for o in module.outputs] == ["y", "t", "w"]
    assert module.outputs[0] == TensorSpec("y", (3, 2), "float32")
    assert module.manifest["kernels"] == parts["manifest"]["kernels"]
    module.manifest["kernels"].clear()  # a copy: the module's own manifest is untouched
    assert module.manifest["kernels"]
    assert len(module.sha256) == 64


def test_outputs_are_copies(artifact: Path) -> None:
    module = load(artifact)
    x = np.ones((2, 3), dtype=np.float32)
    first = module.run({"x": x})
    first["y"][:] = 1000.0
    first["w"][:] = 1000.0
    second = module.run({"x": x})
    np.testing.assert_allclose(second["y"], tiny.reference(x)["y"])
    np.testing.assert_allclose(second["w"], tiny.W)


@pytest.fixture(params=["in-place", "copied"])
def in_place(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """run() hands inputs and outputs of DIRECT_MIN_BYTES or more to the kernels in place and copies
    smaller ones; the tiny model's are small, so the in-place case lowers the bar to every array."""
    if request.param == "in-place":
        monkeypatch.setattr(module_py, "DIRECT_MIN_BYTES", 0)
    return bool(request.param == "in-place")


def test_inputs_are_read_in_place_and_every_run_returns_its_own_outputs(
    artifact: Path, in_place: bool
) -> None:
    """run() passes contiguous inputs and fresh output arrays straight to the kernels (or copies
    small ones): the caller's input is never written, an earlier result is never overwritten, and
    the module's own memory is back in place afterwards (benchmark and later runs do not touch the
    caller's arrays)."""
    module = load(artifact)
    assert (module._direct_inputs == {"x"}) is in_place
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    kept = x.copy()
    first = module.run({"x": x})
    second = module.run({"x": 2 * x})
    np.testing.assert_array_equal(x, kept)
    np.testing.assert_allclose(first["y"], tiny.reference(kept)["y"])
    np.testing.assert_allclose(second["y"], tiny.reference(2 * kept)["y"])
    assert not np.shares_memory(first["y"], second["y"])
    del x
    module.benchmark({"x": np.ones((2, 3), np.float32)}, repeat=1, min_time=0.0)
    np.testing.assert_allclose(module.run({"x": kept})["y"], tiny.reference(kept)["y"])


def test_accepts_non_contiguous_input(artifact: Path, in_place: bool) -> None:
    module = load(artifact)
    x = np.arange(6, dtype=np.float32).reshape(3, 2).T  # a transposed (Fortran-ordered) view
    assert not x.flags.c_contiguous
    np.testing.assert_allclose(module.run({"x": x})["y"], tiny.reference(np.ascontiguousarray(x))["y"])


def test_accepts_read_only_and_misaligned_inputs(artifact: Path, in_place: bool) -> None:
    """A read-only array (the buffer protocol will not give its address for writing) and one whose
    data is not aligned to its element size (a view one byte into a buffer) both run correctly."""
    module = load(artifact)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    frozen = np.frombuffer(x.tobytes(), dtype=np.float32).reshape(2, 3)
    assert not frozen.flags.writeable
    raw = np.zeros(x.nbytes + 1, np.uint8)
    shifted = raw[1:].view(np.float32).reshape(2, 3)
    shifted[...] = x
    assert shifted.ctypes.data % 4 != 0
    for feed in (frozen, shifted):
        for name, want in tiny.reference(x).items():
            np.testing.assert_array_equal(module.run({"x": feed})[name], want)


def test_loads_from_bytes(artifact: Path) -> None:
    x = np.ones((2, 3), dtype=np.float32)
    np.testing.assert_allclose(load(artifact.read_bytes()).run({"x": x})["y"], tiny.reference(x)["y"])


def test_concurrent_runs_are_serialized_and_correct(artifact: Path) -> None:
    module = load(artifact)
    failures: list[str] = []

    def worker(seed: int) -> None:
        gen = np.random.default_rng(seed)
        for _ in range(50):
            x = gen.standard_normal((2, 3), dtype=np.float32)
            if not np.allclose(module.run({"x": x})["y"], tiny.reference(x)["y"], atol=1e-6):
                failures.append(f"thread {seed}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_benchmark_reports_latencies(artifact: Path) -> None:
    result = load(artifact).benchmark({"x": np.zeros((2, 3), np.float32)}, repeat=3, min_time=0.001)
    assert result["repeat"] == 3
    assert 0 < result["min"] <= result["median"] <= result["max"]
    assert result["mean"] > 0
    with pytest.raises(ValueError):
        load(artifact).benchmark({"x": np.zeros((2, 3), np.float32)}, repeat=0)


@pytest.mark.parametrize("alone", [False, True], ids=["in-model", "alone"])
def test_profile_times_every_call_and_leaves_the_results(
    artifact: Path, parts: dict, rng: np.random.Generator, alone: bool
) -> None:
    """Both orders time every kernel call of the plan, in plan order; after the kernels were called
    alone (each back to back), the module still runs right."""
    module = load(artifact)
    x = rng.standard_normal((2, 3), dtype=np.float32)
    entries = module.profile({"x": x}, repeat=3, alone=alone)
    assert [e["step"] for e in entries] == list(range(len(entries)))
    assert [e["kernel"] for e in entries] == [step["kernel"] for step in parts["plan"]["steps"]]
    assert all(e["median"] > 0 for e in entries)
    assert sum(e["share"] for e in entries) == pytest.approx(1.0)
    got = module.run({"x": x})
    for name, want in tiny.reference(x).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="repeat >= 1"):
        module.profile({"x": x}, repeat=0, alone=alone)


@pytest.mark.parametrize("alone", [False, True], ids=["in-model", "alone"])
def test_profile_names_a_failing_kernel(tmp_path: Path, parts: dict, alone: bool) -> None:
    parts["plan"]["steps"].append({"kernel": "fail_k", "args": [5]})
    path = tmp_path / "fail.temper"
    write_artifact(path, **parts)
    with pytest.raises(KernelError, match=r"kernel 'fail_k' \(plan step 2\) failed with error code 7"):
        load(path).profile({"x": np.zeros((2, 3), np.float32)}, repeat=1, alone=alone)


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({"x": np.zeros((2, 3), np.float32), "z": np.zeros(1)}, r"unknown input 'z'; this model takes: x"),
        ({}, r"missing input 'x' \(float32\[2, 3\]\)"),
        ({"x": np.zeros((3, 2), np.float32)}, r"input 'x' has shape \[3, 2\], expected \[2, 3\]"),
        ({"x": np.zeros((2, 3), np.float64)}, r"input 'x' has dtype float64, expected float32"),
        ({"x": [[0.0] * 3] * 2}, r"input 'x' has dtype float64, expected float32"),
    ],
)
def test_bad_inputs_are_named(artifact: Path, feeds: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load(artifact).run(feeds)


def test_feeds_must_be_a_mapping(artifact: Path) -> None:
    with pytest.raises(InputError, match="mapping"):
        load(artifact).run([np.zeros((2, 3), np.float32)])  # type: ignore[arg-type]


def test_failing_kernel_raises_naming_it(tmp_path: Path, parts: dict) -> None:
    parts["plan"]["steps"].append({"kernel": "fail_k", "args": [5]})
    path = tmp_path / "fail.temper"
    write_artifact(path, **parts)
    with pytest.raises(
        RuntimeError, match=r"kernel 'fail_k' \(plan step 2\) failed with error code 7"
    ) as err:
        load(path).run({"x": np.zeros((2, 3), np.float32)})
    assert isinstance(err.value, KernelError)
    assert err.value.code == 7


def test_missing_symbol_fails_at_load(tmp_path: Path, parts: dict) -> None:
    parts["manifest"]["kernels"].append({"name": "nope", "symbol": "nope", "schedule": {"source": "default"}})
    parts["plan"]["steps"].append({"kernel": "nope", "args": [5]})
    path = tmp_path / "nope.temper"
    write_artifact(path, **parts)
    with pytest.raises(ArtifactError, match=r"kernel symbol 'nope' is not exported by lib\.so"):
        load(path)


def test_library_that_is_not_a_shared_object_fails_at_load(tmp_path: Path, parts: dict) -> None:
    parts["library"] = b"definitely not ELF"
    path = tmp_path / "junk.temper"
    write_artifact(path, **parts)
    with pytest.raises(ArtifactError, match=r"cannot load the artifact's lib\.so"):
        load(path)


def test_artifact_for_another_architecture_is_refused(tmp_path: Path, parts: dict) -> None:
    parts["manifest"]["target"]["triple"] = "riscv64-unknown-linux-gnu"
    path = tmp_path / "riscv.temper"
    write_artifact(path, **parts)
    with pytest.raises(ArtifactError, match="compiled for riscv64"):
        load(path)


def test_runtime_needs_no_compiler_packages(artifact: Path) -> None:
    script = (
        "import sys, numpy as np\n"
        "from compiler.runtime import load\n"
        f"out = load({str(artifact)!r}).run({{'x': np.ones((2, 3), np.float32)}})\n"
        "heavy = ('llvmlite', 'onnx', 'compiler.pipeline', 'compiler.errors')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print(out['y'].shape)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(3, 2)"


def test_artifact_needing_cpu_features_this_machine_lacks_is_refused(tmp_path: Path, parts: dict) -> None:
    parts["manifest"]["target"]["required_features"] = ["sse2", "temper_imaginary_isa"]
    path = tmp_path / "future.temper"
    write_artifact(path, **parts)
    with pytest.raises(ArtifactError, match="needs CPU features this machine lacks: temper_imaginary_isa"):
        load(path)


def test_the_required_features_of_targets() -> None:
    from compiler.runtime.module import cpu_flags, missing_features
    from compiler.target import parse_target

    assert parse_target("haswell").required_features == ["avx", "avx2", "fma", "sse4_2"]
    assert "avx512f" in parse_target("skylake-avx512").required_features
    host = parse_target("host")
    assert host.to_json()["required_features"] == host.required_features
    if cpu_flags() is not None:  # Linux: everything the compiling CPU has is listed, and present
        assert host.required_features and missing_features(host.to_json()) == []


def test_a_library_with_the_step_runner_runs_the_plan_in_one_call(tmp_path: Path) -> None:
    with_runner, without = (tmp_path / "a.temper", tmp_path / "b.temper")
    write_artifact(with_runner, **tiny.parts(tiny.library(steps=True)))
    write_artifact(without, **tiny.parts(tiny.library(steps=False)))
    assert load(with_runner)._steps is not None and load(without)._steps is None
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    for name, want in tiny.reference(x).items():
        np.testing.assert_array_equal(load(with_runner).run({"x": x})[name], want)
        np.testing.assert_array_equal(load(without).run({"x": x})[name], want)


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds `address` (Linux's /proc/self/smaps)."""
    mapping = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            mapping = lo <= address < hi
        elif mapping and line.startswith("VmFlags:"):
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("nbytes", [1, 4096 + 3, module_py.HUGE_PAGE, 5 * module_py.HUGE_PAGE + 64])
def test_buffers_are_aligned_zeroed_and_writable(nbytes: int) -> None:
    buffer = module_py._aligned_bytes(nbytes)
    assert buffer.nbytes == nbytes and buffer.dtype == np.uint8
    assert buffer.ctypes.data % module_py.ALIGN == 0
    assert not buffer.any()
    buffer[:] = 7  # writable to its last byte
    assert int(buffer[-1]) == 7


def test_large_buffers_ask_for_huge_pages() -> None:
    """Weights of a few MiB and more lie on huge-page boundaries, in memory marked for transparent huge
    pages (VmFlags "hg"), so the OS may back their streams with 2 MiB pages. (Small buffers come from
    numpy's allocator, whose memory may lie in a region something else marked: nothing is asserted of
    them.)"""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text() or not hasattr(module_py.mmap, "MADV_HUGEPAGE"):
        pytest.skip("this kernel has no transparent huge pages to ask for")
    large = module_py._aligned_bytes(3 * module_py.HUGE_PAGE + 100)
    assert large.ctypes.data % module_py.HUGE_PAGE == 0
    assert "hg" in _vm_flags(large.ctypes.data)
