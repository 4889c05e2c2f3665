"""Schedule primitives: pure functions PrimFunc -> PrimFunc that keep what the kernel computes.

Loops and blocks are addressed by their unique names, so a sequence of primitive applications
(a trace, see compiler.tir.trace) replays deterministically on the same workload. Every
primitive validates its arguments and raises ScheduleError naming the loop/block when it cannot
apply; the tuner treats that as an invalid candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Buffer,
    Expr,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IterVar,
    Layout,
    Load,
    PrimFunc,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
    children_of,
    map_stmt,
    replace_buffer,
    seq,
    substitute,
    substitute_stmt,
    walk_expr,
    walk_stmts,
)
from compiler.tir.legality import check_loop
from compiler.tir.simplify import affine_coeffs, bounds, simplify, simplify_stmt

# ------------------------------------------------------------------------------ tree helpers


def _path_to(root: Stmt, pred: Callable[[Stmt], bool]) -> list[Stmt] | None:
    """Ancestors-and-self path (root first) of the first statement satisfying pred."""
    stack: list[tuple[Stmt, list[Stmt]]] = [(root, [])]
    while stack:
        s, path = stack.pop()
        p = [*path, s]
        if pred(s):
            return p
        kids = children_of(s)
        stack.extend((k, p) for k in reversed(kids))
    return None


def find_loop(func: PrimFunc, name: str) -> list[Stmt]:
    path = _path_to(func.body, lambda s: isinstance(s, For) and s.var.name == name)
    if path is None:
        raise ScheduleError(f"no loop named {name!r} in {func.name}")
    return path


def find_block(func: PrimFunc, name: str) -> list[Stmt]:
    path = _path_to(func.body, lambda s: isinstance(s, Block) and s.name == name)
    if path is None:
        raise ScheduleError(f"no block named {name!r} in {func.name}")
    return path


def _replace(root: Stmt, target: Stmt, new: Stmt | None) -> Stmt:
    """Top-down identity replacement (new=None deletes target from its Seq)."""
    if root is target:
        if new is None:
            raise ScheduleError("cannot delete the root statement")
        return new
    if isinstance(root, For):
        return For(root.var, root.extent, root.kind, _replace(root.body, target, new))
    if isinstance(root, Allocate):
        return Allocate(root.buffer, _replace(root.body, target, new))
    if isinstance(root, Block):
        return Block(
            root.name,
            root.iter_vars,
            root.bindings,
            _replace(root.body, target, new),
            root.init,
            root.predicate,
        )
    if isinstance(root, IfThenElse):
        return IfThenElse(
            root.cond,
            _replace(root.then, target, new),
            None if root.orelse is None else _replace(root.orelse, target, new),
        )
    if isinstance(root, Seq):
        out: list[Stmt] = []
        for s in root.stmts:
            if s is target:
                if new is not None:
                    out.append(new)
            else:
                out.append(_replace(s, target, new))
        return seq(out)
    return root


def _contains(root: Stmt, target: Stmt) -> bool:
    return any(s is target for s in walk_stmts(root))


def loop_names(func: PrimFunc) -> list[str]:
    return [s.var.name for s in walk_stmts(func.body) if isinstance(s, For)]


def block_names(func: PrimFunc) -> list[str]:
    return [s.name for s in walk_stmts(func.body) if isinstance(s, Block)]


def _unique(func: PrimFunc, base: str) -> str:
    names = set(loop_names(func))
    if base not in names:
        return base
    k = 1
    while f"{base}{k}" in names:
        k += 1
    return f"{base}{k}"


def _blocks_under(s: Stmt) -> list[Block]:
    return [x for x in walk_stmts(s) if isinstance(x, Block)]


def _loops_of(path: Sequence[Stmt]) -> list[For]:
    return [s for s in path if isinstance(s, For)]


def _add_predicate(stmt: Stmt, cond: Expr) -> Stmt:
    def fs(s: Stmt) -> Stmt | None:
        if isinstance(s, Block):
            p = cond if s.predicate is None else BinOp("and", s.predicate, cond)
            return Block(s.name, s.iter_vars, s.bindings, s.body, s.init, p)
        return None

    return map_stmt(stmt, fs)


# ------------------------------------------------------------------------------ loop primitives


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


# ------------------------------------------------------------------------------ block primitives


def _root_nest(func: PrimFunc, block_path: list[Stmt]) -> Stmt:
    """The outermost statement that contains only this block (its own loop nest)."""
    block = block_path[-1]
    nest: Stmt = block
    for s in reversed(block_path[:-1]):
        if isinstance(s, For) and len(_blocks_under(s)) == 1:
            nest = s
        else:
            break
    del block
    return nest


def _allocated(func: PrimFunc) -> list[Buffer]:
    return [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]


def _remove_allocate(body: Stmt, buf: Buffer) -> Stmt:
    return map_stmt(body, lambda s: s.body if isinstance(s, Allocate) and s.buffer is buf else None)


def _written_buffer(block: Block) -> Buffer:
    stores = [s for s in walk_stmts(block.body) if isinstance(s, Store)]
    if len(stores) != 1:
        raise ScheduleError(f"block {block.name!r} must store exactly once")
    return stores[0].buffer


def compute_inline(func: PrimFunc, block: str) -> PrimFunc:
    path = find_block(func, block)
    b = path[-1]
    assert isinstance(b, Block)
    if any(iv.reduce for iv in b.iter_vars) or b.init is not None:
        raise ScheduleError(f"compute_inline: block {block!r} is a reduction")
    store = b.body
    if not isinstance(store, Store):
        raise ScheduleError(f"compute_inline: block {block!r} is not a single store")
    ivars = [iv.var for iv in b.iter_vars]
    if list(store.indices) != ivars:
        raise ScheduleError(f"compute_inline: block {block!r} does not store at its own iterators")
    buf = store.buffer
    if buf in func.params:
        raise ScheduleError(f"compute_inline: block {block!r} writes the kernel output {buf.name!r}")
    if any(isinstance(x, Load) and x.buffer is buf for x in walk_expr(store.value)):
        raise ScheduleError(f"compute_inline: block {block!r} reads its own output")
    value = store.value

    def fe(e: Expr) -> Expr | None:
        if isinstance(e, Load) and e.buffer is buf:
            return substitute(value, dict(zip(ivars, e.indices, strict=True)))
        return None

    nest = _root_nest(func, path)
    body = _replace(func.body, nest, None)
    body = map_stmt(body, lambda s: None, fe)
    body = _remove_allocate(body, buf)
    return PrimFunc(func.name, func.params, body, func.layouts)


def set_scope(func: PrimFunc, buffer: str, scope: str) -> PrimFunc:
    for buf in _allocated(func):
        if buf.name == buffer:
            return PrimFunc(
                func.name,
                func.params,
                replace_buffer(func.body, buf, buf.with_shape(buf.shape, scope)),
                func.layouts,
            )
    raise ScheduleError(f"set_scope: {buffer!r} is not a kernel-internal buffer of {func.name}")


def cache_write(func: PrimFunc, block: str, scope: str = "local") -> tuple[PrimFunc, str]:
    """Accumulate `block` into a new `scope` buffer; a write-back block copies it out."""
    path = find_block(func, block)
    b = path[-1]
    assert isinstance(b, Block)
    buf = _written_buffer(b)
    local = Buffer(f"{buf.name}_{scope}", buf.shape, buf.dtype, scope)
    new_b = Block(
        b.name,
        b.iter_vars,
        b.bindings,
        replace_buffer(b.body, buf, local),
        None if b.init is None else replace_buffer(b.init, buf, local),
        b.predicate,
    )
    wb_name = f"{buf.name}_wb"
    ivs = tuple(IterVar(Var(f"i{d}"), n) for d, n in enumerate(buf.shape))
    lvars = [Var(_unique(func, f"{wb_name}_i{d}")) for d in range(len(buf.shape))]
    wb: Stmt = Block(
        wb_name,
        ivs,
        tuple(lvars),
        Store(buf, tuple(iv.var for iv in ivs), Load(local, tuple(iv.var for iv in ivs))),
    )
    for lv, n in zip(reversed(lvars), reversed(buf.shape), strict=True):
        wb = For(lv, n, ForKind.SERIAL, wb)
    nest = _root_nest(func, path)
    new_nest = _replace(nest, b, new_b)
    body = _replace(func.body, nest, seq([new_nest, wb]))
    return PrimFunc(func.name, func.params, Allocate(local, body), func.layouts), wb_name


def _access_region(
    indices: Sequence[Expr], inner: dict[Var, int], where: str, outer: dict[Var, int] | None = None
) -> list[tuple[Expr, int, int]]:
    """Per dim: (base expr over outer vars, min offset, max offset) as inner vars range."""
    out = []
    for ix in indices:
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


def reverse_compute_at(func: PrimFunc, block: str, loop: str) -> PrimFunc:
    """Move consumer `block` under `loop`, computing what the producer wrote in one iteration."""
    where = f"reverse_compute_at({block}, {loop})"
    bpath = find_block(func, block)
    b = bpath[-1]
    assert isinstance(b, Block)
    _identity_block(b, where)
    lpath = find_loop(func, loop)
    lp = lpath[-1]
    assert isinstance(lp, For)
    if _contains(lp, b):
        raise ScheduleError(f"{where}: block is already under the loop")
    # which buffer links them: one the consumer reads and a block under loop writes
    producers = _blocks_under(lp)
    reads = {
        x.buffer
        for s in walk_stmts(b.body)
        if isinstance(s, Store)
        for x in walk_expr(s.value)
        if isinstance(x, Load)
    }
    linked = [(p, _written_buffer(p)) for p in producers if _written_buffer(p) in reads]
    if not linked:
        raise ScheduleError(f"{where}: no producer of the block's inputs under the loop")
    prod, buf = linked[0]
    # the consumer must read buf at exactly its iterators (elementwise relation)
    for s in walk_stmts(b.body):
        if isinstance(s, Store):
            for x in walk_expr(s.value):
                if (
                    isinstance(x, Load)
                    and x.buffer is buf
                    and list(x.indices) != [iv.var for iv in b.iter_vars]
                ):
                    raise ScheduleError(f"{where}: block reads {buf.name} other than elementwise")
    inner = _inner_ranges(lp)
    outer = _outer_ranges(lpath)
    regions = [
        _access_region(ix, inner, where, outer) for ix in _block_access_indices(prod, buf, loads=False)
    ]
    region = _union(regions, where)
    out_shape = _written_buffer(b).shape
    nest = _placed_nest(
        b, region, out_shape, {**_outer_ranges(lpath)}, lambda d: f"{block}_{b.iter_vars[d].var.name}"
    )
    old_nest = _root_nest(func, bpath)
    body = _replace(func.body, old_nest, None)
    lp2 = _find_loop_in(body, loop)
    body = _replace(body, lp2, For(lp2.var, lp2.extent, lp2.kind, seq([lp2.body, nest])))
    return PrimFunc(func.name, func.params, body, func.layouts)


def compute_at(func: PrimFunc, block: str, loop: str) -> PrimFunc:
    """Move producer `block` under `loop`, computing only what consumers there read."""
    where = f"compute_at({block}, {loop})"
    bpath = find_block(func, block)
    b = bpath[-1]
    assert isinstance(b, Block)
    buf = _identity_block(b, where, allow_reduce=True)
    lpath = find_loop(func, loop)
    lp = lpath[-1]
    assert isinstance(lp, For)
    if _contains(lp, b):
        raise ScheduleError(f"{where}: block is already under the loop")
    consumers = _blocks_under(lp)
    inside = {id(c) for c in consumers}
    for other in _blocks_under(func.body):
        if id(other) not in inside and other is not b and _block_access_indices(other, buf, loads=True):
            raise ScheduleError(f"{where}: block {other.name!r} outside the loop also reads {buf.name}")
    accesses = [ix for c in consumers for ix in _block_access_indices(c, buf, loads=True)]
    if not accesses:
        raise ScheduleError(f"{where}: nothing under the loop reads {buf.name}")
    inner = _inner_ranges(lp)
    region = _union([_access_region(ix, inner, where, _outer_ranges(lpath)) for ix in accesses], where)
    nest = _placed_nest(
        b, region, buf.shape, _outer_ranges(lpath), lambda d: f"{block}_{b.iter_vars[d].var.name}"
    )
    old_nest = _root_nest(func, bpath)
    body = _replace(func.body, old_nest, None)
    lp2 = _find_loop_in(body, loop)
    body = _replace(body, lp2, For(lp2.var, lp2.extent, lp2.kind, seq([nest, lp2.body])))
    return PrimFunc(func.name, func.params, body, func.layouts)


def _find_loop_in(body: Stmt, name: str) -> For:
    for s in walk_stmts(body):
        if isinstance(s, For) and s.var.name == name:
            return s
    raise ScheduleError(f"no loop named {name!r}")


def decompose_reduction(func: PrimFunc, block: str, loop: str) -> PrimFunc:
    """Hoist the block's init into its own block nest placed just before `loop`."""
    where = f"decompose_reduction({block}, {loop})"
    bpath = find_block(func, block)
    b = bpath[-1]
    assert isinstance(b, Block)
    if b.init is None:
        raise ScheduleError(f"{where}: block has no init")
    lpath = find_loop(func, loop)
    lp = lpath[-1]
    assert isinstance(lp, For)
    if not _contains(lp, b):
        raise ScheduleError(f"{where}: block is not under the loop")
    if len(_blocks_under(lp)) != 1:
        raise ScheduleError(f"{where}: the loop holds other blocks too")
    reduce_vars: set[Var] = set()
    spatial_vars: set[Var] = set()
    for iv, bnd in zip(b.iter_vars, b.bindings, strict=True):
        vs = {x for x in walk_expr(bnd) if isinstance(x, Var)}
        (reduce_vars if iv.reduce else spatial_vars).update(vs)
    if reduce_vars & spatial_vars:
        raise ScheduleError(f"{where}: a loop feeds both spatial and reduction iterators")
    # loops outside `loop` must not be reduction loops for a correct hoist
    for f in _loops_of(lpath[:-1]):
        if f.var in reduce_vars:
            raise ScheduleError(f"{where}: reduction loop {f.var.name!r} is outside {loop!r}")
    spatial = [(iv, bnd) for iv, bnd in zip(b.iter_vars, b.bindings, strict=True) if not iv.reduce]
    init_block = Block(
        f"{b.name}_init",
        tuple(IterVar(iv.var, iv.extent) for iv, _ in spatial),
        tuple(bnd for _, bnd in spatial),
        b.init,
        None,
        b.predicate,
    )

    def strip(s: Stmt) -> Stmt:
        if s is b:
            return init_block
        if isinstance(s, For):
            inner = strip(s.body)
            if s.var in reduce_vars:
                return inner
            return For(s.var, s.extent, s.kind, inner)
        if isinstance(s, Seq):
            return seq([strip(x) for x in s.stmts])
        return s

    init_nest = strip(lp)
    init_nest = _rename_loops(init_nest, "_init")
    new_b = Block(b.name, b.iter_vars, b.bindings, b.body, None, b.predicate)
    new_lp = _replace(lp, b, new_b)
    body = _replace(func.body, lp, seq([init_nest, new_lp]))
    return PrimFunc(func.name, func.params, body, func.layouts)


