"""Skip the steps of a sum of products that only multiply zero padding.

A padded input is a buffer whose producer writes `select(inside, x, 0)`: zero outside a box of its
indices. A convolution sums products of it with weights, and a step of a kernel-window loop whose
every read lands in the padding adds nothing. On a dilated conv over a small plane most steps are
such: a 3x3 conv of rate 12 over 14x14 reads input for under a fifth of its (output, tap) pairs.
Only buffers that are mostly padding count (MAX_INPUT_SHARE).

Each serial loop whose body is one such accumulation, and whose variable moves the padded read,
gets a guard around its body: "some iteration of the loops inside reads within the box". The
inner loops' variables are relaxed to their ranges, one comparison at a time, so the guard is a
necessary condition for a nonzero product and never skips one. A guard that the loop ranges decide
is left out (true) or empties the body (false).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

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
    Load,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
    substitute,
    walk_expr,
    walk_stmts,
)
from compiler.tir.simplify import affine_coeffs, simplify

# buffer -> (the producer's index variables, the condition under which it holds input, not zero)
Padded = Mapping[Buffer, tuple[tuple[Var, ...], Expr]]

_COMPARISONS = ("<", "<=", ">", ">=", "==")


# a padded buffer counts when what it pads is at most this share of it: where most reads are input,
# the steps skipped are few, and a branch around a wide register tile cost more than it saved
# (Inception's 7x1 convs on 17x17, 24 accumulators, ran 2.4x slower guarded)
MAX_INPUT_SHARE = 0.4


def zero_padded(body: Stmt) -> dict[Buffer, tuple[tuple[Var, ...], Expr]]:
    """Buffers written by one block only, as `buf[i, j, ...] = select(cond, x[...], 0)` over its
    own iterators, x at most MAX_INPUT_SHARE of buf: zero wherever cond (an expression of those
    iterators) is false, and mostly zero."""
    writes: dict[Buffer, int] = {}
    found: dict[Buffer, tuple[tuple[Var, ...], Expr]] = {}
    for s in walk_stmts(body):
        if isinstance(s, Store):
            writes[s.buffer] = writes.get(s.buffer, 0) + 1
        if not (isinstance(s, Block) and isinstance(s.body, Store) and s.init is None):
            continue
        store, ivs = s.body, tuple(iv.var for iv in s.iter_vars)
        value = store.value
        if (
            isinstance(value, Select)
            and isinstance(value.f, FloatImm)
            and value.f.value == 0.0
            and isinstance(value.t, Load)
            and value.t.buffer.size <= MAX_INPUT_SHARE * store.buffer.size
            and len(store.indices) == len(ivs)
            and all(i is v for i, v in zip(store.indices, ivs, strict=True))
        ):
            found[store.buffer] = (ivs, value.cond)
    return {b: f for b, f in found.items() if writes.get(b) == 1}


def _factors(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "*":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _support(factor: Expr, padded: Padded) -> Expr | None:
    """Where a factor of a product may be nonzero, as a condition on the loop variables."""
    if isinstance(factor, Load) and factor.buffer in padded:
        ivs, cond = padded[factor.buffer]
        return substitute(cond, dict(zip(ivs, factor.indices, strict=True)))
    return None


def _accumulation(s: Stmt) -> tuple[Store, list[For]] | None:
    """The one store under s (through loops and ifs only) when it is `acc[i] = acc[i] + product`, and the
    loops around it inside s."""
    loops: list[For] = []
    while isinstance(s, For) or (isinstance(s, IfThenElse) and s.orelse is None):
        if isinstance(s, For):
            loops.append(s)
            s = s.body
        else:
            s = s.then
    if not isinstance(s, Store) or not isinstance(s.value, BinOp) or s.value.op != "+":
        return None
    for acc, product in ((s.value.a, s.value.b), (s.value.b, s.value.a)):
        if (
            isinstance(acc, Load)
            and acc.buffer is s.buffer
            and len(acc.indices) == len(s.indices)
            and all(a is b or a == b for a, b in zip(acc.indices, s.indices, strict=True))
            and not any(isinstance(x, Load) and x.buffer is s.buffer for x in walk_expr(product))
        ):
            return s, loops
    return None


def _comparisons(cond: Expr) -> list[BinOp]:
    if isinstance(cond, BinOp) and cond.op == "and":
        return _comparisons(cond.a) + _comparisons(cond.b)
    return [cond] if isinstance(cond, BinOp) and cond.op in _COMPARISONS else []


def _relaxed(comparison: BinOp, inner: Mapping[Var, int]) -> Expr | None:
    """A condition on the outer variables that holds when `comparison` holds for some values of the
    `inner` variables in their ranges; None when it cannot be stated (not affine)."""
    linear = affine_coeffs(BinOp("-", comparison.a, comparison.b))
    if linear is None:
        return None
    terms, constant = linear
    low = high = 0
    outer: Expr = IntImm(constant)
    for atom, coeff in terms.items():
        if isinstance(atom, Var) and atom in inner:
            span = coeff * (inner[atom] - 1)
            low, high = low + min(0, span), high + max(0, span)
        elif any(isinstance(x, Var) and x in inner for x in walk_expr(atom)):
            return None
        else:
            outer = BinOp("+", outer, BinOp("*", atom, IntImm(coeff)))
    # the difference d = outer + (inner part in [low, high]): some d satisfies d OP 0
    op = comparison.op
    if op in (">", ">="):
        return BinOp(op, BinOp("+", outer, IntImm(high)), IntImm(0))
    if op in ("<", "<="):
        return BinOp(op, BinOp("+", outer, IntImm(low)), IntImm(0))
    return BinOp(
        "and",
        BinOp("<=", BinOp("+", outer, IntImm(low)), IntImm(0)),
        BinOp(">=", BinOp("+", outer, IntImm(high)), IntImm(0)),
    )


def _guard(loop: For, padded: Padded) -> Expr | None:
    """The condition for one step of `loop` to add anything, when its body is an accumulation of
    products with a padded factor whose box its variable moves; None otherwise."""
    found = _accumulation(loop.body)
    if found is None:
        return None
    store, inner_loops = found
    inner = {f.var: f.extent for f in inner_loops}
    assert isinstance(store.value, BinOp)
    supports = [c for f in _factors(store.value.b) + _factors(store.value.a) if (c := _support(f, padded))]
    moved = [c for s in supports for c in _comparisons(s) if any(x is loop.var for x in walk_expr(c))]
    parts = [r for c in moved if (r := _relaxed(c, inner)) is not None]
    if not parts:
        return None
    guard = parts[0]
    for p in parts[1:]:
        guard = BinOp("and", guard, p)
    return guard


def skip_padding_steps(s: Stmt, padded: Padded, ranges: Mapping[Var, int] | None = None) -> Stmt:
    """Guard the body of every serial loop under s whose steps may only multiply padding."""
    ranges = dict(ranges or {})
    if not padded:
        return s
    if isinstance(s, For):
        inside = {**ranges, s.var: s.extent}
        guard = _guard(s, padded) if s.kind is ForKind.SERIAL else None
        body = skip_padding_steps(s.body, padded, inside)
        if guard is not None:
            decided = simplify(guard, inside)
            if isinstance(decided, IntImm) and not decided.value:
                return Seq(())
            if not isinstance(decided, IntImm):
                body = IfThenElse(decided, body)
        return For(s.var, s.extent, s.kind, body)
    if isinstance(s, Seq):
        return Seq(tuple(skip_padding_steps(x, padded, ranges) for x in s.stmts))
    if isinstance(s, IfThenElse):
        return IfThenElse(
            s.cond,
            skip_padding_steps(s.then, padded, ranges),
            None if s.orelse is None else skip_padding_steps(s.orelse, padded, ranges),
        )
    if isinstance(s, Allocate):
        return Allocate(s.buffer, skip_padding_steps(s.body, padded, ranges))
    return s


# combinations of the other iterators' values that support_breaks evaluates a comparison at
_MAX_BREAK_CASES = 1024


def support_breaks(blk: Block, padded: Padded, axis: int) -> tuple[int, ...]:
    """The values of the block's iterator `axis` at which a padded factor of its accumulation
    starts or stops holding input, for some value of the other iterators its comparisons name
    (a dilated conv's output columns where a tap's reads enter or leave the input): a tile of that
    axis starting at each of them holds, for every tap, only steps that read input or only steps
    that read padding, so skip_padding_steps skips exactly. Empty when the block accumulates no
    padded factor or the comparisons are not affine in iterators of small ranges."""
    if not isinstance(blk.body, Store):
        return ()
    found = _accumulation(blk.body)
    if found is None:
        return ()
    store, _ = found
    assert isinstance(store.value, BinOp)
    ranges = {iv.var: iv.extent for iv in blk.iter_vars}
    var, extent = blk.iter_vars[axis].var, blk.iter_vars[axis].extent
    factors = _factors(store.value.a) + _factors(store.value.b)
    moved = [
        c
        for f in factors
        if (s := _support(f, padded)) is not None
        for c in _comparisons(s)
        if any(x is var for x in walk_expr(c))
    ]
    breaks: set[int] = set()
    for c in moved:
        others = sorted(
            {x for x in walk_expr(c) if isinstance(x, Var) and x is not var}, key=lambda v: v.name
        )
        if any(v not in ranges for v in others) or math.prod(ranges[v] for v in others) > _MAX_BREAK_CASES:
            return ()
        for values in itertools.product(*(range(ranges[v]) for v in others)):
            fixed = substitute(c, dict(zip(others, (IntImm(x) for x in values), strict=True)))
            truth = []
            for x in range(extent):
                held = simplify(substitute(fixed, {var: IntImm(x)}), {})
                if not isinstance(held, IntImm):
                    return ()
                truth.append(bool(held.value))
            breaks.update(x for x in range(1, extent) if truth[x] != truth[x - 1])
    return tuple(sorted(breaks))
