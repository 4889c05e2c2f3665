"""Transposed convolutions as ordinary convolutions over their output phases (sub-pixel convolution).

A transposed conv of stride s scatters every input pixel through the whole kernel; gathered per
output pixel, only the taps congruent to that pixel's position modulo s meet an input pixel. So the
output splits into s_h x s_w phases (the pixels whose position is r_h, r_w modulo the strides), and
each phase is a stride-1 convolution of the input with the kernel's taps of that residue, flipped:

    y_full[s*q + r] = sum_m x[q - m] * w[r + s*m]        (m < M = ceil(K / s))

All phases stack as output channels of one conv2d (C_out * s_h * s_w channels, M_h x M_w taps, the
taps a phase lacks are zero), whose output a depth-to-space rearrangement interleaves; a slice then
crops what the transposed conv's pads cut off. The conv gets the blocked layout, the tuned
schedules and fused epilogues of every other conv, where the transposed conv's own gather form
tests every tap of every output pixel against the stride and vectorises nothing.

A dilated transposed conv of stride 1 is one conv with the same dilation; with a stride, its kernel
is first spread out with zeros (the dilated taps of each phase). The rule keeps a transposed conv
only where it cannot apply (`why_kept`): a weight known only at run time, or pads that cut off all
that the input writes (leading input rows whose outputs the pads cut off are left out of the conv).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compiler.graph.ir import AttrValue, Call, Const, Expr, Graph, attrs_of, rewrite
from compiler.tensor_type import TensorType

# graph op -> the op this pass turns it into (`temper explain` lists the implementations)
REWRITES = {"conv_transpose2d": "conv2d"}
# how many times the transposed conv's own weight the phase conv's may hold: a stride far beyond the
# kernel leaves most phases without taps, and their zero filters would grow as the stride squared
# (a hostile model's stride of 10^5 would ask for 10^10 of them)
MAX_WEIGHT_GROWTH = 16


@dataclass(frozen=True)
class _Axis:
    """One spatial axis of the rewrite: the conv's taps and pads, the phases and the crop."""

    phases: int  # the stride: output positions modulo it are the phases
    taps: int  # M: the conv's kernel size along the axis
    dilation: int  # the conv's dilation (the transposed conv's, at stride 1; else 1)
    spread: int  # the dilation the kernel is spread out by with zeros (stride > 1 only)
    skip: int  # leading input rows the conv leaves out (the pads cut off all they write)
    pad_begin: int
    pad_end: int
    rows: int  # T: the conv's output size (each phase's)
    crop: int  # where the transposed conv's output starts in the interleaved phases


