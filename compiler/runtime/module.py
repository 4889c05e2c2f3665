"""A loaded artifact: its library opened with ctypes, its memory laid out once, run() over the plan.

All memory (params, workspace, input and output buffers) and every kernel's argument array are
built at load time, so run() only copies small inputs in (large ones it hands to the kernels in
place, see DIRECT_MIN_BYTES), calls the kernels in order and copies small outputs out. A lock
makes one Module safe to share between threads (calls are serialized).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import mmap
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np

from compiler.runtime.archive import Contents, Source, read_contents
from compiler.runtime.errors import ArtifactError, InputError, KernelError
from compiler.runtime.plan import DTYPES, Buffer, BufferId, Plan, TensorSpec

ALIGN = 64
# the x86-64 huge page: buffers of at least this size are laid out in huge pages (_huge_page_bytes)
HUGE_PAGE = 2 << 20
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


class _KernelFn(Protocol):
    """A kernel's ctypes function pointer: int32_t (*)(void **)."""

    def __call__(self, args: ctypes.Array[ctypes.c_void_p], /) -> int: ...


def _aligned_bytes(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of `nbytes` whose data pointer is ALIGN-byte aligned; from HUGE_PAGE bytes
    on, in huge pages where the OS gives them (_huge_page_bytes)."""
    if nbytes >= HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        return _huge_page_bytes(nbytes)
    raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start : start + nbytes]


def _huge_page_bytes(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of `nbytes` starting on a HUGE_PAGE boundary, in private anonymous memory
    the OS is asked to back with transparent huge pages. A model's weights are read as long streams
    on every run, and its activations by every kernel: with 4 KiB pages each 4 KiB of a stream
    costs a TLB miss (a page walk, for a software prefetch too), with 2 MiB pages one in 512 of
    them does. Where the kernel has transparent huge pages switched off, madvise fails and the
    memory keeps its small pages (same contents, only slower)."""
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = np.frombuffer(region, dtype=np.uint8)  # holds `region` open as long as any view of it
    start = -raw.ctypes.data % HUGE_PAGE
    with contextlib.suppress(OSError):  # EINVAL where huge pages are off: small pages then
        region.madvise(mmap.MADV_HUGEPAGE)
    return raw[start : start + nbytes]


def _check_arch(target: Mapping[str, Any]) -> None:
    triple = str(target.get("triple") or "")
    wanted = _ARCH_ALIASES.get(triple.split("-")[0].lower(), triple.split("-")[0].lower())
    here = _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())
    if wanted and here and wanted != here:
        raise ArtifactError(f"the artifact was compiled for {triple}; this machine is {here}")


def cpu_flags() -> frozenset[str] | None:
    """The running CPU's feature flags as Linux lists them (None where /proc/cpuinfo says nothing)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def missing_features(target: Mapping[str, Any]) -> list[str]:
    """The features a manifest's target requires that this CPU lacks (none when unknowable)."""
    flags = cpu_flags()
    required = target.get("required_features") or []
    if flags is None or not isinstance(required, list):
        return []
    return [str(f) for f in required if str(f) not in flags]


def _check_features(target: Mapping[str, Any]) -> None:
    """Refuse code this CPU cannot run: it would die of SIGILL, taking the process with it."""
    missing = missing_features(target)
    if missing:
        raise ArtifactError(
            f"the artifact was compiled for {target.get('cpu', '?')} and needs CPU features this machine "
            f"lacks: {', '.join(missing)}; recompile it for this machine (--target host)"
        )


def _open_library(library: bytes) -> ctypes.CDLL:
    """dlopen lib.so from a private temp dir, removed right away (the mapping outlives the file)."""
    directory = tempfile.mkdtemp(prefix="temper-lib-")
    try:
        path = os.path.join(directory, "lib.so")
        with open(path, "wb") as out:
            out.write(library)
        try:
            return ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        except OSError as exc:
            raise ArtifactError(f"cannot load the artifact's lib.so: {exc}") from exc
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _release_when_collected(module: object, library: ctypes.CDLL) -> None:
    """End the library's worker threads and free its cached workspace when `module` is garbage-
    collected: every Module opens its own copy of lib.so, whose thread pool and workspace cache
    (compiler/codegen/parallel.c, workspace.c) serve nobody else. Not at interpreter exit, where the
    process ends them anyway. Libraries linked before temper had this runtime lack those entries."""
    for name in ("temper_parallel_stop", "temper_workspace_release"):
        try:
            fn = getattr(library, name)
        except AttributeError:
            continue
        fn.restype = None
        fn.argtypes = []
        weakref.finalize(module, fn).atexit = False


