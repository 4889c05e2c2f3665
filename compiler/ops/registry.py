"""The one operator registry: op name -> OpDef.

Each op family file under compiler/ops/ registers its ops explicitly with `register(...)`;
`compiler/ops/__init__.py` imports the families in a fixed list, so there is one answer to
"where is conv2d defined, lowered and scheduled?".
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.tensor_type import TensorType


class Pattern(enum.IntEnum):
    """How an op fuses (ordered: lower fuses more freely)."""

    ELEMWISE = 0  # out[i] = f(in[i]) on same-shape inputs
    BROADCAST = 1  # elementwise with numpy broadcasting
    INJECTIVE = 2  # each output element reads a computable input element (reshape, transpose, slice)
    REDUCTION = 3  # reduces axes (softmax, reduce_*, pooling by reduction)
    ANCHOR = 4  # conv / matmul / dense / pool: accepts an elementwise epilogue
    OPAQUE = 5  # never fused


Attrs = dict[str, Any]
InferFn = Callable[[Sequence[TensorType], Attrs], TensorType]
ReferenceFn = Callable[[Sequence[np.ndarray], Attrs], np.ndarray]


@dataclass(frozen=True)
class OpDef:
    """Everything about one graph op.

    infer: output type from input types and attributes (raise ShapeError on misuse).
    reference: numpy implementation; used by constant folding and as the test oracle.
    compute: tensor-expression definition used by lowering (see compiler.tir.compute).
    schedule: default schedule for kernels anchored on this op (see compiler.tir.schedule).
    """

    name: str
    pattern: Pattern
    infer: InferFn
    reference: ReferenceFn
    compute: Callable[..., Any] | None = None
    schedule: Callable[..., Any] | None = None
    # part of the workload key: bumped when compute or schedule change what a recorded trace
    # means, so that tuning records made for the older definition are no longer applied
    version: int = 1


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in _REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    _REGISTRY[op.name] = op
    return op


def get(name: str) -> OpDef:
    import compiler.ops  # noqa: F401  (ensures every family is registered)

    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown graph op {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    import compiler.ops  # noqa: F401

    return dict(_REGISTRY)
