"""Legality of a scheduled loop nest: what no schedule may do, whoever wrote its trace.

Schedule primitives keep what a kernel computes only if loop annotations respect the data flow. A
trace is data that may come from anywhere (an imported record, an override), so a scheduled PrimFunc
is checked as a whole before it is built:

- a parallel loop must not run the iterations of a reduction at the same time (the partial sums
  would race); a vectorized one may, when the block's step combines one value into its accumulator
  by +, max or min on floats (`lane_combine`) and its init has been hoisted out: code generation
  combines the vector's lanes into the accumulator (a horizontal sum or max) once per vector;
- a parallel loop must give its iterations disjoint elements to write: a block under it that writes
  a buffer allocated outside the loop must index it through the loop's variable;
- unrolling multiplies code: the unrolled loops around any statement may expand it at most
  MAX_UNROLL_PRODUCT times (code generation unrolls a loop of up to MAX_UNROLL_EXTENT iterations and
  keeps a longer one as a loop).

A violation is a ScheduleError naming the loop and the block, so the tuner records the candidate as
invalid and a compile falls back to the default schedule (or fails, for an explicit override).
"""

from __future__ import annotations

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Expr,
    For,
    ForKind,
    Load,
    PrimFunc,
    Stmt,
    Store,
    Var,
    children_of,
    walk_expr,
    walk_stmts,
)

MAX_UNROLL_EXTENT = 64  # a longer unrolled loop is emitted as a loop
MAX_UNROLL_PRODUCT = 4096


def check_legal(func: PrimFunc) -> None:
    """Raise ScheduleError at the first annotation that would change what `func` computes."""
    stack: list[tuple[Stmt, int]] = [(func.body, 1)]
    while stack:
        s, unrolled = stack.pop()
        if isinstance(s, For):
            if s.kind is ForKind.UNROLLED and s.extent <= MAX_UNROLL_EXTENT:
                unrolled *= s.extent
                if unrolled > MAX_UNROLL_PRODUCT:
                    raise ScheduleError(
                        f"unroll of loop {s.var.name!r} expands its body {unrolled} times "
                        f"(limit {MAX_UNROLL_PRODUCT}) in {func.name}"
                    )
            check_loop(func, s)
        stack.extend((child, unrolled) for child in children_of(s))


def check_loop(func: PrimFunc, loop: For) -> None:
    """The checks of one parallel or vectorized loop (what `annotate` asks as it applies one)."""
    if loop.kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
        _check_no_reduction(func, loop)
    if loop.kind is ForKind.PARALLEL:
        _check_disjoint_writes(func, loop)


def _vars(e: Expr) -> set[Var]:
    return {x for x in walk_expr(e) if isinstance(x, Var)}


LANE_COMBINE_OPS = ("+", "max", "min")


def lane_combine(store: Store) -> str | None:
    """The op of a reduction step `acc[i] = op(acc[i], x)` over floats whose lanes code generation
    can combine (+, max, min: associative, their order free within fp32 rounding), else None."""
    v = store.value
    if not (
        isinstance(v, BinOp) and v.op in LANE_COMBINE_OPS and store.buffer.dtype in ("float32", "float64")
    ):
        return None
    acc = v.a
    if not (isinstance(acc, Load) and acc.buffer is store.buffer and acc.indices == store.indices):
        return None
    return v.op


def _lane_reduction(block: Block, loop: For) -> bool:
    """Whether vectorized `loop` may run `block`'s reduction: a lane-combinable step with no init
    inside (an init would reset the accumulator between lanes), the loop's variable in no index of
    the accumulator."""
    store = block.body
    return (
        loop.kind is ForKind.VECTORIZED
        and block.init is None
        and isinstance(store, Store)
        and lane_combine(store) is not None
        and all(
            loop.var not in _vars(b)
            for iv, b in zip(block.iter_vars, block.bindings, strict=True)
            if not iv.reduce
        )
    )


def _check_no_reduction(func: PrimFunc, loop: For) -> None:
    for block in (b for b in walk_stmts(loop.body) if isinstance(b, Block)):
        for iv, binding in zip(block.iter_vars, block.bindings, strict=True):
            if iv.reduce and loop.var in _vars(binding) and not _lane_reduction(block, loop):
                raise ScheduleError(
                    f"{loop.kind.value} loop {loop.var.name!r} would run the reduction over "
                    f"{iv.var.name!r} of block {block.name!r} in {func.name} concurrently"
                )


def _check_disjoint_writes(func: PrimFunc, loop: For) -> None:
    private = {a.buffer for a in walk_stmts(loop.body) if isinstance(a, Allocate)}
    for block in (b for b in walk_stmts(loop.body) if isinstance(b, Block)):
        reaches = {
            iv.var for iv, bnd in zip(block.iter_vars, block.bindings, strict=True) if loop.var in _vars(bnd)
        }
        reaches.add(loop.var)
        bodies = [block.body] if block.init is None else [block.body, block.init]
        for store in (x for body in bodies for x in walk_stmts(body) if isinstance(x, Store)):
            if store.buffer in private:
                continue
            used = set().union(*(_vars(i) for i in store.indices)) if store.indices else set()
            if not used & reaches:
                raise ScheduleError(
                    f"parallel loop {loop.var.name!r}: every iteration writes the same elements of "
                    f"{store.buffer.name!r} (block {block.name!r} in {func.name})"
                )
