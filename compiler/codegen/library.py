"""The one owner of LLVM: target machine, optimisation pipeline, object emission, linking.

Kernels are added as llvmlite IR, spread over a few modules (parts) of about equal size, each
kernel whole in one part with its aliases. `finalize()` parses and links the parts into one module
and optimises it for the exact target CPU, after which the library can print its IR/assembly.
`objects()` needs no whole module: when the IR is large and the machine has a spare core, the parts
are optimised and emitted in parallel, one in this process and the others in worker processes
(llvm_worker.py; llvmlite serialises every call into LLVM on one process-wide lock, so threads
would take turns), a part whose worker fails being compiled here instead. The system C compiler
driver links the objects with temper's runtime (parallel.c, the thread pool, workspace.c, the
kernels' scratch memory, and steps.c, the loop over a plan's kernel calls; compiled by the same
driver once per process) and libm, so that the library needs nothing but libc at load time.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir

from compiler.codegen.llvm import emit_alias, emit_kernel
from compiler.errors import CodegenError
from compiler.target import Target, init_llvm
from compiler.tir.ir import PrimFunc

_LLVM_LOCK = threading.RLock()  # LLVM's global state is not thread-safe (held across nested calls)
RUNTIME_SOURCES = tuple(Path(__file__).with_name(f) for f in ("parallel.c", "workspace.c", "steps.c"))
_RUNTIME_LOCK = threading.Lock()
_runtime_objects: dict[str, list[bytes]] = {}  # C compiler driver -> the runtime sources compiled by it
# parts a library's kernels are spread over, at most (one per core the process may use)
MAX_PARTS = 4
# unoptimised IR (characters of text) below which one process compiles the whole library: a
# worker's start-up and the IR's round trip through a file then cost about what they save
PARALLEL_MIN_IR_CHARS = 4_000_000


def _c_compiler() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise CodegenError("no C compiler driver (cc/gcc/clang) found to link the shared library")
    return cc


def runtime_objects(cc: str) -> list[bytes]:
    """The runtime sources compiled by `cc` (position-independent, their internals hidden, so that
    every library keeps a pool and a workspace cache of its own), once per process and driver."""
    with _RUNTIME_LOCK:
        if cc not in _runtime_objects:
            objects = []
            with tempfile.TemporaryDirectory(prefix="temper-runtime-") as d:
                for source in RUNTIME_SOURCES:
                    obj = Path(d) / f"{source.stem}.o"
                    flags = ["-std=c11", "-O2", "-fPIC", "-pthread", "-fvisibility=hidden"]
                    proc = subprocess.run(
                        [cc, *flags, "-c", str(source), "-o", str(obj)],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if proc.returncode != 0:
                        err = proc.stderr.strip()
                        raise CodegenError(f"compiling the runtime's {source.name} failed: {err}")
                    objects.append(obj.read_bytes())
            _runtime_objects[cc] = objects
        return _runtime_objects[cc]


@functools.cache
def target_machine(target: Target) -> llvm.TargetMachine:
    """The one LLVM TargetMachine of `target` in this process, shared by every library built for it
    (a tuner builds one library per candidate)."""
    with _LLVM_LOCK:
        init_llvm()  # idempotent; a Target unpickled in a worker process never ran it
        t = llvm.Target.from_triple(target.triple)
        machine: llvm.TargetMachine = t.create_target_machine(
            cpu=target.cpu, features=target.features, opt=3, reloc="pic", codemodel="default"
        )
        return machine


def usable_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class CodeLibrary:
    def __init__(self, target: Target, name: str = "temper", parts: int | None = None) -> None:
        self.target = target
        self.name = name
        count = max(1, min(MAX_PARTS, usable_cores() if parts is None else parts))
        self.parts = [ir.Module(name=f"{name}.{k}") for k in range(count)]
        for module in self.parts:
            module.triple = target.triple
        self._instructions = [0] * count  # each part's size so far
        self._part_of: dict[str, int] = {}  # kernel symbol -> its part
        self._final: llvm.ModuleRef | None = None
        self.symbols: list[str] = []

    def add_kernel(self, func: PrimFunc, symbol: str, stream: str | None = None) -> None:
        """Add kernel `func` as `symbol` to the smallest part; `stream` names the constant parameter
        it prefetches ahead of its reads (compiler/codegen/stream.py, `stream_param`), if any."""
        if self._final is not None:
            raise CodegenError("library is finalized; cannot add kernels")
        k = min(range(len(self.parts)), key=self._instructions.__getitem__)
        module = self.parts[k]
        before = len(module.globals)
        emit_kernel(module, func, symbol, stream, self.target.dot_instructions)
        added = list(module.globals.values())[before:]
        self._instructions[k] += sum(
            len(block.instructions) for g in added if isinstance(g, ir.Function) for block in g.blocks
        )
        self._part_of[symbol] = k
        self.symbols.append(symbol)

    def add_alias(self, symbol: str, of: str) -> None:
        """Export `symbol` as the kernel `of` (added before): identical kernels are compiled once."""
        if self._final is not None:
            raise CodegenError("library is finalized; cannot add kernels")
        if of not in self._part_of:
            raise CodegenError(f"no kernel {of!r} in the library to alias as {symbol!r}")
        k = self._part_of[of]
        emit_alias(self.parts[k], symbol, of)
        self._part_of[symbol] = k
        self.symbols.append(symbol)

    def ir_text(self) -> str:
        """The unoptimised LLVM IR of every part, as emitted."""
        return "\n".join(str(module) for module in self.parts)

    @property
    def target_machine(self) -> llvm.TargetMachine:
        return target_machine(self.target)

    def finalize(self) -> None:
        """Parse the parts, link them into one module and optimise it."""
        if self._final is not None:
            return
        with _LLVM_LOCK:
            self._final = optimized_module([str(m) for m in self.parts], self.target)

    def llvm_ir(self) -> str:
        self.finalize()
        return str(self._final)

    def assembly(self) -> str:
        self.finalize()
        with _LLVM_LOCK:
            asm: str = self.target_machine.emit_assembly(self._final)
            return asm

    def object_code(self) -> bytes:
        """The whole library as one object (optimised as one module)."""
        self.finalize()
        with _LLVM_LOCK:
            obj: bytes = self.target_machine.emit_object(self._final)
            return obj

    def objects(self) -> list[bytes]:
        """Object code of every kernel: one object when the library is finalized, small or has one
        part, else one per part, compiled in parallel (workers for all parts but the first)."""
        if self._final is None:
            texts = [str(m) for m in self.parts if any(not f.is_declaration for f in m.functions)]
            if len(texts) > 1 and sum(map(len, texts)) >= PARALLEL_MIN_IR_CHARS:
                return compile_parallel(texts, self.target)
            if texts:
                with _LLVM_LOCK:
                    self._final = optimized_module(texts, self.target)
        return [self.object_code()]

    def shared_library(self) -> bytes:
        """The library's object code linked into a shared library (see link_shared)."""
        return link_shared(self.objects())


