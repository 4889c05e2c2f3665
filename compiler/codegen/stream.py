"""Weight streaming: which constant a kernel prefetches ahead of its own reads, and in which loop.

A model's weights outgrow the last-level cache, so every run reads each kernel's weights from DRAM
once. A kernel that reuses a weight slice many times (a blocked conv: one slice of output channels
for every output row; Winograd's products: one position's matrix for every tile) first touches the
slice while it computes, and those first passes wait on DRAM while the rest of the slice's work
waits on nothing: the memory bus idles for most of the kernel and stalls it for the rest. The
hardware prefetchers follow a stream only once it has started, so they cannot fetch the next slice
while the current one is being reused.

So the code generator has the kernel fetch its own weights ahead (compiler/codegen/llvm.py,
`_stream_step`): one loop of the kernel (`stream_loop`) takes the steps; the indices of the loops
around a step, linearized from the parallel loop down, number it s of S, and step s prefetches the
lines from about s * L / S on (`stream_stride`: the steps together cover the weight's L lines),
shifted STREAM_LEAD_BYTES ahead. The kernels read their weights in about that order (slice after
slice, in the order of the parallel loop), so the prefetches run ahead of the reads by about the
lead, spread evenly over the kernel's arithmetic. The last steps reach past the weight's end by the
lead: an artifact lays its constants out in the order of the calls that read them
(compiler/planner.py), so those lines are the next kernels' first weights, which the next kernel
would otherwise wait for first (a kernel whose weights are smaller than the lead prefetches only
those). A prefetch never faults and never changes a result: where a kernel reads its weights in
another order, or a line lies outside any constant, the steps only fetch lines early, twice or for
nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from compiler.tir.ir import Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store, Var
from compiler.tir.legality import MAX_UNROLL_EXTENT

STREAM_LEAD_BYTES = 256 << 10
"""How far ahead of the even share of the reads the steps prefetch: about the next weight slices of
a blocked conv, half the private L2 of the smallest x86 core here (a lead of several times that was
slower: the lines were evicted before their reads)."""
STREAM_MAX_REUSE = 256
"""Flops per byte of the weight above which a kernel does not stream it."""
STREAM_MIN_WORK = 64
"""A step's loop must run at least this many stores (vector FMAs, mostly) per iteration: the step's
own instructions stay a small share, and the prefetches are spread thinly between the FMAs (a
coarser loop issues them in bursts that stall the core on its miss buffers). The bar is low enough
for the loop over input-channel blocks of a conv's register tile on a 256-bit core: its channel
blocks have half the lanes of a 512-bit core's, so the same loop holds half the FMAs, and a bar
that only the 512-bit loop clears moved the 256-bit kernels' steps a loop further out, where each
fetched dozens of lines at once and the weights' DRAM reads no longer overlapped the arithmetic."""
STREAM_SHARE = 0.5
"""The step's loop nest must hold at least this share of the kernel's stores: the prefetches spread
over the kernel's main work, not over a short pass such as a padding copy."""
LINE_BYTES = 64  # the cache line of every x86 core: the unit the steps count and prefetch
PREFETCH_LOCALITY = 1
"""llvm.prefetch's locality hint: 1 fetches into L2 (prefetcht2 on x86), not L1, which the register
tile's own operands keep busy."""


def stream_param(func: PrimFunc, const_params: Iterable[str], flops: int) -> str | None:
    """The constant parameter a kernel streams: its largest input constant, unless that is smaller
    than a cache line, the kernel reuses each of its bytes more than STREAM_MAX_REUSE times (`flops`
    per byte: the first touches are then a small share of the work, and the prefetches only take
    L2 from the reuse), or a parallel iteration's share of it outgrows the lead (the slice a thread
    reuses would not stay in L2 beside the lines streamed ahead)."""
    names = set(const_params)
    consts = [p for p in func.params[:-1] if p.name in names]
    if not consts:
        return None
    largest = max(consts, key=buffer_bytes)
    size = buffer_bytes(largest)
    if size < LINE_BYTES or flops > STREAM_MAX_REUSE * size:
        return None
    loop = stream_loop(func.body)
    if loop is None or size > STREAM_LEAD_BYTES * _parallel_extent(func.body, loop):
        return None
    return largest.name


def _loops_around(s: Stmt, loop: Var) -> tuple[For, ...] | None:
    """The loops enclosing `loop` in `s`, outermost first, `loop` last; None if it is not in `s`."""
    if isinstance(s, Seq):
        return next((found for x in s.stmts if (found := _loops_around(x, loop)) is not None), None)
    if isinstance(s, IfThenElse):
        found = _loops_around(s.then, loop)
        return found if found is not None or s.orelse is None else _loops_around(s.orelse, loop)
    if isinstance(s, Allocate):
        return _loops_around(s.body, loop)
    if isinstance(s, For):
        if s.var is loop:
            return (s,)
        inner = _loops_around(s.body, loop)
        return None if inner is None else (s, *inner)
    return None


