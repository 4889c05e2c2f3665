"""Scheduled PrimFunc -> plain loop program for code generation.

1. Blocks become their bodies with iterators replaced by bindings; a block's init runs under
   "all reduction iterators are 0"; predicates become ifs. Steps of a sum of products that would
   only multiply zero padding are guarded off (compiler/tir/padding_steps.py).
2. Kernel-internal buffers are allocated at the innermost loop that holds all their accesses,
   and `local` buffers shrink to the region touched there (a register tile stays a tile).
"""

from __future__ import annotations

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Buffer,
    Expr,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Load,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    Var,
    map_stmt,
    seq,
    substitute_stmt,
    walk_expr,
    walk_stmts,
)
from compiler.tir.padding_steps import skip_padding_steps, zero_padded
from compiler.tir.partition import partition_loops
from compiler.tir.schedule import _access_region, simplify_func
from compiler.tir.simplify import bounds


def _unblock(s: Stmt) -> Stmt | None:
    if not isinstance(s, Block):
        return None
    mapping = {iv.var: b for iv, b in zip(s.iter_vars, s.bindings, strict=True)}
    body = substitute_stmt(s.body, mapping)
    if s.init is not None:
        conds = [
            BinOp("==", b, IntImm(0)) for iv, b in zip(s.iter_vars, s.bindings, strict=True) if iv.reduce
        ]
        init = substitute_stmt(s.init, mapping)
        if conds:
            c: Expr = conds[0]
            for x in conds[1:]:
                c = BinOp("and", c, x)
            body = seq([IfThenElse(c, init), body])
        else:
            body = seq([init, body])
    if s.predicate is not None:
        body = IfThenElse(s.predicate, body)
    return body


def _in_bounds(s: Stmt, ranges: dict[Var, int]) -> bool:
    """Whether every store of s goes to a local buffer and every load of a non-local buffer stays
    inside it for all values of the loops in `ranges`."""
    for x in walk_stmts(s):
        if isinstance(x, Block | For | IfThenElse | Allocate):
            return False
        if isinstance(x, Store):
            if x.buffer.scope != "local":
                return False
            exprs = (x.value, *x.indices)
            for e in exprs:
                for ld in walk_expr(e):
                    if not isinstance(ld, Load) or ld.buffer.scope == "local":
                        continue
                    for i, d in zip(ld.indices, ld.buffer.shape, strict=True):
                        lo, hi = bounds(i, ranges)
                        if lo < 0 or hi > d - 1:
                            return False
    return True


