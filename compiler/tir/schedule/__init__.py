"""Schedule primitives: pure functions PrimFunc -> PrimFunc that keep what the kernel computes.

Loops and blocks are addressed by their unique names, so a sequence of primitive applications
(a trace, see compiler.tir.trace) replays deterministically on the same workload. Every
primitive validates its arguments and raises ScheduleError naming the loop/block when it cannot
apply; the tuner treats that as an invalid candidate.

By what they act on: `loops` (split, reorder, fuse, annotate), `blocks` (compute_inline, set_scope,
cache_write, compute_at, reverse_compute_at, decompose_reduction), `layouts` (pack_layout,
cache_read); `regions` computes what a block touches inside a loop, `tree` finds and replaces
statements.
"""

from __future__ import annotations

from compiler.tir.ir import PrimFunc
from compiler.tir.schedule.blocks import (
    cache_write,
    compute_at,
    compute_inline,
    decompose_reduction,
    reverse_compute_at,
    set_scope,
)
from compiler.tir.schedule.layouts import cache_read, pack_layout
from compiler.tir.schedule.loops import annotate, fuse, reorder, split
from compiler.tir.schedule.regions import _access_region
from compiler.tir.schedule.tree import block_names, find_block, find_loop, loop_names
from compiler.tir.simplify import simplify_stmt


def simplify_func(func: PrimFunc) -> PrimFunc:
    """Simplify index expressions using the loop ranges in scope."""
    return PrimFunc(func.name, func.params, simplify_stmt(func.body, {}), func.layouts)


__all__ = [
    "_access_region",
    "annotate",
    "block_names",
    "cache_read",
    "cache_write",
    "compute_at",
    "compute_inline",
    "decompose_reduction",
    "find_block",
    "find_loop",
    "fuse",
    "loop_names",
    "pack_layout",
    "reorder",
    "reverse_compute_at",
    "set_scope",
    "simplify_func",
    "split",
]