def optimized_module(texts: Sequence[str], target: Target) -> llvm.ModuleRef:
    """Parse and verify the IR texts, link them into one module (internal names that clash are
    renamed) and run LLVM's O3 pipeline on it for `target`. Call with _LLVM_LOCK held."""
    try:
        modules = [llvm.parse_assembly(text) for text in texts]
        for m in modules:
            m.verify()
        mod = modules[0]
        for other in modules[1:]:
            mod.link_in(other)
    except RuntimeError as e:
        raise CodegenError(f"LLVM rejected the generated IR: {e}") from e
    tm = target_machine(target)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = False
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)
    return mod


def emit_object(texts: Sequence[str], target: Target) -> bytes:
    """Object code of the IR texts, optimised as one module."""
    with _LLVM_LOCK:
        obj: bytes = target_machine(target).emit_object(optimized_module(texts, target))
        return obj


def compile_parallel(texts: Sequence[str], target: Target) -> list[bytes]:
    """An object per IR text: the first compiled here while a worker process (llvm_worker.py)
    compiles each other one; a part whose worker cannot start or fails is compiled here after."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="temper-llvm-") as d:
        workers: list[tuple[Path, subprocess.Popen[bytes] | None]] = []
        for k, text in enumerate(texts[1:], 1):
            source, obj = Path(d) / f"part{k}.ll", Path(d) / f"part{k}.o"
            source.write_text(text)
            command = [sys.executable, "-m", "compiler.codegen.llvm_worker", str(source), str(obj)]
            command += [target.triple, target.cpu, target.features]
            try:
                proc = subprocess.Popen(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            except OSError:
                proc = None
            workers.append((obj, proc))
        try:
            objects = [emit_object(texts[:1], target)]
            for (obj, proc), text in zip(workers, texts[1:], strict=True):
                if proc is not None and proc.wait() == 0 and obj.is_file():
                    objects.append(obj.read_bytes())
                else:
                    objects.append(emit_object([text], target))
            return objects
        finally:  # an error here (bad IR, an interrupt) leaves no worker behind
            for _, proc in workers:
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()


def link_shared(objects: Sequence[bytes]) -> bytes:
    """Link the object code with the parallel runtime into a shared library (C ABI; needs libc and
    libm). `-z nodelete`: the pool's detached workers run the library's code for as long as the
    process lives, so the library must never be unmapped under them."""
    cc = _c_compiler()
    runtime = runtime_objects(cc)
    with tempfile.TemporaryDirectory(prefix="temper-link-") as d:
        so = Path(d) / "lib.so"
        parts = []
        for k, code in enumerate([*objects, *runtime]):
            parts.append(Path(d) / f"part{k}.o")
            parts[-1].write_bytes(code)
        proc = subprocess.run(
            [cc, "-shared", "-pthread", "-Wl,-z,nodelete", "-o", str(so), *map(str, parts), "-lm"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise CodegenError(f"linking failed: {proc.stderr.strip()}")
        return so.read_bytes()
