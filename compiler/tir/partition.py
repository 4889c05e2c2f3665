"""Loop partitioning: split a loop where its conditions become constant.

Padding, pooling windows, concatenation and non-dividing splits guard loads and stores with
conditions on loop variables (`h - 1 >= 0`, `o * 8 + i < 114`). Those conditions hold everywhere
except near the ends of the loop, so the loop is split into a head, a body and a tail; in the body
every condition simplifies away (and so do the index clamps), leaving straight vector code.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from compiler.tir.ir import (
    Allocate,
    BinOp,
    Expr,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
    seq,
    substitute_stmt,
    walk_expr,
    walk_stmts,
)
from compiler.tir.simplify import affine_coeffs, bounds, simplify, simplify_stmt

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
MAX_COPIES = 3


def _conditions(s: Stmt) -> list[Expr]:
    """Comparisons in the conditions of selects and ifs under s."""
    out: list[Expr] = []

    def scan(e: Expr) -> None:
        for x in walk_expr(e):
            if isinstance(x, Select):
                out.extend(c for c in walk_expr(x.cond) if isinstance(c, BinOp) and c.op in _FLIP)

    def go(x: Stmt) -> None:
        if isinstance(x, For | Allocate):
            go(x.body)
        elif isinstance(x, Seq):
            for y in x.stmts:
                go(y)
        elif isinstance(x, IfThenElse):
            out.extend(c for c in walk_expr(x.cond) if isinstance(c, BinOp) and c.op in _FLIP)
            scan(x.cond)
            go(x.then)
            if x.orelse is not None:
                go(x.orelse)
        elif isinstance(x, Store):
            scan(x.value)
            for i in x.indices:
                scan(i)

    go(s)
    return out


def _inner_ranges(s: Stmt) -> dict[Var, int]:
    return {x.var: x.extent for x in walk_stmts(s) if isinstance(x, For)}


_TESTS: dict[str, Callable[[float], bool]] = {
    "<": lambda e: e < 0,
    "<=": lambda e: e <= 0,
    ">": lambda e: e > 0,
    ">=": lambda e: e >= 0,
    "==": lambda e: e == 0,
    "!=": lambda e: e != 0,
}


def _status(cond: BinOp, v: Var, extent: int, ranges: dict[Var, int]) -> list[bool | None] | None:
    """Per value of v: the condition's value when it holds for every value of the other variables,
    None where it depends on them. None overall when it cannot be analysed."""
    lin = affine_coeffs(BinOp("-", cond.a, cond.b))
    if lin is None or extent > 4096:
        return None
    terms, c = lin
    k = terms.get(v, 0)
    if k == 0 or any(v in set(walk_expr(a)) for a in terms if a is not v):
        return None
    rest: Expr = IntImm(c)
    for atom, coeff in terms.items():
        if atom is not v:
            rest = BinOp("+", rest, BinOp("*", atom, IntImm(coeff)))
    lo, hi = bounds(simplify(rest), ranges)
    if math.isinf(lo) or math.isinf(hi):
        return None
    test = _TESTS[cond.op]
    out: list[bool | None] = []
    for x in range(extent):
        a, b = k * x + lo, k * x + hi
        if cond.op in ("==", "!=") and a != b:
            out.append(None if a <= 0 <= b else test(a))
        else:
            out.append(test(a) if test(a) == test(b) else None)
    return out


def _partition_one(loop: For, outer: dict[Var, int]) -> Stmt:
    """Split `loop` around its longest run of iterations where every condition is one constant."""
    conds = [
        c
        for c in _conditions(loop.body)
        if isinstance(c, BinOp) and c.a.dtype.startswith("int") and loop.var in set(walk_expr(c))
    ]
    if not conds or loop.kind not in (ForKind.SERIAL,):
        return loop
    ranges = {**outer, **_inner_ranges(loop.body)}
    n = loop.extent
    statuses = [st for c in conds if (st := _status(c, loop.var, n, ranges)) is not None]
    if not statuses:
        return loop
    signature = [tuple(st[x] for st in statuses) for x in range(n)]
    best = (0, 0)
    x = 0
    while x < n:
        y = x
        while y < n and signature[y] == signature[x]:
            y += 1
        if None not in signature[x] and y - x > best[1] - best[0]:
            best = (x, y)
        x = y
    start, end = best
    if end - start < 2:
        return loop
    if start == 0 and end == n:  # decided everywhere already: just simplify
        return For(loop.var, n, loop.kind, simplify_stmt(loop.body, {**outer, loop.var: n}))
    pieces = []
    for p, q in ((0, start), (start, end), (end, n)):
        if q <= p:
            continue
        v = Var(loop.var.name if p == 0 else f"{loop.var.name}_p{p}")
        body = substitute_stmt(loop.body, {loop.var: BinOp("+", v, IntImm(p))})
        body = simplify_stmt(body, {**outer, v: q - p})
        pieces.append(For(v, q - p, loop.kind, body))
    return seq(pieces)


def partition_loops(s: Stmt, ranges: dict[Var, int] | None = None) -> Stmt:
    """Partition every serial loop (outermost first) whose conditions settle away from its ends."""
    ranges = ranges or {}
    if isinstance(s, For):
        return _descend(s, ranges)
    if isinstance(s, Seq):
        return seq([partition_loops(x, ranges) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, partition_loops(s.body, ranges))
    if isinstance(s, IfThenElse):
        return IfThenElse(
            s.cond,
            partition_loops(s.then, ranges),
            None if s.orelse is None else partition_loops(s.orelse, ranges),
        )
    return s


def _descend(f: For, ranges: dict[Var, int]) -> Stmt:
    part = _partition_one(f, ranges)
    if part is f:
        return For(f.var, f.extent, f.kind, partition_loops(f.body, {**ranges, f.var: f.extent}))
    assert isinstance(part, Seq | For)
    pieces = part.stmts if isinstance(part, Seq) else (part,)
    return seq(
        [
            For(p.var, p.extent, p.kind, partition_loops(p.body, {**ranges, p.var: p.extent}))
            if isinstance(p, For)
            else p
            for p in pieces
        ]
    )
