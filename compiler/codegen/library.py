"""The one owner of LLVM: target machine, optimisation pipeline, object emission, linking.

Kernels are added as llvmlite IR; `finalize()` parses, verifies and optimises the module once for
the exact target CPU, after which the library can print its IR/assembly, emit an object file or
link a shared library: the system C compiler driver links the kernels with temper's runtime
(parallel.c, the thread pool, workspace.c, the kernels' scratch memory, and steps.c, the loop
over a plan's kernel calls; compiled by the same driver once per process) and libm, so that the
library needs nothing but libc at load time.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import threading
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


class CodeLibrary:
    def __init__(self, target: Target, name: str = "temper") -> None:
        self.target = target
        self.module = ir.Module(name=name)
        self.module.triple = target.triple
        self._final: llvm.ModuleRef | None = None
        self.symbols: list[str] = []

    def add_kernel(self, func: PrimFunc, symbol: str, stream: str | None = None) -> None:
        """Add kernel `func` as `symbol`; `stream` names the constant parameter it prefetches ahead of
        its reads (compiler/codegen/stream.py, `stream_param`), if any."""
        if self._final is not None:
            raise CodegenError("library is finalized; cannot add kernels")
        emit_kernel(self.module, func, symbol, stream)
        self.symbols.append(symbol)

    def add_alias(self, symbol: str, of: str) -> None:
        """Export `symbol` as the kernel `of` (added before): identical kernels are compiled once."""
        if self._final is not None:
            raise CodegenError("library is finalized; cannot add kernels")
        emit_alias(self.module, symbol, of)
        self.symbols.append(symbol)

    @property
    def target_machine(self) -> llvm.TargetMachine:
        return target_machine(self.target)

    def finalize(self) -> None:
        if self._final is not None:
            return
        with _LLVM_LOCK:
            try:
                mod = llvm.parse_assembly(str(self.module))
                mod.verify()
            except RuntimeError as e:
                raise CodegenError(f"LLVM rejected the generated IR: {e}") from e
            tm = self.target_machine
            mod.triple = self.target.triple
            mod.data_layout = str(tm.target_data)
            pto = llvm.create_pipeline_tuning_options(speed_level=3)
            pto.loop_vectorization = False
            pto.slp_vectorization = True
            pb = llvm.create_pass_builder(tm, pto)
            pm = pb.getModulePassManager()
            pm.run(mod, pb)
            self._final = mod

    def llvm_ir(self) -> str:
        self.finalize()
        return str(self._final)

    def assembly(self) -> str:
        self.finalize()
        with _LLVM_LOCK:
            asm: str = self.target_machine.emit_assembly(self._final)
            return asm

    def object_code(self) -> bytes:
        self.finalize()
        with _LLVM_LOCK:
            obj: bytes = self.target_machine.emit_object(self._final)
            return obj

    def shared_library(self) -> bytes:
        """The library's object code linked into a shared library (see link_shared)."""
        return link_shared(self.object_code())


def link_shared(obj: bytes) -> bytes:
    """Link the object code with the parallel runtime into a shared library (C ABI; needs libc and
    libm). `-z nodelete`: the pool's detached workers run the library's code for as long as the
    process lives, so the library must never be unmapped under them."""
    cc = _c_compiler()
    runtime = runtime_objects(cc)
    with tempfile.TemporaryDirectory(prefix="temper-link-") as d:
        o, so = Path(d) / "kernels.o", Path(d) / "lib.so"
        o.write_bytes(obj)
        parts = [o]
        for k, code in enumerate(runtime):
            parts.append(Path(d) / f"runtime{k}.o")
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
