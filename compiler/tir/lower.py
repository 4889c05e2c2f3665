"""Compute definitions -> a naive PrimFunc: one block per computed tensor in a serial loop nest."""

from __future__ import annotations

from collections.abc import Sequence

from compiler.tir.compute import ComputeOp, Reduce, Tensor
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Buffer,
    Expr,
    For,
    ForKind,
    IterVar,
    Load,
    PrimFunc,
    Stmt,
    Store,
    Var,
    replace_buffer,
    seq,
)

_COMBINE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


def stages_of(output: Tensor) -> list[Tensor]:
    """Computed tensors reachable from `output`, producers first."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(output, False)]
    while stack:
        t, expanded = stack.pop()
        if t.op is None or id(t) in seen:
            continue
        if expanded:
            seen.add(id(t))
            order.append(t)
            continue
        stack.append((t, True))
        for inp in reversed(t.op.inputs):
            if inp.op is not None and id(inp) not in seen:
                stack.append((inp, False))
    return order


def _stage_nest(t: Tensor, op: ComputeOp) -> Stmt:
    buf = t.buffer
    ivs = list(op.axes)
    out_idx: tuple[Expr, ...] = tuple(iv.var for iv in op.axes)
    init = None
    if isinstance(op.body, Reduce):
        red: Reduce = op.body
        ivs += list(red.axes)
        value: Expr = BinOp(_COMBINE[red.combiner], Load(buf, out_idx), red.source)
        init = Store(buf, out_idx, red.identity)
    else:
        value = op.body
    loop_vars = [Var(f"{op.name}_{iv.var.name}") for iv in ivs]
    block = Block(
        op.name,
        tuple(IterVar(iv.var, iv.extent, iv.reduce) for iv in ivs),
        tuple(loop_vars),
        Store(buf, out_idx, value),
        init,
    )
    stmt: Stmt = block
    for lv, iv in zip(reversed(loop_vars), reversed(ivs), strict=True):
        stmt = For(lv, iv.extent, ForKind.SERIAL, stmt)
    return stmt


def lower(name: str, params: Sequence[Tensor], output: Tensor) -> PrimFunc:
    """Build the naive PrimFunc computing `output` from `params` (output buffer is the last param)."""
    stages = stages_of(output)
    if not stages:
        raise ValueError(f"{name}: output is not computed")
    # unique stage names: block, buffer and loop names are how schedules address things
    used: dict[str, int] = {p.buffer.name: 1 for p in params}
    renames: dict[Buffer, Buffer] = {}
    for t in stages:
        n = t.op.name if t.op else t.buffer.name
        k = used.get(n, 0)
        used[n] = k + 1
        if k:
            new_name = f"{n}_{k}"
            renames[t.buffer] = Buffer(new_name, t.buffer.shape, t.buffer.dtype, t.buffer.scope)
    nests: list[Stmt] = []
    for t in stages:
        assert t.op is not None
        op = t.op
        if t.buffer in renames:
            op = ComputeOp(renames[t.buffer].name, op.axes, op.body, op.inputs, op.tag)
        nests.append(_stage_nest(t, op))
    body = seq(nests)
    for old, new in renames.items():
        body = replace_buffer(body, old, new)
    out_buf = renames.get(output.buffer, output.buffer)
    for t in reversed(stages):
        b = renames.get(t.buffer, t.buffer)
        if b is not out_buf:
            body = Allocate(b, body)
    return PrimFunc(name, (*(p.buffer for p in params), out_buf), body)
