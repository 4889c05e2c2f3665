"""Quantized convs and matmuls on 8-bit integer kernels: a blocked conv (or a matmul with a constant
weight) whose input is a quantized tensor (DequantizeLinear of a QuantizeLinear) and whose weight lies
on an 8-bit grid per output channel (per column) runs as conv2d_nchwc_u8s8 (matmul_u8s8,
compiler/ops/conv2d_int8.py and matmul_int8.py) where the target has an instruction for u8 x s8
products faster than float32's (Target.dot_instructions): VNNI's vpdpbusd for any 8-bit weights;
without VNNI, vpmaddubsw, whose int16 pair sums saturate, for weights whose pairs cannot (7-bit
weights always: onnxruntime's reduce_range, which it advises for such CPUs), and for other weights
vpmaddwd over the integers widened to int16 (stored so by the producing kernel): exact, two
products per lane where an FMA does one, and half of float's bytes to read. A stride-1 3x3 conv that
runs as Winograd in float stays float there, where Winograd saves more than the widened conv would
(`winograd_beats_widened`); every other conv runs widened (measured on Zen 3).

A QDQ model (onnxruntime's static quantization) reaches this pass as float arithmetic: the frontend
computes QuantizeLinear as clip(round(x / s) + z) on the integer grid and DequantizeLinear as
(q - z) * s, and folds a constant weight's DequantizeLinear (compiler/frontend/convert_quant.py). So
the conv computes sum (q - z) * s * w with w = k * s_w[oc], k an 8-bit integer, and

    conv = s * s_w[oc] * (sum q * k  -  z * sum k)

where sum q * k is an exact int32 sum of u8 x s8 products (q shifted onto 0..255: an int8 grid moves
by 128, its zero point with it) and sum k, over a channel's weights, is a constant. The pass makes
the integers uint8 (a cast after the clip, which the producing kernel's epilogue stores: a quarter
of the bytes; int16 where a reader takes vpmaddwd, half), the conv the integer conv padded with z
(the integer that stands for 0), and the rest the float epilogue (z * sum k subtracted in int32,
then the scale) that fuses into the kernel with the conv's own epilogue. The products are exact
where the float conv rounds them.

`why_float` gives the reason a conv or matmul stays float: not on such a target, its input not a
quantized tensor (or quantized per channel), its weight not a constant on an 8-bit grid, a grouped
conv, an input block (a reduction) not a multiple of four (a conv blocked right from planar, a
network's first conv of 3 channels, is blocked by 4 instead), a conv that would run widened where
its Winograd kernel is faster. `verdict` says which step one runs on.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from compiler.graph.ir import Call, Const, Expr, Graph, attrs_of, rewrite
from compiler.graph.passes.conv_algorithm import MIN_FLOPS_SAVED_PER_BYTE, why_direct
from compiler.ops import conv2d_int8, matmul_int8
from compiler.ops.conv2d_blocked import unpack_weight
from compiler.ops.conv2d_int8 import DOT, PAIRS_FIT, pack_weight_u8s8, weight_pairs_fit
from compiler.ops.matmul_int8 import pack_matmul_u8s8
from compiler.tensor_type import DTYPES, TensorType
from compiler.tir.ir import DOT_WIDTH

# graph op -> the op this pass may turn it into (`temper explain` lists the implementations)
REWRITES = {"conv2d_nchwc": conv2d_int8.OP, "matmul": matmul_int8.OP}
INTEGER_CONV = "runs on 8-bit integers (u8 x s8 dot products summed in int32, the scales after)"
WIDENED_CONV = (
    "runs on 8-bit integers widened to 16 bits (vpmaddwd, exact, the scales after): its weight's "
    "pairs could saturate the 16-bit sums of vpmaddubsw, the target's u8 x s8 instruction without VNNI "
    "(7-bit weights fit it: onnxruntime's reduce_range)"
)
NO_INSTRUCTION = "the target has no u8 x s8 dot-product instruction at its vector width"
WINDOW_STAYS_FLOAT = (
    "its weight's pairs could saturate vpmaddubsw (the target has no VNNI), and it runs as Winograd, "
    "which saves more than vpmaddwd over int16 would (conv_algorithm's rule at twice its bar)"
)
# Winograd's float products against vpmaddwd over int16, for a conv whose weight pairs could saturate
# vpmaddubsw: the widened conv does the direct conv's products two per lane per instruction, where an
# FMA does one, and reads half the float weight's bytes; so Winograd keeps such a conv only where it
# saves twice the FLOPs per weight byte it must save against the direct float conv. Measured on Zen 3:
# the stride-1 3x3 convs of ResNet-50's 56, 28 and 14-wide planes ran faster as Winograd F(4x4) or
# F(3x3); its 7-wide layer4 convs (F(2x2), whose weights stream from DRAM) and the convs Winograd
# cannot run (fewer than 32 channels) ran faster widened.
WIDENED_BAR_FACTOR = 2
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
MOVERS = frozenset({"layout_transform", "reshape", "transpose"})


@dataclass(frozen=True)
class QuantizedInput:
    """A conv's input (q - zero) * scale, q = clip(round(..) + c, lo, hi) on an integer grid."""

    clip: Call  # q
    moves: tuple[Call, ...]  # ops that move values between the dequantization and the conv (conv's first)
    scale: float
    zero: int
    lo: int

    @property
    def top(self) -> int:
        """The largest byte the integers take once shifted onto 0..255 (hi - lo)."""
        return int(self.clip.attr("max")) - self.lo