def _rename_loops(s: Stmt, suffix: str) -> Stmt:
    mapping = {x.var: Var(x.var.name + suffix) for x in walk_stmts(s) if isinstance(x, For)}
    s = substitute_stmt(s, mapping)

    def fs(x: Stmt) -> Stmt | None:
        if isinstance(x, For) and x.var in mapping:
            return For(mapping[x.var], x.extent, x.kind, x.body)
        return None

    return map_stmt(s, fs)


def pack_layout(func: PrimFunc, param: str, layout: Layout) -> PrimFunc:
    """Read constant parameter `param` in a packed layout (the compiler packs its data to match)."""
    buf = next((p for p in func.params if p.name == param), None)
    if buf is None or buf is func.params[-1]:
        raise ScheduleError(f"pack_layout: {param!r} is not an input parameter of {func.name}")
    if any(name == param for name, _ in func.layouts):
        raise ScheduleError(f"pack_layout: {param!r} is already packed")
    axes = sorted(a for a, _ in layout.splits)
    if any(a >= len(buf.shape) for a in axes) or sorted(layout.perm) != list(
        range(len(buf.shape) + len(axes))
    ):
        raise ScheduleError(f"pack_layout: layout {layout.to_json()} does not fit {param} {list(buf.shape)}")
    packed = Buffer(buf.name, layout.packed_shape(buf.shape), buf.dtype, buf.scope)
    body = replace_buffer(func.body, buf, packed, layout.map_indices)
    params = tuple(packed if p is buf else p for p in func.params)
    return PrimFunc(func.name, params, body, (*func.layouts, (param, layout)))


