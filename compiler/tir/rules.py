"""Generic schedule rules shared by the op families' default schedules.

A kernel's blocks are tagged by their compute (elemwise, broadcast, injective, reduce, pad,
anchor...). The generic schedule inlines injective producers into their consumers, runs the
output nest in parallel over its outer loops, vectorizes its innermost loop and computes the
remaining producers (reductions) inside the parallel loop, per chunk of output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVarTuple

from compiler.errors import ScheduleError
from compiler.target import Target
from compiler.tir.ir import Block, Expr, For, Load, Store, Var, walk_expr, walk_stmts
from compiler.tir.legality import check_legal, lane_combine
from compiler.tir.simplify import simplify
from compiler.tir.trace import Schedule

INLINE_TAGS = ("elemwise", "broadcast", "injective", "pad")
# Handing work to the other cores costs microseconds even when their threads still spin (and tens
# of microseconds once they sleep, see compiler/codegen/parallel.c): below these sizes a kernel runs
# faster on one core. The tuner's "parallel" decisions revisit this per kernel.
MIN_PARALLEL_WORK = 1 << 15  # output elements of an elementwise/injective nest
MIN_PARALLEL_FLOPS = 1 << 20  # arithmetic of an anchor kernel (conv, matmul)
MIN_SHORT_VECTOR = 4  # an innermost loop narrower than a vector still runs as one from this extent
# a reduction computed inside the output's parallel loop may run at most this many times its own
# iterations: an iteration of that loop that covers only part of the reduction's result (a chunk of a
# long normalized row) would recompute all of it
MAX_REDUCTION_RECOMPUTE = 2

_Ts = TypeVarTuple("_Ts")


@dataclass(frozen=True)
class KernelInfo:
    """What a schedule needs to know about a lowered kernel besides its loops."""

    target: Target
    output_block: str
    anchor_block: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


def try_(fn: Callable[[*_Ts], object], *args: *_Ts) -> bool:
    """Apply a primitive if it is legal here; schedule rules are best-effort."""
    try:
        fn(*args)
        return True
    except ScheduleError:
        return False


def inline_injective(sch: Schedule, info: KernelInfo, keep: tuple[str, ...] = ()) -> None:
    """Inline every injective/elementwise block except the output and `keep`."""
    for name in list(sch.blocks()):
        if name == info.output_block or name in keep:
            continue
        if info.tags.get(name, "") in INLINE_TAGS:
            try_(sch.compute_inline, name)


def root_loops(sch: Schedule, block: str) -> list[For]:
    """The chain of loops directly above `block`, outermost first."""
    from compiler.tir.schedule import find_block

    path = find_block(sch.func, block)
    return [s for s in path if isinstance(s, For)]


def block_of(sch: Schedule, name: str) -> Block:
    for s in walk_stmts(sch.func.body):
        if isinstance(s, Block) and s.name == name:
            return s
    raise ScheduleError(f"no block {name!r}")


def store_of(b: Block) -> Store:
    """The store a block computes (lowering gives every block one; the primitives keep it)."""
    assert isinstance(b.body, Store), f"block {b.name!r} does not end in a store"
    return b.body


def _reduced_loops(b: Block) -> set[str]:
    """Names of the loops a block's reduction iterators are bound to."""
    pairs = zip(b.iter_vars, b.bindings, strict=True)
    return {v.name for iv, bnd in pairs if iv.reduce for v in vars_of(bnd)}


