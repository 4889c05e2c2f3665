"""Constant folding: a call whose arguments are all constants becomes a constant (its op's reference).

A folded weight transform (e.g. a Gemm's transposed weight) is paid once at compile time instead of
on every run. A result larger than compiler.limits.FOLD_ELEMENTS folds only when it rearranges data the
model already holds (`rearranges`: an elementwise, broadcast or injective op whose result is no larger
than its largest constant argument, such as VGG's transposed 25088x4096 classifier weight), and only
while all such large results together stay within the elements of the model's own constants. Every
other large result stays a call, computed at run time. So folding at most doubles what the file itself
put in memory: no model makes the compiler allocate without bound.
"""

from __future__ import annotations

from compiler.graph.interpret import fold
from compiler.graph.ir import Call, Const, Expr, Graph, rewrite
from compiler.limits import FOLD_ELEMENTS
from compiler.ops import registry
from compiler.ops.registry import Pattern


def rearranges(call: Call, args: tuple[Expr, ...]) -> bool:
    """Whether `call` only moves, selects or maps elements of its arguments (each output element from a
    bounded number of input elements) into a result no larger than its largest argument."""
    return registry.get(call.op).pattern <= Pattern.INJECTIVE and call.type.size <= max(
        a.type.size for a in args
    )


def fold_constants(graph: Graph) -> Graph:
    # elements that results past FOLD_ELEMENTS may still take: as many as the model's constants hold
    budget = sum(n.type.size for n in graph.nodes() if isinstance(n, Const))

    def fold_call(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        nonlocal budget
        if call.op == "fused" or not args or not all(isinstance(a, Const) for a in args):
            return None
        size = call.type.size
        if size > FOLD_ELEMENTS:
            if not rearranges(call, args) or size > budget:
                return None
            budget -= size
        return fold(call.op, args, call.attr_dict, call.type, name=call.name)

    return rewrite(graph, fold_call)
