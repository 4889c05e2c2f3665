"""Test helpers: build a PrimFunc into a real shared library and call it with numpy arrays."""

from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np

from compiler.codegen.library import CodeLibrary
from compiler.target import Target, host_target
from compiler.tir import compute as te
from compiler.tir.flatten import flatten
from compiler.tir.ir import PrimFunc
from compiler.tir.lower import lower


def matmul_relu(m: int, n: int, k: int) -> PrimFunc:
    with te.tensor_scope():
        a = te.placeholder((m, k), "float32", "A")
        b = te.placeholder((k, n), "float32", "B")
        r = te.reduce_axis(k, "k")
        c = te.compute(
            (m, n),
            lambda i, j: te.reduce_sum(te.mul(a[i, r.var], b[r.var, j]), [r]),
            "C",
            axis_names=["i", "j"],
        )
        out = te.compute(
            (m, n), lambda i, j: te.maximum(c[i, j], te.f32(0.0)), "R", axis_names=["i", "j"], tag="elemwise"
        )
        return lower("mm", [a, b], out)


def run_func(func: PrimFunc, *arrays: np.ndarray, target: Target | None = None) -> None:
    """Compile `func` (scheduled or not) and run it in place on `arrays` (params in order)."""
    run_flat(flatten(func), *arrays, target=target)


def run_flat(func: PrimFunc, *arrays: np.ndarray, target: Target | None = None) -> None:
    """Compile `func` as it is (loads and stores, no blocks: not flattened again) and run it in place
    (for the host, or a `target` whose code this machine runs)."""
    lib = CodeLibrary(target or host_target())
    lib.add_kernel(func, "kernel")
    so = lib.shared_library()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.so"
        path.write_bytes(so)
        dll = ctypes.CDLL(str(path))
        fn = dll.kernel
        fn.restype = ctypes.c_int32
        ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        assert fn(ptrs) == 0