def parallel_vectorize(sch: Schedule, block: str, target: Target, spatial_only: bool = True) -> str | None:
    """Parallelize the outer spatial loops of `block` and vectorize its innermost spatial loop.

    Returns the parallel loop's name (None when the nest is too small to be worth threads).
    """
    loops = root_loops(sch, block)
    b = block_of(sch, block)
    reduce_loops = _reduced_loops(b)
    spatial = [f for f in loops if f.var.name not in reduce_loops]
    if not spatial:
        return None
    # vectorize the innermost spatial loop when it is innermost overall and wide enough
    lanes = target.lanes(b.body.buffer.dtype if hasattr(b.body, "buffer") else "float32")
    inner = spatial[-1]
    if inner is loops[-1] and inner.extent >= lanes:
        if inner.extent % lanes == 0:
            _, vi = sch.split(inner.var.name, [None, lanes])
            sch.vectorize(vi)
            spatial = [f for f in root_loops(sch, block) if f.var.name not in reduce_loops][:-1]
        elif inner.extent <= 64 and len(spatial) > 1:
            sch.vectorize(inner.var.name)
            spatial = spatial[:-1]
        else:  # predicated vectors: the last one is partly masked
            _, vi = sch.split(inner.var.name, [None, lanes])
            sch.vectorize(vi)
            spatial = [f for f in root_loops(sch, block) if f.var.name not in reduce_loops][:-1]
    elif inner is loops[-1] and MIN_SHORT_VECTOR <= inner.extent < lanes and len(spatial) > 1:
        # a short row (7 or 14 columns, a 12-token softmax) as one narrower vector, not lane by lane
        sch.vectorize(inner.var.name)
        spatial = spatial[:-1]
    total = 1
    for f in loops:
        if f.var.name not in reduce_loops:
            total *= f.extent
    if total < MIN_PARALLEL_WORK or not spatial:
        return None
    # fuse leading spatial loops (they are directly nested at the top) until enough iterations
    chain: list[For] = []
    extent = 1
    for f in spatial:
        if chain and f is not _child_for(chain[-1]):
            break
        chain.append(f)
        extent *= f.extent
        if extent >= 4 * target.cores:
            break
    name = chain[0].var.name if len(chain) == 1 else sch.fuse(*[f.var.name for f in chain])
    sch.parallel(name)
    return name


def _child_for(f: For) -> For | None:
    return f.body if isinstance(f.body, For) else None


def vars_of(e: Expr) -> list[Var]:
    """The variables an expression reads (a loop binding's loop vars, an index's iterators)."""
    return [x for x in walk_expr(e) if isinstance(x, Var)]


def place_producers(sch: Schedule, info: KernelInfo, loop: str | None) -> None:
    """Compute remaining non-output blocks at `loop` (consumers first); leave them where they are if
    that is not legal, e.g. a reduction whose result no iteration of a parallel `loop` owns (a
    softmax's sums across the parallel axis would be written by every iteration), or if it would
    repeat a reduction's work (`MAX_REDUCTION_RECOMPUTE`): a GroupNorm's one statistic per sample,
    computed inside a loop over chunks of the sample, would be summed again for every chunk."""
    if loop is None:
        return
    for name in reversed(sch.blocks()):
        if name == info.output_block:
            continue
        path_names = [f.var.name for f in root_loops(sch, name)]
        if loop in path_names:
            continue
        reduces = any(iv.reduce for iv in block_of(sch, name).iter_vars)
        before = _iterations(sch, name)
        try:
            with sch.attempt():
                sch.compute_at(name, loop)
                check_legal(sch.func)
                if reduces and _iterations(sch, name) > MAX_REDUCTION_RECOMPUTE * before:
                    raise ScheduleError(f"block {name!r} at loop {loop!r} would repeat its reduction")
        except ScheduleError:
            pass


def _iterations(sch: Schedule, block: str) -> int:
    """How many times `block` runs: the product of the extents of the loops around it."""
    count = 1
    for f in root_loops(sch, block):
        count *= f.extent
    return count


