"""Task extraction: the distinct kernels of a model, each with its weight and FLOP count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.graph.interpret import run_graph
from compiler.graph.ir import Const
from compiler.graph.passes.fuse import Group
from compiler.kernels import Workload
from compiler.pipeline import CompileOptions, Frontier, ModelInput, algorithm_alternatives, build_frontier
from compiler.planner import pack_constant


@dataclass(frozen=True)
class Task:
    """One workload to tune. `weight` = how many kernels of the model share it; `group` is the fused
    graph it came from (the reference the measured candidates are checked against). A task with
    `alternative_of` is not in the compiled model as the rule builds it: it is a conv task's kernel of
    the other algorithm (the direct kernel of a Winograd task, or the Winograd kernel of a direct
    one; that task's key), tuned so that compile can keep whichever of the two measured faster."""

    name: str
    workload: Workload
    group: Group  # the fused group (its body is the reference the candidates are checked against)
    weight: int
    flops: int
    alternative_of: str | None = None
    # the constants of the whole model the task came from, in bytes (0: unknown, a task rebuilt from
    # its description): each run of a model whose constants outgrow the last-level cache reads every
    # kernel's weights from DRAM, and the runner times its candidates so (tuner/measure.py)
    model_weight_bytes: int = 0

    @property
    def key(self) -> str:
        return self.workload.key

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Fixed random inputs for every kernel parameter except the output (unpacked layouts)."""
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for buf in self.workload.func.params[:-1]:
            if buf.dtype.startswith("float"):
                out[buf.name] = rng.standard_normal(buf.shape).astype(buf.dtype)
            elif buf.dtype == "bool":
                out[buf.name] = rng.random(buf.shape) < 0.5
            elif buf.dtype in ("uint8", "int8"):  # quantized values: their whole range
                info = np.iinfo(buf.dtype)
                out[buf.name] = rng.integers(info.min, info.max + 1, buf.shape).astype(buf.dtype)
            elif buf.dtype == "int16":  # quantized values widened (an integer conv's input): 0..255
                out[buf.name] = rng.integers(0, 256, buf.shape).astype(buf.dtype)
            else:  # integer operands are indices here: keep them small and non-negative
                out[buf.name] = rng.integers(0, 2, buf.shape).astype(buf.dtype)
        return out

    def reference(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The group's output computed by the graph interpreter (numpy references)."""
        body = self.group.body
        feeds = {v.name: inputs[f"p{k}"] for k, v in enumerate(self.group.params)}
        (result,) = run_graph(body, feeds).values()
        return np.asarray(result)


def pack_inputs(inputs: Mapping[str, np.ndarray], layouts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Inputs as a candidate expects them: constant params packed to its schedule's layouts."""
    return {k: pack_constant(v, layouts[k]) if k in layouts else v for k, v in inputs.items()}


def extract_tasks(model: ModelInput, options: CompileOptions) -> list[Task]:
    """Distinct workloads of the model in first-use order, weighted by occurrence."""
    return tasks_of(build_frontier(model, options))


def tasks_of(fr: Frontier) -> list[Task]:
    """Distinct workloads of a built frontier in first-use order, weighted by occurrence."""
    by_key: dict[str, Task] = {}
    counts: dict[str, int] = {}
    for kernel in fr.kernels:
        w = kernel.workload
        counts[w.key] = counts.get(w.key, 0) + 1
        if w.key not in by_key:
            by_key[w.key] = Task(w.func.name, w, kernel.group, 1, w.flops)
    weights = model_weight_bytes(fr)
    return [Task(t.name, t.workload, t.group, counts[k], t.flops, None, weights) for k, t in by_key.items()]


def model_weight_bytes(fr: Frontier) -> int:
    """Bytes of the constants the kernels of a built model read (each counted once)."""
    consts = {id(n): n for n in fr.fused.nodes() if isinstance(n, Const)}
    return sum(c.data.nbytes for c in consts.values())


def alternative_tasks(model: ModelInput, options: CompileOptions, fr: Frontier | None = None) -> list[Task]:
    """The twins of the model's conv kernels of the other algorithm (compiler.pipeline.
    algorithm_alternatives), one task per distinct workload, weighted like the task each replaces;
    `fr` is the model's frontier when the caller has built it already."""
    fr = fr or build_frontier(model, options)
    counts: dict[str, int] = {}
    for kernel in fr.kernels:
        key = kernel.workload.key
        counts[key] = counts.get(key, 0) + 1
    by_key: dict[str, Task] = {}
    weights = model_weight_bytes(fr)
    for alt in algorithm_alternatives(model, options, fr):
        if alt.twin.key not in by_key:
            mine = alt.kernel.workload.key
            group = alt.twin_kernel.group
            by_key[alt.twin.key] = Task(
                alt.twin.func.name, alt.twin, group, counts[mine], alt.twin.flops, mine, weights
            )
    return list(by_key.values())
