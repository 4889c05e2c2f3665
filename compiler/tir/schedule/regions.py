"""What a block reads and writes inside a loop: access regions, and the nest that computes a
producer's region at a loop (compute_at / reverse_compute_at place it with them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    BinOp,
    Block,
    Buffer,
    Expr,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Load,
    Stmt,
    Store,
    Var,
    substitute,
    walk_expr,
    walk_stmts,
)
from compiler.tir.simplify import affine_coeffs, bounds, simplify


def _access_region(
    indices: Sequence[Expr], inner: dict[Var, int], where: str, outer: dict[Var, int] | None = None
) -> list[tuple[Expr, int, int]]:
    """Per dim: (base expr over outer vars, min offset, max offset) as inner vars range."""
    out = []
    known = {**(outer or {}), **inner}
    for ix in indices:
        # with the loops' ranges, (o * m + i) // m is o when 0 <= i < m: tiled reads become affine
        ix = simplify(ix, known)
        lin = affine_coeffs(ix)
        if lin is None:
            raise ScheduleError(f"{where}: index {ix} is not affine")
        terms, c = lin
        base_terms: dict[Expr, int] = {}
        lo = hi = c
        for atom, k in terms.items():
            if isinstance(atom, Var) and atom in inner:
                ext = inner[atom]
                lo += min(0, k * (ext - 1))
                hi += max(0, k * (ext - 1))
            elif (span := _inner_span(atom, inner)) is not None:
                lo += min(k * span[0], k * span[1])
                hi += max(k * span[0], k * span[1])
            else:
                if any(isinstance(x, Var) and x in inner for x in walk_expr(atom)):
                    raise ScheduleError(f"{where}: index {ix} is not affine in the inner loops")
                base_terms[atom] = k
        base = simplify(_lin_expr(base_terms), outer or {})
        out.append((base, lo, hi))
    return out


def _inner_span(atom: Expr, inner: dict[Var, int]) -> tuple[int, int] | None:
    """(min, max) of `x // c` or `x % c` when x is affine in inner loop variables alone and never
    negative (a window tap dealt into phases: (rx * d) // s, (rx * d) % s); None otherwise."""
    if not (isinstance(atom, BinOp) and atom.op in ("//", "%") and isinstance(atom.b, IntImm)):
        return None
    c = atom.b.value
    lin = affine_coeffs(atom.a)
    if lin is None or c <= 0 or not all(isinstance(v, Var) and v in inner for v in lin[0]):
        return None
    terms, const = lin
    steps = [(k, inner[v]) for v, k in terms.items() if isinstance(v, Var)]  # all of them: checked above
    lo = const + sum(min(0, k * (ext - 1)) for k, ext in steps)
    hi = const + sum(max(0, k * (ext - 1)) for k, ext in steps)
    if lo < 0:
        return None
    if atom.op == "//":
        return lo // c, hi // c
    return (lo, hi) if hi < c else (0, c - 1)


def _lin_expr(terms: dict[Expr, int]) -> Expr:
    e: Expr = IntImm(0)
    for atom, k in terms.items():
        e = BinOp("+", e, atom if k == 1 else BinOp("*", atom, IntImm(k)))
    return e


def _block_access_indices(b: Block, buf: Buffer, loads: bool) -> list[tuple[Expr, ...]]:
    mapping = {iv.var: bnd for iv, bnd in zip(b.iter_vars, b.bindings, strict=True)}
    out = []
    for s in walk_stmts(b.body):
        if not loads and isinstance(s, Store) and s.buffer is buf:
            out.append(tuple(substitute(i, mapping) for i in s.indices))
        exprs: list[Expr] = []
        if isinstance(s, Store):
            exprs = [s.value, *s.indices]
        elif isinstance(s, IfThenElse):
            exprs = [s.cond]
        if loads:
            for e in exprs:
                for x in walk_expr(e):
                    if isinstance(x, Load) and x.buffer is buf:
                        out.append(tuple(substitute(i, mapping) for i in x.indices))
    return out


def _union(regions: list[list[tuple[Expr, int, int]]], where: str) -> list[tuple[Expr, int, int]]:
    first = regions[0]
    out = []
    for d in range(len(first)):
        base = first[d][0]
        lo, hi = first[d][1], first[d][2]
        for r in regions[1:]:
            if r[d][0] != base:
                raise ScheduleError(f"{where}: accesses disagree on their base along dim {d}")
            lo, hi = min(lo, r[d][1]), max(hi, r[d][2])
        out.append((base, lo, hi))
    return out


def _inner_ranges(loop: For) -> dict[Var, int]:
    return {s.var: s.extent for s in walk_stmts(loop.body) if isinstance(s, For)}


def _placed_nest(
    b: Block,
    region: list[tuple[Expr, int, int]],
    shape: Sequence[int],
    outer_ranges: dict[Var, int],
    name_of: Callable[[int], str],
) -> Stmt:
    """A new nest running block b (writing buf[spatial iterators]) over `region` of its output.

    Reduction iterators of b get full-extent loops inside the spatial ones.
    """
    if b.predicate is not None:  # it would refer to the block's old loops
        raise ScheduleError(f"block {b.name!r} has a predicate and cannot be moved")
    spatial = [k for k, iv in enumerate(b.iter_vars) if not iv.reduce]
    reduce_ = [k for k, iv in enumerate(b.iter_vars) if iv.reduce]
    lvars = [Var(name_of(k)) for k in spatial]
    rvars = [Var(name_of(k)) for k in reduce_]
    bindings: list[Expr] = [IntImm(0)] * len(b.iter_vars)
    preds: list[Expr] = []
    ranges = dict(outer_ranges)
    for d, (k, (base, lo, hi), v) in enumerate(zip(spatial, region, lvars, strict=True)):
        ranges[v] = hi - lo + 1
        bnd = simplify(BinOp("+", base, BinOp("+", v, IntImm(lo))), ranges)
        bindings[k] = bnd
        b0, b1 = bounds(bnd, ranges)
        if b0 < 0:
            preds.append(BinOp(">=", bnd, IntImm(0)))
        if b1 > shape[d] - 1:
            preds.append(BinOp("<", bnd, IntImm(shape[d])))
    for k, v in zip(reduce_, rvars, strict=True):
        bindings[k] = v
    pred: Expr | None = None
    for p in preds:
        pred = p if pred is None else BinOp("and", pred, p)
    nb: Stmt = Block(b.name, b.iter_vars, tuple(bindings), b.body, b.init, pred)
    for k, v in zip(reversed(reduce_), reversed(rvars), strict=True):
        nb = For(v, b.iter_vars[k].extent, ForKind.SERIAL, nb)
    for v, (_, lo, hi) in zip(reversed(lvars), reversed(region), strict=True):
        nb = For(v, hi - lo + 1, ForKind.SERIAL, nb)
    return nb


def _identity_block(b: Block, where: str, allow_reduce: bool = False) -> Buffer:
    """The buffer b writes at exactly its spatial iterators (what moving a block requires)."""
    if (not allow_reduce and any(iv.reduce for iv in b.iter_vars)) or not isinstance(b.body, Store):
        raise ScheduleError(f"{where}: block {b.name!r} must be a spatial single-store block")
    if list(b.body.indices) != [iv.var for iv in b.iter_vars if not iv.reduce]:
        raise ScheduleError(f"{where}: block {b.name!r} must store at its own iterators")
    return b.body.buffer


def _outer_ranges(path: Sequence[Stmt]) -> dict[Var, int]:
    return {s.var: s.extent for s in path if isinstance(s, For)}
