"""Reductions over a set of axes: reduce_sum, reduce_mean, reduce_max, reduce_prod.

Attributes: axes (sorted, unique, non-negative; empty means "reduce nothing"), keepdims (0 | 1).
The frontend resolves ONNX defaults (missing axes = all axes) before building the call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from compiler.errors import ScheduleError
from compiler.ops.common import FLOAT, NUMERIC, expect_args, expect_dtype, fail, int_attr, ints_attr
from compiler.ops.registry import OpDef, Pattern, register
from compiler.tensor_type import TensorType
from compiler.tir import compute as te
from compiler.tir.ir import Block, Expr, FloatImm, Load, walk_expr
from compiler.tir.rules import (
    MIN_PARALLEL_WORK,
    KernelInfo,
    block_of,
    inline_injective,
    root_loops,
    store_of,
    vars_of,
    vector_reduction,
)
from compiler.tir.trace import Schedule


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_infer(op: str, allowed: Sequence[str]) -> Callable[..., TensorType]:
    def infer(types: Sequence[TensorType], attrs: dict[str, Any]) -> TensorType:
        expect_args(op, types, 1)
        x = types[0]
        expect_dtype(op, x, allowed)
        axes = ints_attr(attrs, "axes")
        keepdims = int_attr(attrs, "keepdims")
        if list(axes) != sorted(set(axes)) or any(not 0 <= a < x.ndim for a in axes):
            raise fail(f"{op} axes {list(axes)} must be sorted, unique and within rank {x.ndim}")
        if keepdims not in (0, 1):
            raise fail(f"{op} keepdims must be 0 or 1, got {keepdims}")
        if any(x.shape[a] == 0 for a in axes) and op not in ("reduce_sum", "reduce_prod"):
            raise fail(f"{op} over an empty axis of {list(x.shape)}")
        return TensorType(reduced_shape(x.shape, axes, bool(keepdims)), x.dtype)

    return infer


def _reduce_sum(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out: np.ndarray = np.sum(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]), dtype=x.dtype)
    return out


def _reduce_mean(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out = np.mean(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]), dtype=np.float64)
    return np.asarray(out).astype(x.dtype)


def _reduce_max(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    out: np.ndarray = np.max(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))
    return out


def _reduce_prod(a: Sequence[np.ndarray], attrs: dict[str, Any]) -> np.ndarray:
    x = a[0]
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN as the compiled product gives them
        out: np.ndarray = np.prod(
            x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]), dtype=x.dtype
        )
    return out


# ------------------------------------------------------------------ lowering: compute definitions
def _reduce_compute(kind: str) -> Callable[..., te.Tensor]:
    def compute(inputs: Sequence[te.Tensor], attrs: dict[str, Any], out: TensorType, name: str) -> te.Tensor:
        (x,) = inputs
        axes = tuple(attrs["axes"]) if attrs.get("axes") is not None else tuple(range(x.ndim))
        keep = bool(attrs.get("keepdims", 1))
        raxes = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
        count = 1
        for a in axes:
            count *= x.shape[a]

        def index(*ix: Expr) -> list[Expr]:
            src: list[Expr] = []
            k = 0
            for a in range(x.ndim):
                if a in raxes:
                    src.append(raxes[a].var)
                    if keep:
                        k += 1
                else:
                    src.append(ix[k])
                    k += 1
            return src

        if kind in ("max", "prod"):
            combine = te.reduce_max if kind == "max" else te.reduce_prod
            return te.compute(
                out.shape,
                lambda *ix: combine(x[index(*ix)], list(raxes.values())),
                name,
                tag="reduce",
                dtype=out.dtype,
            )
        s = te.compute(
            out.shape,
            lambda *ix: te.reduce_sum(x[index(*ix)], list(raxes.values())),
            name if kind == "sum" else f"{name}_sum",
            tag="reduce",
            dtype=out.dtype,
        )
        if kind == "sum":
            return s
        return te.compute(
            out.shape,
            lambda *ix: te.div(s[ix], FloatImm(float(count), out.dtype)),
            name,
            tag="elemwise",
            dtype=out.dtype,
        )

    return compute


# ------------------------------------------------------------------ scheduling
def _reduction_block(sch: Schedule) -> Block:
    blocks = [block_of(sch, n) for n in sch.blocks()]
    found = [b for b in blocks if any(iv.reduce for iv in b.iter_vars)]
    if len(found) != 1:
        raise ScheduleError(f"expected one reduction block, found {len(found)}")
    return found[0]


def _reduces_innermost(b: Block) -> bool:
    """Whether the reduced input's innermost (contiguous) index runs over a reduced axis."""
    reduced = {iv.var for iv in b.iter_vars if iv.reduce}
    store = store_of(b)
    reads = [e for e in walk_expr(store.value) if isinstance(e, Load) and e.buffer != store.buffer]
    return any(e.indices and set(vars_of(e.indices[-1])) & reduced for e in reads)