def _from_parallel(s: Stmt, loop: Var) -> tuple[For, ...] | None:
    """The loops around `loop` from the nearest parallel one (or the outermost) down; None if
    `loop` is not in `s`."""
    loops = _loops_around(s, loop)
    if loops is None:
        return None
    starts = [i for i, f in enumerate(loops) if f.kind is ForKind.PARALLEL]
    return loops[starts[-1] if starts else 0 :]


def _parallel_extent(s: Stmt, loop: Var) -> int:
    """The extent of the parallel loop around `loop` (1 if none; 0 if `loop` is not in `s`)."""
    loops = _from_parallel(s, loop)
    if loops is None:
        return 0
    return loops[0].extent if loops[0].kind is ForKind.PARALLEL else 1


def buffer_bytes(buf: Buffer) -> int:
    return buf.size * np.dtype(buf.dtype).itemsize


def work(s: Stmt) -> int:
    """Stores one execution of `s` makes (a vectorized loop's body counts once: one vector)."""
    if isinstance(s, Store):
        return 1
    if isinstance(s, Seq):
        return sum(work(x) for x in s.stmts)
    if isinstance(s, For):
        return work(s.body) * (1 if s.kind is ForKind.VECTORIZED else s.extent)
    if isinstance(s, IfThenElse):
        return max(work(s.then), work(s.orelse) if s.orelse is not None else 0)
    if isinstance(s, Allocate):
        return work(s.body)
    return 0


def _is_loop(s: For) -> bool:
    """Whether code generation emits `s` as a loop (not unrolled copies, not a vector)."""
    if s.extent <= 1:
        return False
    if s.kind in (ForKind.SERIAL, ForKind.PARALLEL):
        return True
    return s.kind is ForKind.UNROLLED and s.extent > MAX_UNROLL_EXTENT


def stream_loop(body: Stmt) -> Var | None:
    """The loop whose iterations take the steps: among the emitted loops doing at least
    STREAM_MIN_WORK stores per iteration whose iterations together do at least STREAM_SHARE of the
    heaviest such loop's, the one iterating most (the finest steps over most of the work); None
    when no loop qualifies."""
    found: list[tuple[int, int, Var]] = []  # (stores in all its iterations, iterations, loop)

    def visit(s: Stmt, trips: int) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                visit(x, trips)
        elif isinstance(s, IfThenElse):
            visit(s.then, trips)
            if s.orelse is not None:
                visit(s.orelse, trips)
        elif isinstance(s, Allocate):
            visit(s.body, trips)
        elif isinstance(s, For) and s.kind is not ForKind.VECTORIZED:
            n = trips * s.extent
            per = work(s.body)
            if _is_loop(s) and per >= STREAM_MIN_WORK:
                found.append((n * per, n, s.var))
            visit(s.body, n)

    visit(body, 1)
    if not found:
        return None
    heaviest = max(w for w, _, _ in found)
    candidates = [(n, -i, v) for i, (w, n, v) in enumerate(found) if w >= STREAM_SHARE * heaviest]
    return max(candidates, key=lambda c: (c[0], c[1]))[2]


def stream_stride(lines: int, steps: int) -> tuple[int, int, int]:
    """(lines per step, scale, shift): step r of `steps` prefetches `lines per step` lines from line
    (r * scale) >> shift, so that the steps cover the `lines` once, about evenly (never less, at
    most twice), with a multiply and a shift by constants (a division by `steps` would hold its
    magic number in a register of the loop). Many lines per step: ceil(lines / steps) each, line
    r * that. Fewer lines than steps: one line each, line r >> shift, with the largest shift that
    still reaches every line ((steps >> shift) >= lines)."""
    if lines < 1 or steps < 1:
        raise ValueError(f"streaming needs a line and a step at least, got {lines} lines, {steps} steps")
    if lines >= steps:
        per = -(-lines // steps)
        return per, per, 0
    shift = 0
    while (steps >> (shift + 1)) >= lines:
        shift += 1
    return 1, 1, shift


def stream_steps(s: Stmt, loop: Var) -> int:
    """S, the steps a kernel's streaming takes: the iterations of `loop` and of the emitted loops
    around it from the nearest parallel loop down, as the code generator numbers them
    (compiler/codegen/llvm.py, `_stream_steps`); 0 if `loop` is not in `s`."""
    loops = _from_parallel(s, loop)
    if loops is None:
        return 0
    return math.prod(f.extent for f in loops if f.kind is not ForKind.VECTORIZED)


def stream_report(func: PrimFunc, const_params: Iterable[str], flops: int) -> dict[str, str | int] | None:
    """For the manifest: the constant a kernel streams, the loop taking the steps, the lead and how
    many lines each step prefetches (a handful spread between the FMAs; dozens at once stall the
    core on its miss buffers); None when it streams nothing."""
    weight = stream_param(func, const_params, flops)
    loop = stream_loop(func.body) if weight is not None else None
    if weight is None or loop is None:
        return None
    buffer = next(p for p in func.params if p.name == weight)
    lines, steps = buffer_bytes(buffer) // LINE_BYTES, stream_steps(func.body, loop)
    return {
        "weight": weight,
        "loop": loop.name,
        "lead_bytes": STREAM_LEAD_BYTES,
        "lines_per_step": stream_stride(lines, steps)[0],
    }
