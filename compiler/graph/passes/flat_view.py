"""An anchor op rewritten onto a flattened view of its planes, with its elementwise epilogue.

Two passes run an op over a view that merges a tensor's spatial axes into one (a reshape of a
contiguous tensor, so it costs nothing): pointwise_matmul (a 1x1 conv over NCHW planes as a matrix
product on (n, c, h*w)) and pointwise_rows (a blocked 1x1 conv over a small plane as one row of
h*w pixels). Both need the same thing around the op: the reshape back to the original shape moves
below the elementwise and broadcasting ops that follow (bias, activation, residual, scale), each of
them rewritten onto the view, so the fusion pass still puts them in the op's kernel and the reshape
back lands where it is free (a kernel of reshapes is an alias, not a pass over memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from compiler.graph.ir import Call, Expr, Graph, rewrite
from compiler.ops import registry
from compiler.ops.registry import Pattern
from compiler.tensor_type import TensorType

# (call, its rewritten args) -> the op on the flat view (typed with the view's shape), or None
Anchor = Callable[[Call, tuple[Expr, ...]], Expr | None]
# (operand, the epilogue op's original shape, name for a reshape) -> the operand as it broadcasts
# against the view, or None when it cannot (it broadcasts along one merged axis but not the other)
View = Callable[[Expr, tuple[int, ...], str], Expr | None]


def reshape(x: Expr, shape: tuple[int, ...], name: str) -> Call:
    return Call("reshape", (x,), (("shape", shape),), TensorType(shape, x.type.dtype), name)


def sink_flat_views(graph: Graph, anchor: Anchor, view: View) -> Graph:
    """Rewrite every op `anchor` accepts onto its view, followed by a reshape back; then move each
    such reshape below the elementwise and broadcasting ops that consume it, while `view` can put
    their other operands on the view too (consecutive reshapes are left for `simplify` to merge)."""
    created: set[int] = set()  # ids of the reshapes back this pass made (only those move down)

    def rule(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        if call.op == "fused":
            return None
        made = anchor(call, args)
        if made is not None:
            back = reshape(made, call.type.shape, f"{call.name}.unflatten")
            created.add(id(back))
            return back
        moved = [a for a in args if isinstance(a, Call) and id(a) in created]
        if not moved or registry.get(call.op).pattern > Pattern.BROADCAST:
            return None
        if any(a.type.shape != call.type.shape for a in moved):
            return None  # the moved reshape's result is broadcast: keep the op on the original shape
        inner = moved[0].args[0]
        new_args = []
        for k, a in enumerate(args):
            if isinstance(a, Call) and id(a) in created:
                new_args.append(a.args[0])
                continue
            flat = view(a, call.type.shape, f"{call.name}.flatten{k}")
            if flat is None:
                return None
            new_args.append(flat)
        flat_shape = inner.type.shape
        if math.prod(flat_shape) != math.prod(call.type.shape):
            return None
        op = Call(call.op, tuple(new_args), call.attrs, TensorType(flat_shape, call.type.dtype), call.name)
        back = reshape(op, call.type.shape, f"{call.name}.unflatten")
        created.add(id(back))
        return back

    return rewrite(graph, rule)