def reduce_schedule(sch: Schedule, info: KernelInfo) -> None:
    """Reductions over any axes, in two shapes.

    - The innermost input axis is kept (a blocked NCHW{c} global pool, a reduction over a middle
      axis): the kept axis becomes the vector, with the reduced loops outside it, so each vector of
      outputs is summed in registers over unit-stride loads.
    - The innermost input axis is reduced (a row sum, NCHW global pool): the reduced loops stay
      innermost, the last one run as vectors whose lanes are combined into the sum
      (compiler/tir/rules.py, vector_reduction).
    Either way the outer kept axes run in parallel when there is enough input to share, and the
    epilogue (mean's division, fused elementwise ops) runs per parallel iteration."""
    inline_injective(sch, info)
    red = _reduction_block(sch)
    loops = root_loops(sch, red.name)
    bindings = zip(red.iter_vars, red.bindings, strict=True)
    reduce_vars = {v for iv, bnd in bindings if iv.reduce for v in vars_of(bnd)}
    spatial = [f.var.name for f in loops if f.var not in reduce_vars]
    reduced = [f.var.name for f in loops if f.var in reduce_vars]
    if not spatial:
        raise ScheduleError("the reduction has no kept axis to run in parallel or as vectors")
    if [f.var.name for f in loops] != spatial + reduced:
        raise ScheduleError("the reduced loops are not innermost")
    extents = {f.var.name: f.extent for f in loops}
    out_name = store_of(red).buffer.name
    if info.output_block != red.name:
        sch.set_scope(out_name, "local")
        consumer: str | None = info.output_block
    else:
        consumer = sch.cache_write(red.name)
    lanes = info.target.lanes(store_of(red).buffer.dtype)
    work = math.prod(extents.values())
    vector: str | None = None
    if not _reduces_innermost(red):
        inner = spatial[-1]
        n = extents[inner]
        options = sorted(({n} if n <= 64 else set()) | {w for w in range(lanes, 65, lanes) if n % w == 0})
        if options:
            # several vectors per step: independent sums hide the add's latency
            default = max((w for w in options if w <= 4 * lanes), default=min(options))
            width = sch.decide("vector_width", options, default)
            if width < n:
                outer_part, vector = sch.split(inner, [None, width])
                spatial = [*spatial[:-1], outer_part]
            else:
                vector, spatial = inner, spatial[:-1]
            sch.reorder(*spatial, *reduced, vector)
    threads = sch.decide("parallel", [True, False], work >= MIN_PARALLEL_WORK and bool(spatial))
    outer = None
    if spatial:
        outer = spatial[0] if len(spatial) == 1 else sch.fuse(*spatial)
        if threads:
            sch.parallel(outer)
    if vector is not None:
        sch.vectorize(vector)
    sch.decompose_reduction(red.name, reduced[0])
    if vector is None:
        vector_reduction(sch, red.name, info.target)
    if consumer is not None and outer is not None:
        sch.reverse_compute_at(consumer, outer)
        last = root_loops(sch, consumer)[-1]
        if last.extent <= 64 and last.var.name != outer:
            sch.vectorize(last.var.name)


# reduce_sum(x), attrs: axes, keepdims
register(
    OpDef(
        "reduce_sum",
        Pattern.REDUCTION,
        _reduce_infer("reduce_sum", NUMERIC),
        _reduce_sum,
        compute=_reduce_compute("sum"),
        schedule=reduce_schedule,
        version=2,  # 2: own schedule (version 1 traces were the generic schedule's)
    )
)
# reduce_mean(x), attrs: axes, keepdims
register(
    OpDef(
        "reduce_mean",
        Pattern.REDUCTION,
        _reduce_infer("reduce_mean", (FLOAT,)),
        _reduce_mean,
        compute=_reduce_compute("mean"),
        schedule=reduce_schedule,
        version=2,  # 2: own schedule (version 1 traces were the generic schedule's)
    )
)
# reduce_max(x), attrs: axes, keepdims
register(
    OpDef(
        "reduce_max",
        Pattern.REDUCTION,
        _reduce_infer("reduce_max", NUMERIC),
        _reduce_max,
        compute=_reduce_compute("max"),
        schedule=reduce_schedule,
        version=2,  # 2: own schedule (version 1 traces were the generic schedule's)
    )
)
# reduce_prod(x), attrs: axes, keepdims (its lanes are not combined as vectors: a product's rows
# stay serial, a kept innermost axis still runs as vectors)
register(
    OpDef(
        "reduce_prod",
        Pattern.REDUCTION,
        _reduce_infer("reduce_prod", NUMERIC),
        _reduce_prod,
        compute=_reduce_compute("prod"),
        schedule=reduce_schedule,
    )
)
