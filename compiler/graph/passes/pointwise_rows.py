"""Blocked pointwise convolutions over small planes run over the plane as one row of pixels.

A blocked conv's register tile is a few output channel blocks by a run of output columns of one
row (compiler/ops/conv2d_blocked.py). A small plane's rows are short (7, 13, 14, 17 columns), so
most rows end in a narrower tile, which keeps fewer FMAs in flight, and every row starts the tile
loop over. A 1x1 convolution with stride 1 and no padding reads pixel p of its input for output
pixel p, so over the [N, C/b, 1, H*W, b] view of the same memory (a reshape: free) it is the same
convolution on a single row of H*W columns: the tiles run back to back across row ends, and only
the plane's last tile may be narrower (ResNet-50's 7x7 pointwise convs measured faster so). Large
planes stay as they are: their rows are long enough for whole tiles, and one long row measured
slower at 56x56.

The epilogue that follows (bias, residual add, activation, a squeeze-excitation scale) moves onto
the same view (compiler/graph/passes/flat_view.py), so it stays in the conv's kernel.
"""

from __future__ import annotations

from compiler.graph.ir import Call, Const, Expr, Graph
from compiler.graph.passes.flat_view import reshape, sink_flat_views
from compiler.tensor_type import TensorType

# planes of at most this many points become one row (ResNet's 7x7 and 14x14, SqueezeNet's 13x13,
# Inception's 8x8; not 17x17 or larger, whose rows hold whole tiles well enough)
MAX_PLANE = 256


def why_rows(call: Call) -> str | None:
    """None when this blocked conv runs over its plane as one row, else why it keeps its rows."""
    if call.op != "conv2d_nchwc":
        return "not a blocked conv2d"
    x, w = call.args
    if not isinstance(w, Const) or x.type.ndim != 5 or w.type.ndim != 6:
        return "its weight is not a packed constant"
    if w.type.shape[2:4] != (1, 1):
        return "not a 1x1 conv"
    if call.attr("groups", 1) != 1:
        return "grouped"
    if tuple(call.attr("strides")) != (1, 1) or tuple(call.attr("dilations")) != (1, 1):
        return "strided or dilated"
    if any(call.attr("pads")):
        return "padded"
    h, wd = x.type.shape[2:4]
    if h == 1:
        return "its plane is one row already"
    if h * wd > MAX_PLANE:
        return f"its {h}x{wd} plane has more than {MAX_PLANE} points (its rows hold whole tiles)"
    return None


def _as_row(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    if why_rows(Call(call.op, args, call.attrs, call.type, call.name)) is not None:
        return None
    x, w = args
    n, cb, h, wd, b = x.type.shape
    flat = reshape(x, (n, cb, 1, h * wd, b), f"{call.name}.flatten")
    n, ocb, _, _, ob = call.type.shape
    return Call(
        call.op, (flat, w), call.attrs, TensorType((n, ocb, 1, h * wd, ob), call.type.dtype), call.name
    )


def _row_view(operand: Expr, out_shape: tuple[int, ...], name: str) -> Expr | None:
    """`operand` (broadcast against an [N, C/b, H, W, b] result) on the [N, C/b, 1, H*W, b] view,
    or None when it broadcasts along H but not W (or the reverse)."""
    shape = operand.type.shape
    if len(shape) > 5:
        return None
    full = (1,) * (5 - len(shape)) + shape
    h, w = full[2:4]
    if (h, w) == (1, 1):
        return operand  # broadcasts over the row as it did over the plane
    if (h, w) != out_shape[2:4]:
        return None
    new_shape = (full[0], full[1], 1, h * w, full[4])
    if isinstance(operand, Const):
        return Const(f"{operand.name}.row", operand.data.reshape(new_shape))
    return reshape(operand, new_shape, name)


def pointwise_conv_rows(graph: Graph) -> Graph:
    """Every blocked pointwise conv over a small plane on its one-row view, epilogue included."""
    if not any(why_rows(c) is None for c in graph.calls()):
        return graph
    return sink_flat_views(graph, _as_row, _row_view)
