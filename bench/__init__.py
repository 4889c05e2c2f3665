"""temper's benchmarks: operator workloads and whole models, side by side with numpy, onnxruntime,
PyTorch and (when importable) Apache TVM, in one run on the same machine.

Importing this package pins every system's thread pool to `THREADS` threads (temper's too). It must happen
before numpy, torch or tvm are imported and before a temper library starts its pool (they read the
environment once), which is why it lives here: running `python -m bench.ops` imports the package before
the module.
"""

from __future__ import annotations

import os

THREADS = 2
"""Threads given to every system measured (the anchors were measured this way, on 2 cores)."""

for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TVM_NUM_THREADS",
    "TEMPER_NUM_THREADS",
):
    os.environ[_var] = str(THREADS)