def plane_rows(
    sch: Schedule,
    anchor: str,
    consumer: str,
    loops: tuple[str, str, str, str],
    reduce: list[str],
    vw: int,
    rows: int,
    threads: bool,
    pad: str | None,
    target: Target,
) -> bool:
    """The plane-wise schedule of depthwise convs and pools: one (n, c) plane per parallel
    iteration, `rows` output rows x `vw` columns (one vector) per tile with the window loops
    `reduce` unrolled around them, the epilogue per tile; the padded input `pad` (if any) made per
    plane right before its use (decision pad_at). True when the pad was placed so."""
    ln, lc, loh, low = loops
    oho, ohi = sch.split(loh, [None, rows])
    owo, owv = sch.split(low, [None, vw])
    sch.reorder(ln, lc, oho, owo, *reduce, ohi, owv)
    outer = sch.fuse(ln, lc)  # one channel plane per iteration: its padded copy stays in cache
    if threads:
        sch.parallel(outer)
    for loop in reduce[-2:]:
        sch.unroll(loop)
    sch.unroll(ohi)
    sch.vectorize(owv)
    sch.reverse_compute_at(consumer, owo)
    sch.decompose_reduction(anchor, reduce[0])
    inner = root_loops(sch, consumer)[-1]
    if inner.extent <= 64:
        sch.vectorize(inner.var.name)
    if pad is None or sch.decide("pad_at", ["plane", "kernel"], "plane") != "plane":
        return False
    sch.set_scope(pad, "local")
    sch.compute_at(pad, outer)
    last = root_loops(sch, pad)[-1]
    _, pv = sch.split(last.var.name, [None, target.lanes()])
    sch.vectorize(pv)
    return True


def vectorize_row(sch: Schedule, block: str, target: Target) -> bool:
    """Vectorize a block's innermost loop when it is a kept (not reduced) axis: in vectors of the
    target's lanes (the last one masked when they do not divide it), or as one shorter vector for
    a row of MIN_SHORT_VECTOR up to a vector's lanes. True when vectorized."""
    loops = root_loops(sch, block)
    b = block_of(sch, block)
    if not loops or not isinstance(b.body, Store):
        return False
    reduced = _reduced_loops(b)
    inner = loops[-1]
    if inner.var.name in reduced:
        return vector_reduction(sch, block, target)
    if inner.kind.value != "serial":
        return False
    lanes = target.lanes(b.body.buffer.dtype)
    if inner.extent >= lanes:
        _, vector = sch.split(inner.var.name, [None, lanes])
        sch.vectorize(vector)
        return True
    if inner.extent >= MIN_SHORT_VECTOR:
        sch.vectorize(inner.var.name)
        return True
    return False


VECTORS_PER_STEP = 4  # a vector reduction's step: independent loads and adds before the combine