def _check_layout(where: str, buf: Buffer, layout: Layout) -> None:
    axes = sorted(a for a, _ in layout.splits)
    if any(a >= len(buf.shape) for a in axes) or sorted(layout.perm) != list(
        range(len(buf.shape) + len(axes))
    ):
        raise ScheduleError(f"{where}: layout {layout.to_json()} does not fit {buf.name} {list(buf.shape)}")


def cache_read(func: PrimFunc, block: str, buffer: str, layout: Layout) -> tuple[PrimFunc, str]:
    """Copy `buffer` into a packed layout at the start of the kernel; `block` reads the copy.

    The runtime counterpart of pack_layout for operands that are not constants (a GEMM's B).
    Returns the name of the new packing block.
    """
    where = f"cache_read({block}, {buffer})"
    path = find_block(func, block)
    b = path[-1]
    assert isinstance(b, Block)
    src = next((p for p in func.params if p.name == buffer), None)
    if src is None:
        src = next((x for x in _allocated(func) if x.name == buffer), None)
    if src is None:
        raise ScheduleError(f"{where}: no buffer named {buffer!r}")
    _check_layout(where, src, layout)
    shape = layout.packed_shape(src.shape)
    packed = Buffer(f"{buffer}_packed", shape, src.dtype, "global")
    name = f"{buffer}_pack"
    ivs = tuple(IterVar(Var(f"i{d}"), n) for d, n in enumerate(shape))
    # packed index -> original index: undo the permutation, then join each split pair
    split: list[Expr] = [IntImm(0)] * len(shape)
    for j, p in enumerate(layout.perm):
        split[p] = ivs[j].var
    factors = dict(layout.splits)
    orig: list[Expr] = []
    preds: list[Expr] = []
    k = 0
    for axis, dim in enumerate(src.shape):
        if axis in factors:
            e = BinOp("+", BinOp("*", split[k], IntImm(factors[axis])), split[k + 1])
            if -(-dim // factors[axis]) * factors[axis] != dim:
                preds.append(BinOp("<", e, IntImm(dim)))
            orig.append(e)
            k += 2
        else:
            orig.append(split[k])
            k += 1
    zero = FloatImm(0.0, src.dtype) if src.dtype.startswith("float") else IntImm(0, src.dtype)
    value: Expr = Load(
        src, tuple(BinOp("min", o, IntImm(d - 1)) for o, d in zip(orig, src.shape, strict=True))
    )
    for pred in preds:
        value = Select(pred, value, zero)
    lvars = [Var(_unique(func, f"{name}_i{d}")) for d in range(len(shape))]
    nest: Stmt = Block(name, ivs, tuple(lvars), Store(packed, tuple(iv.var for iv in ivs), value))
    for lv, n in zip(reversed(lvars), reversed(shape), strict=True):
        nest = For(lv, n, ForKind.SERIAL, nest)
    new_b = Block(
        b.name,
        b.iter_vars,
        b.bindings,
        replace_buffer(b.body, src, packed, layout.map_indices),
        b.init,
        b.predicate,
    )
    body = _replace(func.body, b, new_b)
    return PrimFunc(func.name, func.params, Allocate(packed, seq([nest, body])), func.layouts), name


def simplify_func(func: PrimFunc) -> PrimFunc:
    """Simplify index expressions using the loop ranges in scope."""
    return PrimFunc(func.name, func.params, simplify_stmt(func.body, {}), func.layouts)
