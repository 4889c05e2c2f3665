"""The code library: kernels spread over parts, compiled as one module or in parallel processes, and
the same machine code either way; a worker that fails costs time, never a kernel; bad IR is an error."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llvmlite import ir

from compiler.codegen import library
from compiler.codegen.library import CodeLibrary
from compiler.errors import CodegenError
from compiler.target import host_target
from compiler.tir.ir import BinOp, Buffer, FloatImm, For, ForKind, Load, PrimFunc, Store, Var

N = 1000


def _affine(scale: float, shift: float) -> PrimFunc:
    """out[i] = a[i] * scale + shift, vectorized by 8 where it divides."""
    a, out, i = Buffer("a", (N,)), Buffer("out", (N,)), Var("i")
    value = BinOp("+", BinOp("*", Load(a, (i,)), FloatImm(scale)), FloatImm(shift))
    return PrimFunc("affine", (a, out), For(i, N, ForKind.SERIAL, Store(out, (i,), value)))


KERNELS = {f"k{j}": (1.5 + j, -2.0 * j) for j in range(5)}


def _library(parts: int) -> CodeLibrary:
    lib = CodeLibrary(host_target(), parts=parts)
    for symbol, (scale, shift) in KERNELS.items():
        lib.add_kernel(_affine(scale, shift), symbol)
    lib.add_alias("k0_again", "k0")
    lib.add_alias("k3_again", "k3")
    return lib


def _check_runs(so: bytes) -> None:
    """Every kernel and alias of _library computes its own affine map."""
    a = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "lib.so"
        path.write_bytes(so)
        dll = ctypes.CDLL(str(path))
        for symbol in [*KERNELS, "k0_again", "k3_again"]:
            scale, shift = KERNELS[symbol.removesuffix("_again")]
            out = np.zeros(N, np.float32)
            fn = getattr(dll, symbol)
            fn.restype = ctypes.c_int32
            assert fn((ctypes.c_void_p * 2)(a.ctypes.data, out.ctypes.data)) == 0
            np.testing.assert_allclose(out, a * np.float32(scale) + np.float32(shift), rtol=1e-6, atol=1e-6)


def test_kernels_spread_over_parts_with_their_aliases() -> None:
    lib = _library(parts=3)
    holding = [[s for s in lib.symbols if f'@"{s}"' in str(m) or f"@{s}(" in str(m)] for m in lib.parts]
    assert all(holding), holding  # five kernels of one size over three parts: none is empty
    for k0_part in (p for p in holding if "k0" in p):
        assert "k0_again" in k0_part
    assert sorted(s for p in holding for s in p if not s.endswith("_again")) == sorted(KERNELS)


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_one_module_and_parallel_parts_give_the_same_kernels(
    parts: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(library, "PARALLEL_MIN_IR_CHARS", 0)
    lib = _library(parts)
    objects = lib.objects()
    assert len(objects) == parts  # a part per object: compiled apart
    _check_runs(library.link_shared(objects))
    whole = _library(parts)
    text = whole.llvm_ir()  # the parts linked into one module
    assert all(f"@{s}(" in text or f'@"{s}"(' in text for s in whole.symbols)
    _check_runs(whole.shared_library())


def test_a_small_library_is_one_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(library, "PARALLEL_MIN_IR_CHARS", 10**12)
    lib = _library(parts=2)
    assert len(lib.objects()) == 1
    _check_runs(lib.shared_library())


def test_a_worker_that_cannot_start_or_fails_leaves_its_part_to_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(library, "PARALLEL_MIN_IR_CHARS", 0)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    _check_runs(library.link_shared(_library(parts=2).objects()))
    monkeypatch.setattr(sys, "executable", "false")  # starts, then exits non-zero
    _check_runs(library.link_shared(_library(parts=2).objects()))


@pytest.mark.parametrize("threshold", [0, 10**12])
def test_invalid_ir_in_any_part_is_a_codegen_error(threshold: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(library, "PARALLEL_MIN_IR_CHARS", threshold)
    lib = _library(parts=2)
    broken = ir.Function(lib.parts[1], ir.FunctionType(ir.VoidType(), []), "broken")
    ir.IRBuilder(broken.append_basic_block("entry")).add(
        ir.Constant(ir.IntType(32), 1), ir.Constant(ir.IntType(32), 2)
    )
    with pytest.raises(CodegenError, match="LLVM rejected the generated IR"):
        lib.objects()  # the block has no terminator


def test_an_alias_of_an_unknown_kernel_is_refused() -> None:
    lib = CodeLibrary(host_target(), parts=2)
    lib.add_kernel(_affine(1.0, 0.0), "k")
    with pytest.raises(CodegenError, match="no kernel 'missing'"):
        lib.add_alias("again", "missing")


def test_an_error_in_this_process_leaves_no_worker_running(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def keep(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(popen(["sleep", "60"], **{k: v for k, v in kwargs.items() if k != "env"}))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", keep)
    texts = ["this is not LLVM IR", "define void @f() {\nentry:\n  ret void\n}\n"]
    with pytest.raises(CodegenError, match="LLVM rejected the generated IR"):
        library.compile_parallel(texts, host_target())
    assert len(started) == 1 and started[0].poll() is not None  # killed and reaped
