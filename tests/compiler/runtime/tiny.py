"""A tiny hand-built artifact: two real C kernels compiled with the system compiler.

The plan exercises every buffer kind: an input, two params (the second at a 64-byte offset),
a workspace buffer, an alias of it with another shape, an output, and outputs that are an
alias and a param.
"""

from __future__ import annotations

import copy
import functools
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

C_SOURCE = r"""
#include <stdint.h>

/* t[2,3] = x[2,3] + w[2,3] */
int32_t add_k(void **args) {
    const float *x = args[0], *w = args[1];
    float *t = args[2];
    for (int i = 0; i < 6; ++i) t[i] = x[i] + w[i];
    return 0;
}

/* y[3,2] = max(t[3,2], 0) + b[2] */
int32_t relu_bias_k(void **args) {
    const float *t = args[0], *b = args[1];
    float *y = args[2];
    for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 2; ++j) {
            float v = t[i * 2 + j];
            y[i * 2 + j] = (v > 0.0f ? v : 0.0f) + b[j];
        }
    return 0;
}

/* always fails, to test error reporting */
int32_t fail_k(void **args) {
    (void)args;
    return 7;
}
"""

STEPS_SOURCE = Path(__file__).resolve().parents[3] / "compiler" / "codegen" / "steps.c"
W = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], dtype=np.float32)
B = np.array([0.5, -0.25], dtype=np.float32)


def library(steps: bool = False) -> bytes:
    """The compiled kernels (built once per session); with `steps`, linked with temper's step runner
    (compiler/codegen/steps.c) as every library temper builds is, else without it as libraries of
    earlier versions were. Skips when there is no C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler (cc/gcc/clang) on this machine to build the test kernels")
    return _compile(compiler, steps)


@functools.cache
def _compile(compiler: str, steps: bool) -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory, "tiny.c")
        source.write_text(C_SOURCE)
        sources = [str(source), *([str(STEPS_SOURCE)] if steps else [])]
        out = Path(directory, "tiny.so")
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(out), *sources], check=True)
        return out.read_bytes()


def params() -> bytes:
    blob = bytearray(72)
    blob[0:24] = W.tobytes()
    blob[64:72] = B.tobytes()
    return bytes(blob)


def parts(lib: bytes) -> dict[str, Any]:
    """Keyword arguments for write_artifact / artifact_bytes; a fresh deep copy every call."""
    plan = {
        "buffers": [
            {"id": 0, "shape": [2, 3], "dtype": "float32", "kind": "input", "name": "x"},
            {"id": 1, "shape": [2, 3], "dtype": "float32", "kind": "param", "name": "w", "offset": 0},
            {"id": 2, "shape": [2], "dtype": "float32", "kind": "param", "name": "b", "offset": 64},
            {"id": 3, "shape": [2, 3], "dtype": "float32", "kind": "workspace", "offset": 0},
            {"id": 4, "shape": [3, 2], "dtype": "float32", "kind": "alias", "alias_of": 3},
            {"id": 5, "shape": [3, 2], "dtype": "float32", "kind": "output", "name": "y"},
        ],
        "workspace_bytes": 64,
        "inputs": {"x": 0},
        "outputs": {"y": 5, "t": 4, "w": 1},
        "steps": [
            {"kernel": "add_k", "args": [0, 1, 3]},
            {"kernel": "relu_bias_k", "args": [4, 2, 5]},
        ],
    }
    kernels = [
        {
            "name": name,
            "symbol": name,
            "workload_key": f"test-{name}",
            "flops": 6,
            "schedule": {"source": "default"},
        }
        for name in ("add_k", "relu_bias_k", "fail_k")
    ]
    manifest = {
        "temper_version": "0.0.0-test",
        "target": {
            "triple": f"{platform.machine()}-unknown-linux-gnu",
            "cpu": "generic",
            "features": "",
            "vector_width": 1,
            "cores": 1,
        },
        "opt_level": 0,
        "passes": [],
        "inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"}],
        "outputs": [
            {"name": "y", "shape": [3, 2], "dtype": "float32"},
            {"name": "t", "shape": [3, 2], "dtype": "float32"},
            {"name": "w", "shape": [2, 3], "dtype": "float32"},
        ],
        "kernels": kernels,
    }
    return copy.deepcopy({"manifest": manifest, "library": lib, "plan": plan, "params": params()})


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    """What the tiny model computes, in numpy."""
    t = (x + W).reshape(3, 2)
    return {"y": np.maximum(t, 0) + B, "t": t, "w": W}
