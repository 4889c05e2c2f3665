"""Block primitives: inline, scopes and caches, placement at a loop (compute_at,
reverse_compute_at) and reduction decomposition."""

from __future__ import annotations

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    Allocate,
    Block,
    Buffer,
    Expr,
    For,
    ForKind,
    IterVar,
    Load,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    Var,
    map_stmt,
    replace_buffer,
    seq,
    substitute,
    substitute_stmt,
    walk_expr,
    walk_stmts,
)
from compiler.tir.schedule.regions import (
    _access_region,
    _block_access_indices,
    _identity_block,
    _inner_ranges,
    _outer_ranges,
    _placed_nest,
    _union,
)
from compiler.tir.schedule.tree import (
    _blocks_under,
    _contains,
    _loops_of,
    _replace,
    _unique,
    find_block,
    find_loop,
)


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