def relax_predicates(s: Stmt, ranges: dict[Var, int] | None = None) -> Stmt:
    """Drop the predicate of blocks that only write a register tile and only read in bounds.

    A non-dividing split guards its partial tile with a predicate; in an accumulation into a
    register tile (whose compacted allocation covers the whole tile) the guard is not needed when
    every operand read stays inside its buffer (a zero-padded packed panel, say) -- and keeping it
    makes every accumulator update a masked memory access instead of a register. Only the stores
    to real buffers keep their guards.
    """
    ranges = ranges or {}
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, relax_predicates(s.body, {**ranges, s.var: s.extent}))
    if isinstance(s, Seq):
        return seq([relax_predicates(x, ranges) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, relax_predicates(s.body, ranges))
    if isinstance(s, IfThenElse):
        return IfThenElse(
            s.cond,
            relax_predicates(s.then, ranges),
            None if s.orelse is None else relax_predicates(s.orelse, ranges),
        )
    if isinstance(s, Block) and s.predicate is not None:
        mapping = {iv.var: b for iv, b in zip(s.iter_vars, s.bindings, strict=True)}
        parts = [substitute_stmt(p, mapping) for p in [s.body] + ([s.init] if s.init is not None else [])]
        if all(_in_bounds(p, ranges) for p in parts):
            return Block(s.name, s.iter_vars, s.bindings, s.body, s.init, None)
        kept = _needed_conjuncts(s.predicate, parts, ranges)
        if len(kept) < len(_conjuncts(s.predicate)):
            pred = None
            for k in kept:
                pred = k if pred is None else BinOp("and", pred, k)
            return Block(s.name, s.iter_vars, s.bindings, s.body, s.init, pred)
    return s


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _vars(e: Expr) -> set[Var]:
    return {x for x in walk_expr(e) if isinstance(x, Var)}


def _needed_conjuncts(pred: Expr, parts: list[Stmt], ranges: dict[Var, int]) -> list[Expr]:
    """The conjuncts of the predicate of a block that only writes a register tile that it needs.

    Two non-dividing splits guard one block with one conjunction: a tile of channel blocks over a
    padded last group (`ocb_0 * 3 + ocb_1 < 5`, the reads of a zero-padded packed weight in bounds
    everywhere) and a row's last, partial tile of columns (`ow_0 * 4 + ow_1 < 15`, whose input reads
    past the row end would leave the buffer). A conjunct can go when its variables appear in no other
    conjunct (the iterations it admits are then the other conjuncts' times its own variables' whole
    ranges) and every index of a read that its variables take part in stays in bounds over those
    ranges (the other indices take the same values as under the guard)."""
    stmts = [x for p in parts for x in walk_stmts(p)]
    if any(isinstance(x, Block | For | IfThenElse | Allocate) for x in stmts) or any(
        isinstance(x, Store) and x.buffer.scope != "local" for x in stmts
    ):
        return _conjuncts(pred)
    loads = [
        ld
        for x in stmts
        if isinstance(x, Store)
        for e in (x.value, *x.indices)
        for ld in walk_expr(e)
        if isinstance(ld, Load) and ld.buffer.scope != "local"
    ]
    kept = _conjuncts(pred)
    for c in list(kept):
        own = _vars(c)
        rest = set().union(*(_vars(k) for k in kept if k is not c))
        if not own or own & rest:
            continue
        dims = [
            (i, d) for ld in loads for i, d in zip(ld.indices, ld.buffer.shape, strict=True) if own & _vars(i)
        ]
        if all(lo >= 0 and hi <= d - 1 for i, d in dims for lo, hi in [bounds(i, ranges)]):
            kept.remove(c)
    return kept


def _accesses(
    s: Stmt, path: tuple[For, ...], out: dict[Buffer, list[tuple[tuple[For, ...], tuple[Expr, ...]]]]
) -> None:
    def exprs(e: Expr) -> None:
        for x in walk_expr(e):
            if isinstance(x, Load):
                out.setdefault(x.buffer, []).append((path, x.indices))

    if isinstance(s, For):
        _accesses(s.body, (*path, s), out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _accesses(x, path, out)
    elif isinstance(s, Allocate):
        _accesses(s.body, path, out)
    elif isinstance(s, IfThenElse):
        exprs(s.cond)
        _accesses(s.then, path, out)
        if s.orelse is not None:
            _accesses(s.orelse, path, out)
    elif isinstance(s, Store):
        out.setdefault(s.buffer, []).append((path, s.indices))
        exprs(s.value)
        for i in s.indices:
            exprs(i)


def _strip_allocs(s: Stmt, found: list[Buffer]) -> Stmt:
    def fs(x: Stmt) -> Stmt | None:
        if isinstance(x, Allocate):
            found.append(x.buffer)
            return x.body
        return None

    return map_stmt(s, fs)


def _vector_last(uses: list[tuple[tuple[For, ...], tuple[Expr, ...]]], ndim: int) -> list[int]:
    """Dim order for a compacted local buffer: dims indexed by a vectorized loop go last, so
    vector accesses to a register tile are contiguous."""
    score = [0] * ndim
    for path, ix in uses:
        vec = [f.var for f in path if f.kind is ForKind.VECTORIZED]
        for d, i in enumerate(ix):
            if any(x in vec for x in walk_expr(i) if isinstance(x, Var)):
                score[d] += 1
    return sorted(range(ndim), key=lambda d: (score[d] > 0, d))


def _compacted(
    buf: Buffer, uses: list[tuple[tuple[For, ...], tuple[Expr, ...]]], lca: tuple[For, ...]
) -> list[tuple[Expr, int, int]]:
    """Per dim of `buf`, allocated inside the loops `lca`: (base over those loops, lowest and highest
    offset) of what its accesses touch in one iteration of them. ScheduleError when an access is not
    affine or two accesses disagree on a base."""
    regions = []
    for p, ix in uses:
        inner = {f.var: f.extent for f in p[len(lca) :]}
        outer = {f.var: f.extent for f in lca}
        regions.append(_access_region(ix, inner, f"allocation of {buf.name}", outer))
    dims = []
    for d in range(len(buf.shape)):
        base = regions[0][d][0]
        if any(r[d][0] != base for r in regions):
            raise ScheduleError(f"buffer {buf.name}: accesses disagree along dim {d}")
        dims.append((base, min(r[d][1] for r in regions), max(r[d][2] for r in regions)))
    return dims


def place_allocations(func: PrimFunc) -> PrimFunc:
    buffers: list[Buffer] = []
    body = _strip_allocs(func.body, buffers)
    acc: dict[Buffer, list[tuple[tuple[For, ...], tuple[Expr, ...]]]] = {}
    _accesses(body, (), acc)
    at_loop: dict[int, list[Buffer]] = {}
    root: list[Buffer] = []
    remap: dict[Buffer, tuple[Buffer, list[tuple[Expr, int, int]]]] = {}
    for buf in buffers:
        uses = acc.get(buf, [])
        if not uses:
            continue
        lca: tuple[For, ...] = uses[0][0]
        for p, _ in uses[1:]:
            k = 0
            while k < min(len(lca), len(p)) and lca[k] is p[k]:
                k += 1
            lca = lca[:k]
        if buf.scope == "local":
            dims = _compacted(buf, uses, lca)
        elif lca:
            # a producer's buffer computed inside a loop (a row's statistics inside the parallel
            # loop over rows) is allocated per iteration: only the part one iteration uses, which
            # is small enough for the stack, not a whole workspace allocation each time
            try:
                dims = _compacted(buf, uses, lca)
            except ScheduleError:
                dims = None
        else:
            dims = None
        if dims is not None:
            order = _vector_last(uses, len(dims))
            new = Buffer(buf.name, tuple(dims[d][2] - dims[d][1] + 1 for d in order), buf.dtype, buf.scope)
            remap[buf] = (new, [(dims[d][0], dims[d][1], d) for d in order])
            buf = new
        if lca:
            at_loop.setdefault(id(lca[-1]), []).append(buf)
        else:
            root.append(buf)

    def remapped(ix: tuple[Expr, ...], offs: list[tuple[Expr, int, int]]) -> tuple[Expr, ...]:
        return tuple(BinOp("-", ix[d], BinOp("+", b, IntImm(lo))) for b, lo, d in offs)

    def fe(e: Expr) -> Expr | None:
        if isinstance(e, Load) and e.buffer in remap:
            new, offs = remap[e.buffer]
            return Load(new, remapped(e.indices, offs))
        return None

    def fs(x: Stmt) -> Stmt | None:
        if isinstance(x, Store) and x.buffer in remap:
            new, offs = remap[x.buffer]
            return Store(new, remapped(x.indices, offs), x.value)
        return None

    def place(s: Stmt) -> Stmt:
        if isinstance(s, For):
            inner = place(s.body)
            for buf in at_loop.get(id(s), []):
                inner = Allocate(buf, inner)
            return For(s.var, s.extent, s.kind, inner)
        if isinstance(s, Seq):
            return seq([place(x) for x in s.stmts])
        if isinstance(s, IfThenElse):
            return IfThenElse(s.cond, place(s.then), None if s.orelse is None else place(s.orelse))
        return s

    body = place(body)
    for buf in root:
        body = Allocate(buf, body)
    body = map_stmt(body, fs, fe)
    return PrimFunc(func.name, func.params, body, func.layouts)


def flatten(func: PrimFunc) -> PrimFunc:
    padded = zero_padded(func.body)
    body = map_stmt(relax_predicates(func.body), _unblock)
    body = skip_padding_steps(body, padded)
    out = simplify_func(PrimFunc(func.name, func.params, body, func.layouts))
    # allocations are placed before loops are partitioned: a register tile stays one tile in
    # every copy of a partitioned loop (a row tail) instead of spanning all of them
    out = place_allocations(out)
    out = PrimFunc(out.name, out.params, partition_loops(out.body), out.layouts)
    return simplify_func(out)


def free_vars(s: Stmt) -> set[Var]:
    """Vars used in s but not bound by a loop inside it."""
    used: set[Var] = set()
    bound: set[Var] = set()
    for x in walk_stmts(s):
        exprs: tuple[Expr, ...] = ()
        if isinstance(x, For):
            bound.add(x.var)
        elif isinstance(x, IfThenElse):
            exprs = (x.cond,)
        elif isinstance(x, Store):
            exprs = (x.value, *x.indices)
        for e in exprs:
            used.update(v for v in walk_expr(e) if isinstance(v, Var))
    return used - bound
