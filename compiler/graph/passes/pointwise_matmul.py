"""Pointwise convolutions over large planes become matrix products on the NCHW tensor as it is.

A 1x1 convolution with stride 1 and no padding is `W[oc, ic] @ X[n, ic, h*w]`: the input's planes
are already the columns of a matrix, so reshaping costs nothing. Scheduled as a matmul, the input is
copied once into contiguous column panels and every panel feeds a register tile of many output
channels, where the convolution schedules read each input row with a stride of a whole plane (slow
once the input has left the private caches, as it has in a model: MobileNetV2's 144->24 projection
at 56x56 ran 2.6x slower as a convolution). Small planes (14x14, 7x7) stay convolutions: their
columns do not fill vector registers evenly, and the convolution schedule tiles channels instead.

The elementwise epilogue that follows (bias, activation, residual) is rewritten onto the
(n, channels, h*w) view as well, so the fusion pass still puts it in the matmul's kernel: the
reshape back to NCHW moves below it, where it is free (a reshape is an alias, not a kernel).
"""

from __future__ import annotations

from compiler.graph.ir import Call, Const, Expr, Graph
from compiler.graph.passes.flat_view import reshape, sink_flat_views
from compiler.tensor_type import TensorType

# graph op -> the op this pass may turn it into (`temper explain` lists the implementations)
REWRITES = {"conv2d": "matmul"}
# planes whose size is a multiple of this (16 float lanes of AVX-512, two vectors of AVX2) and at
# least MIN_PLANE points; inputs of at least MIN_CHANNELS channels (fewer make a reduction too
# short for the panel copy to pay for itself)
PLANE_MULTIPLE = 16
MIN_PLANE = 256
MIN_CHANNELS = 24


def _is_pointwise(call: Call) -> bool:
    if call.op != "conv2d" or len(call.args) != 2:
        return False
    x, w = call.args
    if not isinstance(w, Const) or x.type.ndim != 4 or x.type.dtype != "float32":
        return False
    attrs = call.attr_dict
    plane = x.type.shape[2] * x.type.shape[3]
    return (
        w.type.shape[2:] == (1, 1)
        and attrs.get("groups", 1) == 1
        and tuple(attrs.get("strides", (1, 1))) == (1, 1)
        and tuple(attrs.get("dilations", (1, 1))) == (1, 1)
        and not any(attrs.get("pads", (0, 0, 0, 0)))
        and call.type.shape[2:] == x.type.shape[2:]
        and plane % PLANE_MULTIPLE == 0
        and plane >= MIN_PLANE
        and x.type.shape[1] >= MIN_CHANNELS
    )


def _flat_view(operand: Expr, out_shape: tuple[int, ...], name: str) -> Expr | None:
    """`operand` (broadcast against an (n, c, h, w) result) on the (n, c, h*w) view, or None when
    it broadcasts along h but not w (or the reverse)."""
    shape = operand.type.shape
    if len(shape) > 4:
        return None
    full = (1,) * (4 - len(shape)) + shape
    h, w = full[2:]
    if (h, w) == (1, 1):
        spatial = 1
    elif (h, w) == out_shape[2:]:
        spatial = h * w
    else:
        return None
    new_shape = (full[0], full[1], spatial)
    if isinstance(operand, Const):
        return Const(f"{operand.name}.flat", operand.data.reshape(new_shape))
    return reshape(operand, new_shape, name)


def _as_matmul(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    """A pointwise conv as the matmul W[oc, ic] @ X[n, ic, h*w], or None for any other op."""
    if not _is_pointwise(Call(call.op, args, call.attrs, call.type, call.name)):
        return None
    x, w = args
    assert isinstance(w, Const)  # _is_pointwise checked it
    n, ic, h, wd = x.type.shape
    oc = call.type.shape[1]
    flat = reshape(x, (n, ic, h * wd), f"{call.name}.flatten")
    weight = Const(f"{w.name}.matrix", w.data.reshape(oc, ic))
    return Call("matmul", (weight, flat), (), TensorType((n, oc, h * wd), call.type.dtype), call.name)


def pointwise_conv_to_matmul(graph: Graph) -> Graph:
    """Every pointwise conv over a large plane as a matmul, its epilogue on the (n, c, h*w) view."""
    return sink_flat_views(graph, _as_matmul, _flat_view)