def vector_reduction(sch: Schedule, block: str, target: Target) -> bool:
    """Vectorize a block's innermost loop when it reduces along a contiguous row (a softmax's max
    and sum, a LayerNorm's moments): each step loads up to VECTORS_PER_STEP vectors (the last one
    masked), whose lanes code generation combines into the accumulator at once, where a serial
    loop waits out one add's latency per element. The init is hoisted out of the reduced loops
    first (legality: no init between lanes). True when vectorized."""
    loops = root_loops(sch, block)
    b = block_of(sch, block)
    store = b.body
    if not loops or not isinstance(store, Store) or lane_combine(store) is None:
        return False
    inner = loops[-1]
    reduced = _reduced_loops(b)
    row = [
        e
        for e in walk_expr(store.value)
        if isinstance(e, Load) and e.buffer is not store.buffer and e.indices
    ]
    along = {iv.var for iv, bnd in zip(b.iter_vars, b.bindings, strict=True) if inner.var in vars_of(bnd)}
    contiguous = any(along & set(vars_of(e.indices[-1])) for e in row)
    if inner.var.name not in reduced or inner.kind.value != "serial" or not contiguous:
        return False
    lanes = target.lanes(store.buffer.dtype)
    if inner.extent < MIN_SHORT_VECTOR:
        return False
    with sch.attempt():  # the init stays inside if the vectors cannot be
        if b.init is not None:
            sch.decompose_reduction(block, next(f.var.name for f in loops if f.var.name in reduced))
        if inner.extent >= lanes:
            width = lanes * min(VECTORS_PER_STEP, inner.extent // lanes)
            _, vector = sch.split(inner.var.name, [None, width])
            sch.vectorize(vector)
        else:
            sch.vectorize(inner.var.name)
    return True


def transposed_axis(b: Block) -> int | None:
    """The output axis that walks a transposed read's contiguous input axis, when the block is a
    transpose: it reads some buffer whose last index depends on output axes other than the
    innermost (the innermost of them, when several: a head and its channel), while the innermost
    axis indexes another of its dimensions (NCHW{b}c to NCHW: out[n, c, h, w] = x[n, c // b, h, w,
    c % b], axis 1). None when every read follows the output's rows (or the block is not a plain
    spatial nest)."""
    if not isinstance(b.body, Store) or any(iv.reduce for iv in b.iter_vars) or len(b.iter_vars) < 2:
        return None
    if any(not isinstance(bnd, Var) for bnd in b.bindings):
        return None
    inner = b.iter_vars[-1].var
    ranges = {iv.var: iv.extent for iv in b.iter_vars}
    for load in (x for x in walk_expr(b.body.value) if isinstance(x, Load) and x.indices):
        # a reshape's flat index names axes that cancel out: only what is left counts
        indices = [simplify(i, ranges) for i in load.indices]
        last = set(map(id, vars_of(indices[-1])))
        if id(inner) in last or not any(id(inner) in map(id, vars_of(i)) for i in indices[:-1]):
            continue
        drivers = [k for k, iv in enumerate(b.iter_vars[:-1]) if id(iv.var) in last]
        if drivers:  # several (a head and its channel): the innermost walks the contiguous axis
            return drivers[-1]
    return None


def tile_transposed_read(sch: Schedule, block: str, target: Target) -> None:
    """A transpose vectorized along the output's rows gathers each lane from its own input line,
    and a plane walked row after row comes back to each line once per element of it: the input is
    read from memory up to a vector's width of times. Splitting the output axis that walks the
    input's contiguous axis by a vector's width and moving that part just outside the output's
    innermost axis uses every element of a line while it is in L1 (the `transpose_tile` decision)."""
    b = block_of(sch, block)
    axis = transposed_axis(b)
    loops = root_loops(sch, block)
    if axis is None or len(loops) != len(b.iter_vars):
        return
    lanes = target.lanes(b.body.buffer.dtype if isinstance(b.body, Store) else "float32")
    if axis == len(loops) - 2:
        # already just outside the row: a row much longer than a vector walks as many lines (and
        # pages: attention's K^T reads one element per token row) per step of that axis; a
        # vector's width of the row at a time keeps them in L1 and the TLB
        row = loops[-1]
        if row.extent < 2 * lanes or not sch.decide("transpose_tile", [False, True], True):
            return
        outer, _ = sch.split(row.var.name, [None, lanes])
        names = [f.var.name for f in root_loops(sch, block)]
        sch.reorder(*names[:axis], outer, names[axis], names[-1])
        return
    extent = loops[axis].extent
    factor = min(lanes, extent)  # a width that does not divide the axis leaves a predicated last tile
    if factor < 2 or not sch.decide("transpose_tile", [False, True], True):
        return
    if extent == factor:
        inner = loops[axis].var.name
    else:
        _, inner = sch.split(loops[axis].var.name, [None, factor])
    names = [f.var.name for f in root_loops(sch, block)]
    rest = [n for n in names if n != inner]
    sch.reorder(*rest[:-1], inner, rest[-1])


def generic_schedule(sch: Schedule, info: KernelInfo) -> None:
    """Default schedule for kernels without a family-specific one. The producers placed inside the
    output's parallel loop run their rows as vectors (a softmax's exponentials: one call per vector,
    not per element)."""
    inline_injective(sch, info)
    tile_transposed_read(sch, info.output_block, info.target)
    par = parallel_vectorize(sch, info.output_block, info.target)
    place_producers(sch, info, par)
    # producers that could not move still run in parallel on their own
    for name in sch.blocks():
        if name == info.output_block:
            continue
        loops = root_loops(sch, name)
        if par is not None and any(f.var.name == par for f in loops):
            try_(vectorize_row, sch, name, info.target)
            continue
        if loops and loops[0].kind.value == "serial" and not any(f.kind.value == "parallel" for f in loops):
            try_(parallel_vectorize, sch, name, info.target)
        try_(vector_reduction, sch, name, info.target)
