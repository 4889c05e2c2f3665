"""ONNX Einsum as the ops temper has: transposes, sums, reshapes and one batched matmul.

A contraction of two operands (what transformer exports write: 'bhqd,bhkd->bhqk', 'bij,bjk->bik',
'...ij,...jk->...ik') sorts its letters into batch (in both operands and the output), kept-left
(left operand and output), kept-right and contracted (both operands, not the output). Letters of
one operand that the output does not keep and the other operand lacks are summed out first. Then
left -> [batch, left, contracted], right -> [batch, contracted, right], one matmul over
[B, M, K] x [B, K, N], and the result is reshaped and transposed into the output's order. One operand:
a transpose and a sum. A letter repeated within an operand (a diagonal) is refused, naming the node.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence

from compiler.frontend.context import NodeContext, OpConverter
from compiler.graph.ir import Expr


def _parse(ctx: NodeContext, equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Operand subscripts and the output's, with '...' spelled out as fresh capital letters."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"Einsum {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    ellipsis_rank = max(
        (r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True) if "..." in t), default=0
    )
    fill = string.ascii_uppercase[:ellipsis_rank]
    spelled = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            own = rank - len(term.replace("...", ""))
            term = term.replace("...", fill[ellipsis_rank - own :])
        if len(term) != rank or not all(c.isalpha() for c in term):
            raise ctx.error(f"Einsum subscripts {term!r} do not fit an operand of rank {rank}")
        if len(set(term)) != len(term):
            raise ctx.error(
                f"Einsum {equation!r}: a repeated subscript within an operand (a diagonal) is not supported"
            )
        spelled.append(term)
    if arrow:
        out = rhs.replace("...", fill)
    else:  # implicit output: the ellipsis, then every letter used once, in alphabetical order
        counts = {c: sum(t.count(c) for t in spelled) for c in set("".join(spelled)) - set(fill)}
        out = fill + "".join(sorted(c for c, n in counts.items() if n == 1))
    return spelled, out


def _transpose(ctx: NodeContext, x: Expr, have: str, want: str) -> Expr:
    if have == want:
        return x
    return ctx.emit("transpose", [x], perm=tuple(have.index(c) for c in want))


def _sum_out(ctx: NodeContext, x: Expr, term: str, keep: set[str]) -> tuple[Expr, str]:
    gone = tuple(i for i, c in enumerate(term) if c not in keep)
    if not gone:
        return x, term
    return ctx.emit("reduce_sum", [x], axes=gone, keepdims=0), "".join(c for c in term if c in keep)


def _einsum(ctx: NodeContext) -> Sequence[Expr]:
    operands = [ctx.arg(i) for i in range(len(ctx.inputs))]
    equation = str(ctx.attr("equation", ""))
    terms, out = _parse(ctx, equation, [x.type.ndim for x in operands])
    if len(operands) == 1:
        (x,), (term,) = operands, terms
        x, term = _sum_out(ctx, x, term, set(out))
        return [_transpose(ctx, x, term, out)]
    if len(operands) != 2:
        raise ctx.error(f"Einsum of {len(operands)} operands is not supported (one or two)")
    (a, b), (ta, tb) = operands, terms
    a, ta = _sum_out(ctx, a, ta, set(out) | set(tb))
    b, tb = _sum_out(ctx, b, tb, set(out) | set(ta))
    size = {c: d for x, t in ((a, ta), (b, tb)) for c, d in zip(t, x.type.shape, strict=True)}
    for c in set(ta) & set(tb):
        da, db = a.type.shape[ta.index(c)], b.type.shape[tb.index(c)]
        if da != db:
            raise ctx.error(
                f"Einsum {equation!r}: subscript {c!r} is {da} in one operand and {db} in the other"
            )
    batch = "".join(c for c in out if c in ta and c in tb)
    left = "".join(c for c in out if c in ta and c not in tb)
    right = "".join(c for c in out if c in tb and c not in ta)
    contracted = "".join(c for c in ta if c in tb and c not in out)
    if set(out) - set(ta) - set(tb):
        raise ctx.error(f"Einsum {equation!r}: the output names a subscript no operand has")

    def extent(letters: str) -> int:
        return math.prod(size[c] for c in letters)

    a = _transpose(ctx, a, ta, batch + left + contracted)
    b = _transpose(ctx, b, tb, batch + contracted + right)
    a = ctx.emit("reshape", [a], shape=(extent(batch), extent(left), extent(contracted)))
    b = ctx.emit("reshape", [b], shape=(extent(batch), extent(contracted), extent(right)))
    y = ctx.emit("matmul", [a, b])
    y = ctx.emit("reshape", [y], shape=tuple(size[c] for c in batch + left + right))
    return [_transpose(ctx, y, batch + left + right, out)]


CONVERTERS: dict[str, OpConverter] = {"Einsum": OpConverter(_einsum)}
