"""A quantized model's integer conv is a tuning task like any conv: random schedules from its space
compute the reference (the graph interpreter's exact integer sums) on random 8-bit inputs (bytes,
or widened to int16 for a target without VNNI) and weights, and the features extract."""

from __future__ import annotations

import random

import numpy as np
import pytest

from compiler.ops.conv2d_int8 import OP
from compiler.pipeline import CompileOptions
from tests.compiler.graph.test_quantized_kernels import AVX2, HAS_AVX2, HAS_VNNI, _qdq_conv
from tests.tuner.test_space import run_candidate
from tuner.features import N_FEATURES, extract
from tuner.space import sample
from tuner.task import extract_tasks


@pytest.mark.parametrize("target", ["host", AVX2], ids=["host", "avx2"])
def test_random_schedules_of_an_integer_conv_compute_its_reference(target: str) -> None:
    if target == "host" and not HAS_VNNI:
        pytest.skip("no VNNI at this host's vector width: the AVX2 case covers its int16 kernel")
    if target == AVX2 and not HAS_AVX2:
        pytest.skip("this host has no AVX2, which code for the AVX2 target needs")
    model, _ = _qdq_conv(c=32, oc=48, hw=12, stride=2)  # strided: integer without VNNI too
    tasks = extract_tasks(model.SerializeToString(), CompileOptions(target=target))
    (task,) = [t for t in tasks if t.workload.anchor_op == OP]
    inputs = task.inputs(seed=1)
    stored = np.uint8 if target == "host" else np.int16  # 8-bit weights without VNNI: widened
    assert any(v.dtype == stored and v.max() > 128 for v in inputs.values())  # the whole uint8 range
    rng = random.Random(0)
    seen = 0
    for _ in range(12):
        trace = sample(task.workload, rng)
        if trace is None:
            continue
        got, want = run_candidate(task, trace)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        seen += 1
        if seen == 3:
            break
    assert seen == 3
    default = run_candidate(task, None)
    np.testing.assert_allclose(*default, rtol=1e-5, atol=1e-5)
    assert len(extract(task.workload.func, task.workload.flops)) == N_FEATURES
