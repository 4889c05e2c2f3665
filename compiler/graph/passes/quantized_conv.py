"""Quantized convs on 8-bit integer kernels: a blocked conv whose input is a quantized tensor
(DequantizeLinear of a QuantizeLinear) and whose weight lies on an 8-bit grid per output channel runs
as conv2d_nchwc_u8s8 (compiler/ops/conv2d_int8.py) where the target sums u8 x s8 products in one
instruction (VNNI, Target.dot_lanes).

A QDQ model (onnxruntime's static quantization) reaches this pass as float arithmetic: the frontend
computes QuantizeLinear as clip(round(x / s) + z) on the integer grid and DequantizeLinear as
(q - z) * s, and folds a constant weight's DequantizeLinear (compiler/frontend/convert_quant.py). So
the conv computes sum (q - z) * s * w with w = k * s_w[oc], k an 8-bit integer, and

    conv = s * s_w[oc] * (sum q * k  -  z * sum k)

where sum q * k is an exact int32 sum of u8 x s8 products (q shifted onto 0..255: an int8 grid moves
by 128, its zero point with it) and sum k, over a channel's weights, is a constant. The pass makes
the integers uint8 (a cast after the clip, which the producing kernel's epilogue stores: a quarter
of the bytes), the conv the integer conv padded with z (the integer that stands for 0), and the
rest the float epilogue (z * sum k subtracted in int32, then the scale) that fuses into the
kernel with the conv's own epilogue. The products are exact where the float conv rounds, so the
result is the quantized model's arithmetic as onnxruntime's int8 kernels compute it.

`why_float` gives the reason a conv stays float: not on such a target, its input not a quantized
tensor (or quantized per channel), its weight not on an 8-bit grid, a grouped conv, an input block
not a multiple of four channels.
"""

from __future__ import annotations

import numpy as np

from compiler.graph.ir import Call, Const, Expr, Graph, attrs_of, rewrite
from compiler.ops.conv2d_blocked import unpack_weight
from compiler.ops.conv2d_int8 import DOT, OP, pack_weight_u8s8
from compiler.tensor_type import TensorType

# graph op -> the op this pass may turn it into (`temper explain` lists the implementations)
REWRITES = {"conv2d_nchwc": OP}
INTEGER_CONV = "runs on 8-bit integers (u8 x s8 dot products summed in int32, the scales after)"
NO_INSTRUCTION = "the target has no u8 x s8 dot-product instruction (VNNI) at its vector width"
# how far from an integer a weight divided by its channel's step may be and still lie on the grid
# (the frontend folded k * s_w in float32: a few units in the last place of k)
GRID_TOLERANCE = 1e-3


def _scalar(e: Expr) -> float | None:
    """The value of a one-element constant, else None."""
    if isinstance(e, Const) and e.data.size == 1:
        return float(e.data.reshape(()))
    return None


def _integer(v: float | None) -> bool:
    return v is not None and float(v).is_integer()


# ops that only move values: a dequantization with one scale and zero point commutes with them
MOVERS = frozenset({"layout_transform"})


def quantized_input(x: Expr) -> tuple[Expr, float, int, int] | str:
    """(the clipped integers q, the scale s, the zero point z, the grid's lowest value) of a
    dequantized tensor (q - z) * s with q = clip(round(..) + c, lo, hi) on a grid of at most 256
    integers, seen through ops that move values (q then moved the same way); else why not."""
    moves: list[Call] = []
    while isinstance(x, Call) and x.op in MOVERS:
        moves.append(x)
        x = x.args[0]
    found = _dequantized(x)
    if isinstance(found, str):
        return found
    q, scale, zero, lo = found
    for move in reversed(moves):
        q = Call(move.op, (q, *move.args[1:]), move.attrs, move.type, f"{move.name}.q")
    return q, scale, zero, lo


def _dequantized(x: Expr) -> tuple[Expr, float, int, int] | str:
    if not (isinstance(x, Call) and x.op == "mul"):
        return "its input is not a dequantized tensor"
    inner, scale = x.args[0], _scalar(x.args[1])
    if scale is None:
        inner, scale = x.args[1], _scalar(x.args[0])
    if scale is None or scale <= 0:
        return "its input's dequantization scale is not one positive constant (per channel?)"
    zero = 0.0
    if isinstance(inner, Call) and inner.op == "sub":
        zero_value = _scalar(inner.args[1])
        if zero_value is None:
            return "its input's zero point is not one constant"
        inner, zero = inner.args[0], zero_value
    if not (isinstance(inner, Call) and inner.op == "clip"):
        return "its input is not a quantized tensor"
    lo, hi = inner.attr("min"), inner.attr("max")
    if not (_integer(lo) and _integer(hi) and 0 < hi - lo <= 255 and _integer(zero)):
        return "its input's grid is not at most 256 integers with an integer zero point"
    rounded = inner.args[0]
    if isinstance(rounded, Call) and rounded.op == "add":
        a, b = rounded.args
        rounded, offset = (a, _scalar(b)) if _scalar(b) is not None else (b, _scalar(a))
        if not _integer(offset):
            return "its input's integers are not shifted by one integer constant"
    if not (isinstance(rounded, Call) and rounded.op == "round"):
        return "its input's values are not rounded to integers"
    if not lo <= zero <= hi:
        return f"its input's zero point {zero:g} lies outside its grid [{lo:g}, {hi:g}]"
    return inner, scale, int(zero), int(lo)