def _axis(size: int, kernel: int, stride: int, dilation: int, pad: int, out: int) -> _Axis | None:
    """The rewrite along one axis (input `size`, output `out`, leading pad `pad`), None when the
    pads cut off all that the input writes."""
    if stride == 1:
        spread, conv_dilation, reach = 1, dilation, kernel
    else:
        spread, conv_dilation, reach = dilation, 1, dilation * (kernel - 1) + 1
    taps = -(-reach // stride)
    first = pad // stride  # the first phase row the output needs
    pad_begin = conv_dilation * (taps - 1) - first
    skip = max(0, -pad_begin)  # input rows whose every output the pads cut off
    if skip >= size:
        return None
    pad_begin, size = pad_begin + skip, size - skip
    crop = pad - stride * first
    rows = -(-(crop + out) // stride)
    pad_end = rows - size - pad_begin + conv_dilation * (taps - 1)
    if pad_end < 0:  # the conv covers more than the output needs: the slice cuts it off
        pad_end = 0
        rows = size + pad_begin - conv_dilation * (taps - 1)
    return _Axis(stride, taps, conv_dilation, spread, skip, pad_begin, pad_end, rows, crop)


def _axes(call: Call) -> tuple[_Axis, _Axis] | None:
    x, w = call.args
    strides, dilations = call.attr("strides"), call.attr("dilations")
    pads = call.attr("pads")
    sizes, kernel, out = x.type.shape[2:], w.type.shape[2:], call.type.shape[2:]
    made = tuple(_axis(sizes[a], kernel[a], strides[a], dilations[a], pads[a], out[a]) for a in range(2))
    if made[0] is None or made[1] is None:
        return None
    return made[0], made[1]


def why_kept(call: Call) -> str | None:
    """None when this conv_transpose2d runs as a conv over its phases, else why it stays as it is."""
    if call.op != "conv_transpose2d":
        return "not a transposed conv"
    w = call.args[1]
    if not isinstance(w, Const):
        return "its weight is not a constant (its phases cannot be cut at compile time)"
    if w.type.dtype != "float32" or call.args[0].type.dtype != "float32":
        return f"{call.args[0].type.dtype} (the rewrite is for float32)"
    axes = _axes(call)
    if axes is None:
        return f"its pads {list(call.attr('pads'))} cut off all that its input writes"
    growth = math.prod(a.phases * a.taps for a in axes) / math.prod(w.type.shape[2:])
    if growth > MAX_WEIGHT_GROWTH:
        return (
            f"its stride {list(call.attr('strides'))} is so far beyond its kernel that the phases' "
            f"filters would be {growth:.0f}x its weight, mostly zeros (at most {MAX_WEIGHT_GROWTH}x)"
        )
    return None


def phase_weight(w: np.ndarray, groups: int, axes: tuple[_Axis, _Axis]) -> np.ndarray:
    """The conv's weight [groups * (C_out/groups) * s_h * s_w, C_in/groups, M_h, M_w] from the
    transposed conv's [C_in, C_out/groups, K_h, K_w]: output channel (oc, r_h, r_w) holds the taps
    r + s*m of oc's kernel, flipped (m counts back from M - 1), zero where the kernel has none."""
    (ah, aw) = axes
    cin, ocg, kh, kw = w.shape
    spread = np.zeros((cin, ocg, ah.spread * (kh - 1) + 1, aw.spread * (kw - 1) + 1), dtype=np.float32)
    spread[:, :, :: ah.spread, :: aw.spread] = w
    padded = np.zeros((cin, ocg, ah.taps * ah.phases, aw.taps * aw.phases), dtype=np.float32)
    padded[:, :, : spread.shape[2], : spread.shape[3]] = spread
    taps = padded.reshape(groups, cin // groups, ocg, ah.taps, ah.phases, aw.taps, aw.phases)
    taps = taps[:, :, :, ::-1, :, ::-1, :]
    ordered = taps.transpose(0, 2, 4, 6, 1, 3, 5)  # [g, oc, r_h, r_w, ic, m_h, m_w]
    return np.ascontiguousarray(ordered.reshape(-1, cin // groups, ah.taps, aw.taps))


def _call(op: str, arg: Expr, out: tuple[int, ...], name: str, **attrs: tuple[int, ...]) -> Call:
    return Call(op, (arg,), attrs_of(attrs), TensorType(out, arg.type.dtype), name)


def _crop(x: Expr, start: tuple[int, int], shape: tuple[int, ...], name: str) -> Call:
    """The `shape` window of NCHW `x` whose plane starts at `start`."""
    starts = (0, 0, *start)
    ends = tuple(b + d for b, d in zip(starts, shape, strict=True))
    return _call("slice", x, shape, name, starts=starts, ends=ends, axes=(0, 1, 2, 3), steps=(1, 1, 1, 1))


def as_phase_conv(call: Call, x: Expr) -> Expr:
    """conv_transpose2d(x, w) as conv2d over its phases, interleaved, cropped (`why_kept` is None)."""
    w = call.args[1]
    assert isinstance(w, Const)
    axes = _axes(call)
    assert axes is not None
    ah, aw = axes
    groups = int(call.attr("groups"))
    n, cout = call.type.shape[:2]
    weight = Const(f"{w.name}.phases", phase_weight(w.data, groups, axes))
    if ah.skip or aw.skip:
        _, cin, h, wd = x.type.shape
        x = _crop(x, (ah.skip, aw.skip), (n, cin, h - ah.skip, wd - aw.skip), f"{call.name}.skip")
    conv_type = TensorType((n, cout * ah.phases * aw.phases, ah.rows, aw.rows), call.type.dtype)
    attrs: dict[str, AttrValue] = {
        "strides": (1, 1),
        "pads": (ah.pad_begin, aw.pad_begin, ah.pad_end, aw.pad_end),
        "dilations": (ah.dilation, aw.dilation),
        "groups": groups,
    }
    y: Expr = Call("conv2d", (x, weight), attrs_of(attrs), conv_type, call.name)
    if ah.phases * aw.phases > 1:
        split = (n, cout, ah.phases, aw.phases, ah.rows, aw.rows)
        y = _call("reshape", y, split, f"{call.name}.phases", shape=split)
        spaced = (n, cout, ah.rows, ah.phases, aw.rows, aw.phases)
        y = _call("transpose", y, spaced, f"{call.name}.interleave", perm=(0, 1, 4, 2, 5, 3))
        full = (n, cout, ah.rows * ah.phases, aw.rows * aw.phases)
        y = _call("reshape", y, full, f"{call.name}.interleaved", shape=full)
    if y.type.shape != call.type.shape:
        y = _crop(y, (ah.crop, aw.crop), call.type.shape, f"{call.name}.crop")
    return y


def conv_transpose_to_conv(graph: Graph) -> Graph:
    """Every transposed conv the rule admits as a conv over its output phases."""

    def rule(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        if call.op != "conv_transpose2d" or why_kept(call) is not None:
            return None
        return as_phase_conv(call, args[0])

    return rewrite(graph, rule)


def describe(call: Call) -> str:
    """What the rewrite makes of a transposed conv it admits (for `temper explain`)."""
    axes = _axes(call)
    assert axes is not None
    ah, aw = axes
    phases = f"{ah.phases}x{aw.phases} output phases, " if ah.phases * aw.phases > 1 else ""
    return f"runs as a conv ({phases}{ah.taps}x{aw.taps} taps each)"
