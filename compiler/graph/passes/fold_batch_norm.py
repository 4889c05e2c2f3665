"""Fold inference batch norms (y = x * a + b per channel) into the layer that feeds them.

- conv2d / conv_transpose2d / matmul with a constant weight, optionally through a constant per-channel
  bias add, used only by the batch norm: scale the weight by `a`, then add `bias * a + b`.
- anything else: a standalone batch norm becomes mul + add with constants (cheaper and fusable).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compiler.graph.ir import Call, Const, Expr, Graph, rewrite, users
from compiler.ops.norm import batch_norm_affine, channel_view
from compiler.tensor_type import TensorType

_ANCHORS = ("conv2d", "conv_transpose2d", "matmul")


def _match(node: Expr, rank: int) -> tuple[Call, Const | None] | None:
    """node = anchor(...) or anchor(...) + per-channel constant bias -> (anchor, bias)."""
    if not isinstance(node, Call):
        return None
    if node.op in _ANCHORS:
        return node, None
    if node.op != "add":
        return None
    channels = node.type.shape[1]
    for prod, bias in (node.args, node.args[::-1]):
        if (
            isinstance(prod, Call)
            and prod.op in _ANCHORS
            and isinstance(bias, Const)
            and prod.type == node.type
        ):
            data = bias.data
            ok = data.size == channels and data.ndim <= rank
            if ok and rank > 2:
                ok = data.shape[-(rank - 1) :] == (channels,) + (1,) * (rank - 2)
            if ok and rank == 2:
                ok = data.shape[-1:] == (channels,)
            if ok:
                return prod, bias
    return None


def _scaled_weight(producer: Call, a: np.ndarray) -> Const | None:
    """The producer's weight with output channels scaled by `a` (None if the weight is not constant)."""
    w = producer.args[1]
    if not isinstance(w, Const) or w.type.dtype != "float32":
        return None
    data = w.data
    if producer.op == "conv2d":
        return Const(w.name, data * a.reshape(-1, 1, 1, 1))
    if producer.op == "conv_transpose2d":
        groups = producer.attr("groups")
        cin, mg = data.shape[0], data.shape[1]
        scaled = data.reshape(groups, cin // groups, mg, *data.shape[2:]) * a.reshape(groups, 1, mg, 1, 1)
        return Const(w.name, scaled.reshape(data.shape))
    if producer.op == "matmul" and data.ndim == 2 and producer.type.ndim == 2:
        return Const(w.name, data * a.reshape(1, -1))
    return None


def _add(x: Expr, shift: np.ndarray, name: str, rank: int) -> Call:
    c = Const(f"{name}.shift", channel_view(shift, rank) if rank > 2 else shift)
    return Call("add", (x, c), (), x.type, name)


def _fold(bn: Call, args: tuple[Expr, ...], single_use: Callable[[Expr], bool]) -> Expr | None:
    x, *params = args
    rank = x.type.ndim
    if not all(isinstance(p, Const) for p in params):
        return None
    scale, bias, mean, var = (p.data for p in params if isinstance(p, Const))
    a, b = batch_norm_affine(scale, bias, mean, var, bn.attr("epsilon"))
    before, after = _match(bn.args[0], rank), _match(x, rank)
    eligible = before is not None and after is not None and single_use(bn.args[0])
    if eligible and before is not None and before[1] is not None:
        eligible = single_use(before[0])
    if eligible and after is not None:
        producer, bias_const = after
        w = _scaled_weight(producer, a)
        if w is not None:
            anchor = Call(producer.op, (producer.args[0], w), producer.attrs, producer.type, producer.name)
            shift = b if bias_const is None else bias_const.data.reshape(-1).astype(np.float64) * a + b
            return _add(anchor, np.asarray(shift, dtype=np.float32), bn.name, rank)
    mul_c = Const(f"{bn.name}.scale", channel_view(a, rank))
    mul = Call("mul", (x, mul_c), (), TensorType(x.type.shape, x.type.dtype), bn.name)
    return _add(mul, b, bn.name, rank)


def fold_batch_norm(graph: Graph) -> Graph:
    uses = users(graph)
    outputs = {id(o) for o in graph.outputs}

    def single_use(node: Expr) -> bool:
        return len({id(u) for u in uses.get(id(node), [])}) == 1 and id(node) not in outputs

    def fold_bn(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        return _fold(call, args, single_use) if call.op == "batch_norm" else None

    return rewrite(graph, fold_bn)
