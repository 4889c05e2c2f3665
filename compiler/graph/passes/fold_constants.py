"""Constant folding: a call whose arguments are all constants becomes a constant (its op's reference).

A folded weight transform (e.g. a Gemm's transposed weight) is paid once at compile time instead of
on every run; a result larger than compiler.limits.FOLD_ELEMENTS stays a call (computed at run time),
so no model makes the compiler allocate without bound.
"""

from __future__ import annotations

from compiler.graph.interpret import fold
from compiler.graph.ir import Call, Const, Expr, Graph, rewrite
from compiler.limits import FOLD_ELEMENTS


def fold_constants(graph: Graph) -> Graph:
    def fold_call(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        if call.op == "fused" or not args or not all(isinstance(a, Const) for a in args):
            return None
        if call.type.size > FOLD_ELEMENTS:
            return None
        return fold(call.op, args, call.attr_dict, call.type, name=call.name)

    return rewrite(graph, fold_call)