def quantized_input(x: Expr) -> QuantizedInput | str:
    """The quantized tensor a conv input dequantizes (a grid of at most 256 integers, one scale and
    zero point), seen through ops that move values; else why not."""
    moves: list[Call] = []
    while isinstance(x, Call) and x.op in MOVERS:
        moves.append(x)
        x = x.args[0]
    found = _dequantized(x)
    if isinstance(found, str):
        return found
    clip, scale, zero, lo = found
    return QuantizedInput(clip, tuple(moves), scale, zero, lo)


def _dequantized(x: Expr) -> tuple[Call, float, int, int] | str:
    if not (isinstance(x, Call) and x.op == "mul"):
        return "its input is not a dequantized tensor"
    inner, scale = x.args[0], _scalar(x.args[1])
    if scale is None:
        inner, scale = x.args[1], _scalar(x.args[0])
    if scale is None or not 0 < scale < math.inf:
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
    8-bit grid per output channel; None when it is not. Of the steps that fit, the coarsest is taken
    (the smallest |k|); any exact split gives the same products."""
    flat = w.reshape(w.shape[0], -1).astype(np.float64)
    if not np.isfinite(flat).all():
        return None
    peak = np.abs(flat).max(axis=1)
    steps = np.zeros(len(flat))
    ks = np.zeros(flat.shape, np.int8)
    open_rows = np.flatnonzero(peak > 0)  # an all-zero channel takes step 0

    def on_grid(rows: np.ndarray, top: int, cols: slice) -> np.ndarray:
        k = flat[rows, cols] * (top / peak[rows])[:, None]
        near = np.round(k)
        fits: np.ndarray = np.all(np.abs(k - near) <= GRID_TOLERANCE, axis=1)
        fits &= (near.min(axis=1) >= -128) & (near.max(axis=1) <= 127)
        return fits

    for top in (127, 128, *range(126, 0, -1)):  # whole-array steps: bounded work for any weight
        if not open_rows.size:
            break
        # a few weights of each row rule most steps out; the rows they admit are checked in full
        fits = on_grid(open_rows, top, slice(0, 64))
        fits[fits] = on_grid(open_rows[fits], top, slice(None))
        done = open_rows[fits]
        ks[done] = np.round(flat[done] * (top / peak[done])[:, None]).astype(np.int8)
        steps[done] = peak[done] / top
        open_rows = open_rows[~fits]
    if open_rows.size:
        return None
    # the smallest integers of each channel (a common factor moved into its step): the same products,
    # and the pairs vpmaddubsw sums the furthest from saturating (7-bit weights found as 7-bit)
    common = np.gcd.reduce(np.abs(ks.astype(np.int64)), axis=1)
    common[common == 0] = 1
    ks = (ks // common[:, None]).astype(np.int8)
    return ks.reshape(w.shape), steps * common


@dataclass(frozen=True)
class IntegerPlan:
    """What an admitted conv or matmul runs on: its quantized input, and its weight's integers k and
    steps per output channel (per column), w = k * step."""

    input: QuantizedInput
    ks: np.ndarray  # int8, output channels (columns) first
    steps: np.ndarray
    pairs_fit: bool  # vpmaddubsw's pairs cannot saturate (set where the target computes with it)
    in_block: int = 0  # a conv's input re-blocked by this many channels from planar (0: as it is)
    wide: bool = False  # its input's integers widened to int16 (vpmaddwd: DOT2)

    @property
    def stored(self) -> str:
        """The dtype its input's integers are stored in."""
        return "int16" if self.wide else "uint8"