_Steps = tuple[Any, int, "ctypes.Array[ctypes.c_void_p]", "ctypes.Array[ctypes.c_void_p]"]


def _native_steps(library: ctypes.CDLL, calls: Sequence[tuple[_KernelFn, Any, str]]) -> _Steps | None:
    """The library's step runner (compiler/codegen/steps.c) with the plan's kernels and argument
    arrays, so that a run is one foreign call rather than one per kernel; None for a library linked
    before temper had it (the calls then run from Python, one by one)."""
    try:
        run = library["temper_run_steps"]
    except AttributeError:
        return None
    run.restype = ctypes.c_int64
    run.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32)]
    kernels = (ctypes.c_void_p * len(calls))(
        *(ctypes.cast(cast(Any, fn), ctypes.c_void_p).value for fn, _, _ in calls)
    )
    args = (ctypes.c_void_p * len(calls))(*(ctypes.addressof(pointers) for _, pointers, _ in calls))
    return run, len(calls), kernels, args


def _byte_views(plan: Plan, params: np.ndarray, workspace: np.ndarray) -> dict[BufferId, np.ndarray]:
    """The uint8 memory of every buffer: own allocations, slices of params/workspace, alias slices."""
    views: dict[BufferId, np.ndarray] = {}

    def resolve(buf: Buffer) -> np.ndarray:
        if buf.id in views:
            return views[buf.id]
        if buf.kind == "param":
            view = params[buf.offset : buf.offset + buf.nbytes]
        elif buf.kind == "workspace":
            view = workspace[buf.offset : buf.offset + buf.nbytes]
        elif buf.kind == "alias":
            assert buf.alias_of is not None  # parse_plan: an alias names the buffer it views
            view = resolve(plan.buffers[buf.alias_of])[buf.offset : buf.offset + buf.nbytes]
        else:  # input / output: memory of its own
            view = _aligned_bytes(buf.nbytes)
        views[buf.id] = view
        return view

    for buf in plan.buffers.values():
        resolve(buf)
    return views


def _root(plan: Plan, buf_id: BufferId) -> tuple[BufferId, int]:
    """The buffer with memory of its own that buf_id views, and the byte offset into it."""
    offset = 0
    buf = plan.buffers[buf_id]
    while buf.kind == "alias":
        offset += buf.offset or 0
        assert buf.alias_of is not None  # parse_plan: an alias names the buffer it views
        buf = plan.buffers[buf.alias_of]
    return buf.id, offset


# run() hands an input or output at least this large to the kernels in place (its address in their
# argument arrays); a smaller one is copied, which costs less than finding and rebinding an address
DIRECT_MIN_BYTES = 16 << 10


