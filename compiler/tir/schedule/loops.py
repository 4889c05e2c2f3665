"""Loop primitives: split, reorder, fuse, annotate (parallel, vectorize, unroll)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    BinOp,
    Expr,
    For,
    ForKind,
    IntImm,
    PrimFunc,
    Stmt,
    Var,
    substitute_stmt,
    walk_stmts,
)
from compiler.tir.legality import check_loop
from compiler.tir.schedule.tree import _add_predicate, _replace, _unique, find_loop


def split(func: PrimFunc, loop: str, factors: Sequence[int | None]) -> tuple[PrimFunc, list[str]]:
    path = find_loop(func, loop)
    f = path[-1]
    assert isinstance(f, For)
    if len(factors) < 2:
        raise ScheduleError(f"split of {loop!r} needs at least two factors")
    known = [x for x in factors if x is not None]
    if len(factors) - len(known) > 1 or any(x <= 0 for x in known):
        raise ScheduleError(f"split of {loop!r}: invalid factors {list(factors)}")
    prod = math.prod(known)
    facts = [x if x is not None else -(-f.extent // prod) for x in factors]
    total = math.prod(facts)
    if total < f.extent:
        raise ScheduleError(f"split of {loop!r} (extent {f.extent}) by {facts} does not cover it")
    names = [_unique(func, f"{loop}_{k}") for k in range(len(facts))]
    new_vars = [Var(n) for n in names]
    expr: Expr = new_vars[0]
    for v, fac in zip(new_vars[1:], facts[1:], strict=True):
        expr = BinOp("+", BinOp("*", expr, IntImm(fac)), v)
    body = substitute_stmt(f.body, {f.var: expr})
    if total != f.extent:
        body = _add_predicate(body, BinOp("<", expr, IntImm(f.extent)))
    for v, fac in zip(reversed(new_vars), reversed(facts), strict=True):
        body = For(v, fac, ForKind.SERIAL, body)
    # the outermost new loop keeps an existing parallel/vectorize annotation only if it was serial
    return PrimFunc(func.name, func.params, _replace(func.body, f, body), func.layouts), names


def _chain_from(top: For, count_names: set[str]) -> list[For]:
    chain: list[For] = []
    s: Stmt = top
    seen = 0
    while isinstance(s, For):
        chain.append(s)
        if s.var.name in count_names:
            seen += 1
            if seen == len(count_names):
                return chain
        s = s.body
    raise ScheduleError(f"loops {sorted(count_names)} are not one perfectly nested chain")


def reorder(func: PrimFunc, loops: Sequence[str]) -> PrimFunc:
    if len(set(loops)) != len(loops):
        raise ScheduleError(f"reorder: repeated loop in {list(loops)}")
    paths = [find_loop(func, n) for n in loops]
    top_path = min(paths, key=len)
    top = top_path[-1]
    assert isinstance(top, For)
    chain = _chain_from(top, set(loops))
    positions = [i for i, f in enumerate(chain) if f.var.name in set(loops)]
    by_name = {f.var.name: f for f in chain}
    new_chain = list(chain)
    for pos, name in zip(positions, loops, strict=True):
        new_chain[pos] = by_name[name]
    inner = chain[-1].body
    body: Stmt = inner
    for f in reversed(new_chain):
        body = For(f.var, f.extent, f.kind, body)
    return PrimFunc(func.name, func.params, _replace(func.body, top, body), func.layouts)


def fuse(func: PrimFunc, loops: Sequence[str]) -> tuple[PrimFunc, str]:
    if len(loops) < 2:
        raise ScheduleError("fuse needs at least two loops")
    top = find_loop(func, loops[0])[-1]
    assert isinstance(top, For)
    chain: list[For] = []
    s: Stmt = top
    for name in loops:
        if not (isinstance(s, For) and s.var.name == name):
            raise ScheduleError(f"fuse: loops {list(loops)} are not directly nested in this order")
        chain.append(s)
        s = s.body
    name = _unique(func, "_".join(loops) + "_f")
    v = Var(name)
    extent = math.prod(f.extent for f in chain)
    mapping: dict[Var, Expr] = {}
    stride = extent
    for f in chain:
        stride //= f.extent
        e: Expr = BinOp("//", v, IntImm(stride)) if stride != 1 else v
        mapping[f.var] = BinOp("%", e, IntImm(f.extent)) if f is not chain[0] else e
    body = substitute_stmt(chain[-1].body, mapping)
    new = For(v, extent, ForKind.SERIAL, body)
    return PrimFunc(func.name, func.params, _replace(func.body, top, new), func.layouts), name


def annotate(func: PrimFunc, loop: str, kind: ForKind) -> PrimFunc:
    f = find_loop(func, loop)[-1]
    assert isinstance(f, For)
    if kind is ForKind.PARALLEL:
        for s in walk_stmts(f.body):
            if isinstance(s, For) and s.kind is ForKind.PARALLEL:
                raise ScheduleError(f"parallel loop {loop!r} would contain parallel loop {s.var.name!r}")
    if kind is ForKind.VECTORIZED and f.extent > 64:
        raise ScheduleError(f"vectorize: loop {loop!r} extent {f.extent} is too long (max 64)")
    new = For(f.var, f.extent, kind, f.body)
    if kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
        check_loop(func, new)  # refused here, at the primitive that would break the kernel
    return PrimFunc(func.name, func.params, _replace(func.body, f, new), func.layouts)