def plan_for(
    call: Call, x: Expr, instruction: str | None, winograd_bar: float = MIN_FLOPS_SAVED_PER_BYTE
) -> IntegerPlan | str:
    """The integer kernel's plan for this blocked conv or matmul (reading `x`) on a target whose u8 x
    s8 instruction at the layout's width is `instruction` (Target.dot_instructions), else why it
    stays float (`winograd_bar`: the target's conv_algorithm.flops_bar)."""
    if call.op not in REWRITES:
        return "not a blocked conv2d or a matmul"
    if instruction is None:
        return NO_INSTRUCTION
    w = call.args[1]
    if not isinstance(w, Const):
        return "its weight is not a constant"
    if call.op == "matmul":
        if w.type.ndim != 2:
            return f"its weight is {w.type.ndim}-D (the integer kernel takes one [K, N] matrix)"
        if x.type.shape[-1] % DOT:
            return f"its reduction of {x.type.shape[-1]} is not a multiple of {DOT}"
    else:
        if call.attr("groups", 1) != 1:
            return "grouped (the integer kernel is for dense convs)"
    found = quantized_input(x)
    if isinstance(found, str):
        return found
    in_block = 0
    if call.op != "matmul" and x.type.shape[4] % DOT:
        ib = x.type.shape[4]
        last = found.moves[0] if found.moves else None
        if last is None or last.op != "layout_transform" or last.attr("src_layout") != "NCHW":
            return f"its input is blocked by {ib} channels, not a multiple of {DOT}"
        # blocked right from planar (a network's first conv, 3 channels): blocked by 4 instead, the
        # extra channel zero in the bytes and in the weight
        in_block = -(-ib // DOT) * DOT
    grid = weight_grid(w.data.T if call.op == "matmul" else unpack_weight(w.data))
    if grid is None:
        what = "column" if call.op == "matmul" else "output channel"
        return f"its weight is not on an 8-bit grid per {what}"
    ks, steps = grid
    pairs_fit = False
    if instruction == "vpmaddubsw":
        # the reduction last: a conv's input channels, a matmul's rows (ks holds its columns first)
        pairs_fit = weight_pairs_fit(ks if call.op == "matmul" else ks.transpose(0, 2, 3, 1), found.top)
    wide = instruction == "vpmaddubsw" and not pairs_fit
    if wide and call.op != "matmul" and winograd_beats_widened(call, winograd_bar):
        return WINDOW_STAYS_FLOAT
    return IntegerPlan(found, ks, steps, pairs_fit, in_block, wide)


def winograd_beats_widened(conv: Call, winograd_bar: float) -> bool:
    """Whether this blocked conv runs faster as Winograd in float than widened to int16: conv_algorithm
    admits it at WIDENED_BAR_FACTOR times the target's bar."""
    return why_direct(conv, bar=WIDENED_BAR_FACTOR * winograd_bar) is None


def why_float(
    call: Call, x: Expr, instruction: str | None, winograd_bar: float = MIN_FLOPS_SAVED_PER_BYTE
) -> str | None:
    """None when this blocked conv or matmul (reading `x`) runs on an 8-bit integer kernel, else why
    it stays float."""
    plan = plan_for(call, x, instruction, winograd_bar)
    return plan if isinstance(plan, str) else None


def integer_plans(
    graph: Graph, instruction: str | None, winograd_bar: float = MIN_FLOPS_SAVED_PER_BYTE
) -> dict[int, IntegerPlan]:
    """The plan of every conv and matmul of `graph` the rule admits, by id. A quantized tensor is
    stored once: where one of its readers takes it widened to int16, all of them do."""
    plans: dict[int, IntegerPlan] = {}
    for call in graph.calls():
        plan = plan_for(call, call.args[0], instruction, winograd_bar)
        if not isinstance(plan, str):
            plans[id(call)] = plan
    wide = {id(plan.input.clip) for plan in plans.values() if plan.wide}
    return {
        key: dataclasses.replace(plan, wide=True, pairs_fit=False) if id(plan.input.clip) in wide else plan
        for key, plan in plans.items()
    }


def verdict(plan: IntegerPlan | str) -> str:
    """What a conv or matmul runs on, as `temper explain` says it."""
    if isinstance(plan, str):
        return f"stays float: {plan}"
    return WIDENED_CONV if plan.wide else INTEGER_CONV


def as_bytes(clip: Call, lo: int, dtype: str = "uint8") -> Call:
    """The quantized integers as uint8, or int16 (shifted by -lo onto 0..255): what the producing
    kernel stores."""
    q: Expr = clip
    if lo:
        q = Call(
            "add",
            (clip, Const(f"{clip.name}.shift", np.array(-lo, np.float32))),
            (),
            clip.type,
            f"{clip.name}.shift",
        )
    stored = TensorType(clip.type.shape, dtype)
    return Call("cast", (q,), attrs_of({"to": dtype}), stored, f"{clip.name}.{DTYPES[dtype]}")


def from_bytes(stored: Call, lo: int, like: Call) -> Expr:
    """The float integers of `like` (a clip) read back from its stored bytes: equal, value for value."""
    back: Expr = Call("cast", (stored,), attrs_of({"to": "float32"}), like.type, f"{like.name}.float")
    if lo:
        back = Call(
            "add",
            (back, Const(f"{like.name}.unshift", np.array(lo, np.float32))),
            (),
            like.type,
            f"{like.name}.unshift",
        )
    return back


def _moved(stored: Expr, plan: QuantizedInput) -> Expr:
    """The stored integers moved as the dequantized input was on its way to the conv or matmul."""
    dtype = stored.type.dtype
    for move in reversed(plan.moves):
        moved = TensorType(move.type.shape, dtype)
        stored = Call(move.op, (stored, *move.args[1:]), move.attrs, moved, f"{move.name}.{DTYPES[dtype]}")
    return stored


def _scaled(sums: Call, plan: IntegerPlan, out: TensorType, shape: tuple[int, ...]) -> Expr:
    """The float result of integer sums: per output channel (`shape`: how its constants broadcast),
    the zero point times the channel's weight sum subtracted in int32, then the two scales."""
    name, q = sums.name, plan.input
    offsets = (q.zero - q.lo) * plan.ks.reshape(len(plan.ks), -1).astype(np.int64).sum(axis=1)
    offset = Const(f"{name}.offsets", offsets.astype(np.int32).reshape(shape))
    centred = Call("sub", (sums, offset), (), sums.type, f"{name}.centred")
    as_float = Call("cast", (centred,), attrs_of({"to": "float32"}), out, f"{name}.float")
    factor = Const(f"{name}.scales", (q.scale * plan.steps).astype(np.float32).reshape(shape))
    return Call("mul", (as_float, factor), (), out, f"{name}.scaled")


def _pairs(plan: IntegerPlan) -> dict[str, int]:
    """The pairs_fit attribute where the plan relies on it (targets with VNNI do not)."""
    return {PAIRS_FIT: 1} if plan.pairs_fit else {}


def as_integer_conv(call: Call, plan: IntegerPlan, stored: Expr) -> Expr:
    """conv2d_nchwc(dequantized x, w) as the integer conv over `stored` (x's integers as uint8) and its
    float epilogue."""
    w = call.args[1]
    ocb, ib, ob = w.type.shape[0], w.type.shape[4], w.type.shape[5]
    width = DOT_WIDTH[plan.stored]
    weight = Const(f"{w.name}.u8s8", pack_weight_u8s8(plan.ks, plan.in_block or ib, ob, width))
    attrs = attrs_of(dict(call.attr_dict, x_zero=plan.input.zero - plan.input.lo, **_pairs(plan)))
    if plan.in_block:  # the last move, planar to blocked, blocks by in_block instead
        planar = _moved(stored, dataclasses.replace(plan.input, moves=plan.input.moves[1:]))
        n, c, h, wd = planar.type.shape
        blocked = TensorType((n, -(-c // plan.in_block), h, wd, plan.in_block), plan.stored)
        layout = attrs_of({"src_layout": "NCHW", "dst_layout": f"NCHW{plan.in_block}c"})
        name = f"{call.name}.input_{DTYPES[plan.stored]}"
        x: Expr = Call("layout_transform", (planar,), layout, blocked, name)
    else:
        x = _moved(stored, plan.input)
    sums = Call(conv2d_int8.OP, (x, weight), attrs, TensorType(call.type.shape, "int32"), call.name)
    return _scaled(sums, plan, call.type, (1, ocb, 1, 1, ob))


def as_integer_matmul(call: Call, plan: IntegerPlan, stored: Expr) -> Expr:
    """matmul(dequantized a, w) as the integer matmul over `stored` and its float epilogue (per column)."""
    w = call.args[1]
    packed = pack_matmul_u8s8(np.ascontiguousarray(plan.ks.T), DOT_WIDTH[plan.stored])
    weight = Const(f"{w.name}.u8s8", packed)
    x = _moved(stored, plan.input)
    attrs = attrs_of(_pairs(plan))
    sums = Call(matmul_int8.OP, (x, weight), attrs, TensorType(call.type.shape, "int32"), call.name)
    return _scaled(sums, plan, call.type, (len(plan.ks),))


def integer_kernels(
    graph: Graph, instruction: str | None, winograd_bar: float = MIN_FLOPS_SAVED_PER_BYTE
) -> Graph:
    """Every blocked conv and matmul the rule admits on an integer kernel (none where `instruction`,
    the target's at the layout's vector width, is None; `winograd_bar` is the target's
    conv_algorithm.flops_bar). Each quantized tensor such
    a kernel reads is stored once, as bytes or int16: every other reader of its integers (a residual add's
    dequantization) reads them back from those bytes, so no float copy is written beside them."""
    if instruction is None:
        return graph
    plans = integer_plans(graph, instruction, winograd_bar)
    kept = {id(plan.input.clip): plan for plan in plans.values()}  # clip -> how it is stored
    stored: dict[int, Call] = {}  # clip -> its bytes

    def rule(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        if id(call) in kept:
            clip, lo = Call(call.op, args, call.attrs, call.type, call.name), kept[id(call)].input.lo
            stored[id(call)] = as_bytes(clip, lo, kept[id(call)].stored)
            return from_bytes(stored[id(call)], lo, clip)
        plan = plans.get(id(call))
        if plan is None:
            return None
        build = as_integer_matmul if call.op == "matmul" else as_integer_conv
        return build(call, plan, stored[id(plan.input.clip)])

    return rewrite(graph, rule)