def _address(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first element. The buffer protocol answers in a
    fraction of the time `array.ctypes.data` takes (which builds a helper object per call); a
    read-only or empty array, which it refuses, goes the slow way."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(cast(Any, array)))
    except (TypeError, ValueError, BufferError):
        return int(array.ctypes.data)


def _typed(plan: Plan, views: Mapping[BufferId, np.ndarray], buf_id: BufferId) -> np.ndarray:
    buf = plan.buffers[buf_id]
    return views[buf_id].view(DTYPES[buf.dtype]).reshape(buf.shape)


class Module:
    """A compiled model ready to run. Build it with `load()`."""

    def __init__(self, contents: Contents) -> None:
        plan = contents.plan
        _check_arch(contents.manifest["target"])
        _check_features(contents.manifest["target"])
        self._manifest = contents.manifest
        self._sha256 = contents.sha256
        self._inputs = contents.inputs
        self._outputs = contents.outputs
        self._lock = threading.Lock()
        self._library = _open_library(contents.members["lib.so"])
        _release_when_collected(self, self._library)
        self._slots: dict[BufferId, list[tuple[ctypes.Array[ctypes.c_void_p], int, int]]] = {}

        params = _aligned_bytes(len(contents.members["params.bin"]))
        params[:] = np.frombuffer(contents.members["params.bin"], dtype=np.uint8)
        workspace = _aligned_bytes(plan.workspace_bytes)
        views = _byte_views(plan, params, workspace)
        self._memory = (params, workspace, views)  # keeps every buffer alive as long as the module

        functions: dict[str, _KernelFn] = {}
        calls: list[tuple[_KernelFn, ctypes.Array[ctypes.c_void_p], str]] = []
        for step in plan.steps:
            if step.kernel not in functions:
                try:
                    fn = self._library[step.kernel]
                except AttributeError as exc:
                    raise ArtifactError(f"kernel symbol {step.kernel!r} is not exported by lib.so") from exc
                fn.restype = ctypes.c_int32
                fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
                functions[step.kernel] = fn
            pointers = (ctypes.c_void_p * len(step.args))(*(views[a].ctypes.data for a in step.args))
            calls.append((functions[step.kernel], pointers, step.kernel))
            for index, arg in enumerate(step.args):
                root, offset = _root(plan, arg)
                if plan.buffers[root].kind in ("input", "output"):
                    self._slots.setdefault(root, []).append((pointers, index, offset))
        self._calls = tuple(calls)
        self._steps = _native_steps(self._library, self._calls)
        self._code = ctypes.c_int32(0)
        self._code_ref = ctypes.byref(self._code)
        self._feeds = {name: _typed(plan, views, buf_id) for name, buf_id in plan.inputs}
        self._input_ids = dict(plan.inputs)
        outputs = self._output_ids = dict(plan.outputs)
        self._results = {spec.name: _typed(plan, views, outputs[spec.name]) for spec in self._outputs}
        # run() hands kernels the caller's input arrays and fresh output arrays directly (no copies)
        # where it can: not for an input some output is a view of, nor an output that is a view
        self._own = {root: int(views[root].ctypes.data) for root in self._slots}
        output_roots = {name: _root(plan, buf_id) for name, buf_id in plan.outputs}
        read_back = {root for root, _ in output_roots.values() if plan.buffers[root].kind == "input"}
        self._direct_inputs = {
            name
            for name, buf_id in plan.inputs
            if buf_id in self._slots
            and buf_id not in read_back
            and self._feeds[name].nbytes >= DIRECT_MIN_BYTES
        }
        self._direct_outputs = {
            name
            for name, (root, offset) in output_roots.items()
            if root == outputs[name]
            and plan.buffers[root].kind == "output"
            and offset == 0
            and list(outputs.values()).count(root) == 1
            and self._results[name].nbytes >= DIRECT_MIN_BYTES
        }
        self._expected = ", ".join(s.name for s in self._inputs) or "(none)"

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """The model's inputs (name, shape, dtype) in manifest order."""
        return self._inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        """The model's outputs (name, shape, dtype) in manifest order."""
        return self._outputs

    def sample_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random inputs of the right shapes and dtypes, valid for any model: normal floats,
        and 0 or 1 for integers and booleans (indices, masks, token ids)."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for spec in self._inputs:
            dtype = np.dtype(spec.dtype)
            if dtype.kind == "f":
                feeds[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
            else:
                feeds[spec.name] = rng.integers(0, 2, spec.shape).astype(dtype)
        return feeds

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the artifact's manifest (target, kernels and their schedule provenance, ...)."""
        return copy.deepcopy(self._manifest)

    @property
    def sha256(self) -> str:
        """The sha256 of the artifact file this module was loaded from."""
        return self._sha256

    def __repr__(self) -> str:
        sig = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self._inputs)
        return f"<temper Module ({sig}) -> {len(self._outputs)} output(s), {len(self._calls)} kernel call(s)>"

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if not isinstance(feeds, Mapping):
            raise InputError(f"feeds must be a mapping of input name to array, got {type(feeds).__name__}")
        for name in feeds:
            if name not in self._feeds:
                raise InputError(f"unknown input {name!r}; this model takes: {self._expected}")
        arrays = {}
        for spec in self._inputs:
            if spec.name not in feeds:
                raise InputError(f"missing input {spec.name!r} ({spec.dtype}{list(spec.shape)})")
            array = np.asarray(feeds[spec.name])
            if array.dtype != DTYPES[spec.dtype]:
                raise InputError(f"input {spec.name!r} has dtype {array.dtype}, expected {spec.dtype}")
            if array.shape != spec.shape:
                raise InputError(
                    f"input {spec.name!r} has shape {list(array.shape)}, expected {list(spec.shape)}"
                )
            arrays[spec.name] = array
        return arrays

    def _execute(self) -> None:
        if self._steps is not None:
            run, count, kernels, args = self._steps
            self._code.value = 0
            index = run(count, kernels, args, self._code_ref)
            if self._code.value:
                raise KernelError(self._calls[index][2], index, self._code.value)
            return
        for index, (fn, pointers, kernel) in enumerate(self._calls):
            code_ = fn(pointers)
            if code_:
                raise KernelError(kernel, index, code_)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model on `feeds` (exact dtype and shape per input); return fresh output arrays,
        in the order of `outputs`."""
        arrays = self._check_feeds(feeds)
        with self._lock:
            moved: list[BufferId] = []
            try:
                for name, array in arrays.items():
                    address = (
                        _address(array) if name in self._direct_inputs and array.flags.c_contiguous else -1
                    )
                    if address >= 0 and address % array.itemsize == 0:
                        root = self._input_ids[name]
                        moved.append(root)
                        self._point(root, address)
                    else:
                        self._feeds[name][...] = array
                fresh = {}
                for name in self._direct_outputs:
                    view = self._results[name]
                    fresh[name] = np.empty(view.shape, view.dtype)
                    root = self._output_ids[name]
                    moved.append(root)
                    self._point(root, _address(fresh[name]))
                self._execute()
                results = self._results.items()
                return {name: fresh[name] if name in fresh else view.copy() for name, view in results}
            finally:
                for root in moved:
                    self._point(root, self._own[root])

    def _point(self, root: BufferId, base: int) -> None:
        for pointers, index, offset in self._slots.get(root, ()):
            pointers[index] = base + offset

    def benchmark(
        self, feeds: Mapping[str, np.ndarray], *, repeat: int = 10, min_time: float = 0.02, warmup: int = 1
    ) -> dict[str, float]:
        """Time the kernels (inputs copied in once): `repeat` samples, each averaged over enough
        back-to-back runs to last at least `min_time` seconds. Latencies are in seconds."""
        if repeat < 1 or min_time < 0 or warmup < 0:
            raise ValueError("benchmark needs repeat >= 1, min_time >= 0 and warmup >= 0")
        arrays = self._check_feeds(feeds)
        with self._lock:
            for name, array in arrays.items():
                np.copyto(self._feeds[name], array)
            for _ in range(warmup):
                self._execute()

            def timed(number: int) -> float:
                start = time.perf_counter()
                for _ in range(number):
                    self._execute()
                return time.perf_counter() - start

            number = 1
            elapsed = timed(number)
            while elapsed < min_time and number < 1 << 24:
                number = min(1 << 24, max(number * 2, int(number * min_time / max(elapsed, 1e-9) * 1.1)))
                elapsed = timed(number)
            samples = [timed(number) / number for _ in range(repeat)]
        return {
            "median": statistics.median(samples),
            "mean": statistics.fmean(samples),
            "min": min(samples),
            "max": max(samples),
            "stdev": statistics.stdev(samples) if len(samples) > 1 else 0.0,
            "repeat": float(repeat),
            "number": float(number),
        }

    def profile(
        self, feeds: Mapping[str, np.ndarray], *, repeat: int = 20, alone: bool = False
    ) -> list[dict[str, Any]]:
        """Median time of every kernel call (seconds), in plan order, slowest calls being where
        tuning pays off. Each entry: step, kernel, median, share (of the summed medians).

        By default each kernel is timed in its place in the model: `repeat` runs, every call timed.
        With `alone`, each kernel is called `repeat` times back to back after one run of the model
        (a kernel computes its output from its operands only, so the buffers hold the same values):
        its operands and weights are then warm in the caches, and the difference from its in-model
        time is what the model's memory traffic costs it there."""
        if repeat < 1:
            raise ValueError("profile needs repeat >= 1")
        arrays = self._check_feeds(feeds)
        times: list[list[float]] = [[] for _ in self._calls]
        with self._lock:
            for name, array in arrays.items():
                np.copyto(self._feeds[name], array)
            self._execute()
            if alone:
                for index in range(len(self._calls)):
                    self._timed_call(index)  # warms the caches: left out
                    times[index] = [self._timed_call(index) for _ in range(repeat)]
            else:
                for _ in range(repeat):
                    for index in range(len(self._calls)):
                        times[index].append(self._timed_call(index))
        medians = [statistics.median(t) for t in times]
        total = sum(medians) or 1.0
        return [
            {"step": i, "kernel": call[2], "median": m, "share": m / total}
            for i, (call, m) in enumerate(zip(self._calls, medians, strict=True))
        ]

    def _timed_call(self, index: int) -> float:
        """Seconds the kernel call at `index` of the plan takes (the caller holds the lock)."""
        fn, pointers, kernel = self._calls[index]
        start = time.perf_counter()
        code = fn(pointers)
        elapsed = time.perf_counter() - start
        if code:
            raise KernelError(kernel, index, code)
        return elapsed


def load(source: Source, *, key: bytes | None = None) -> Module:
    """Verify an artifact (path or bytes) and load it, ready to run. With `key`, the artifact must be
    signed with it (compiler.runtime.archive), checked before anything in it is loaded. Raises
    ArtifactError."""
    return Module(read_contents(source, key))