def weight_grid(w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(k int8, step per output channel) with w[o] = k[o] * step[o], for an OIHW float weight on an
    8-bit grid per output channel; None when it is not. Of the steps that fit, the finest is taken
    (the largest |k|: 127, then 128, then fewer); any exact split gives the same products."""
    flat = w.reshape(w.shape[0], -1).astype(np.float64)
    peak = np.abs(flat).max(axis=1)
    steps = np.zeros(len(flat))
    ks = np.zeros(flat.shape, np.int8)
    open_rows = np.flatnonzero(peak > 0)  # an all-zero channel takes step 0
    for top in (127, 128, *range(126, 0, -1)):  # whole-array steps: bounded work for any weight
        if not open_rows.size:
            break
        k = flat[open_rows] * (top / peak[open_rows])[:, None]
        near = np.round(k)
        fits = np.all(np.abs(k - near) <= GRID_TOLERANCE, axis=1) & (near.min(axis=1) >= -128)
        fits &= near.max(axis=1) <= 127
        ks[open_rows[fits]] = near[fits].astype(np.int8)
        steps[open_rows[fits]] = peak[open_rows[fits]] / top
        open_rows = open_rows[~fits]
    if open_rows.size:
        return None
    return ks.reshape(w.shape), steps


def why_float(call: Call, x: Expr, int8_dot: bool) -> str | None:
    """None when this blocked conv runs on the 8-bit integer kernel, else why it stays float."""
    if call.op != "conv2d_nchwc":
        return "not a blocked conv2d"
    if not int8_dot:
        return NO_INSTRUCTION
    w = call.args[1]
    if not isinstance(w, Const):
        return "its weight is not a constant"
    if call.attr("groups", 1) != 1:
        return "grouped (the integer kernel is for dense convs)"
    ib = x.type.shape[4]
    if ib % DOT:
        return f"its input is blocked by {ib} channels, not a multiple of {DOT} (a network's first conv)"
    found = quantized_input(x)
    if isinstance(found, str):
        return found
    if weight_grid(unpack_weight(w.data)) is None:
        return "its weight is not on an 8-bit grid per output channel"
    return None


def _per_lane(values: np.ndarray, out: TensorType, dtype: str) -> np.ndarray:
    """Per output channel values as a [1, OC/ob, 1, 1, ob] constant of the blocked output."""
    _, ocb, _, _, ob = out.shape
    return values.astype(dtype).reshape(1, ocb, 1, 1, ob)


def as_integer_conv(call: Call, x: Expr) -> Expr:
    """conv2d_nchwc(dequantized x, w) as the integer conv and its float epilogue (why_float is None)."""
    found = quantized_input(x)
    assert not isinstance(found, str)
    q, scale, zero, lo = found
    w = call.args[1]
    assert isinstance(w, Const)
    grid = weight_grid(unpack_weight(w.data))
    assert grid is not None
    ks, steps = grid
    ib, ob = w.type.shape[4], w.type.shape[5]
    name = call.name
    shape = q.type.shape
    if lo:
        q = Call("add", (q, Const(f"{name}.shift", np.array(-lo, np.float32))), (), q.type, f"{name}.shift")
    as_u8 = Call("cast", (q,), attrs_of({"to": "uint8"}), TensorType(shape, "uint8"), f"{name}.u8")
    weight = Const(f"{w.name}.u8s8", pack_weight_u8s8(ks, ib, ob))
    attrs = dict(call.attr_dict, x_zero=zero - lo)
    out = call.type
    sums = Call(OP, (as_u8, weight), attrs_of(attrs), TensorType(out.shape, "int32"), name)
    offsets = (zero - lo) * ks.reshape(ks.shape[0], -1).astype(np.int64).sum(axis=1)
    centred = Call(
        "sub",
        (sums, Const(f"{name}.offsets", _per_lane(offsets, out, "int32"))),
        (),
        sums.type,
        f"{name}.centred",
    )
    as_float = Call("cast", (centred,), attrs_of({"to": "float32"}), out, f"{name}.float")
    factor = Const(f"{name}.scales", _per_lane(scale * steps, out, "float32"))
    return Call("mul", (as_float, factor), (), out, f"{name}.scaled")


def quantized_convs(graph: Graph, int8_dot: bool) -> Graph:
    """Every blocked conv the rule admits on the integer kernel (none where `int8_dot` is False: the
    target lacks the instruction at the layout's vector width)."""
    if not int8_dot:
        return graph

    def rule(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        if call.op != "conv2d_nchwc" or why_float(call, args[0], int8_dot) is not None:
            return None
        return as_integer_conv(call, args[0])

    return rewrite(graph, rule)
