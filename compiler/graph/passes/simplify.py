"""Algebraic clean-ups that exporters leave behind; each rule removes a kernel or merges two.

- reshape/expand/pad/slice/resize/cast/transpose/concat that change nothing -> their input
- reshape(reshape(x)) -> reshape(x); transpose(transpose(x)) -> one transpose
- x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 with a constant 0 / 1 that does not broadcast x -> x
- pow(x, c) of a float x with a constant c, all one value, that does not broadcast x: c = 1 -> x,
  2 -> x * x, 3 -> x * x * x, 4 -> (x * x) * (x * x), 0.5 -> sqrt(x), -1 -> reciprocal(x)
- a conv2d's kernel taps that read only the zero padding, at every output position, are cut off
  (weight and pads with them): DeepLab's atrous convs of rate 24 and 36 over a 14x14 plane are 1x1
  convs in all but name, and would otherwise multiply nine times the work, eight ninths by zeros
"""

from __future__ import annotations

import numpy as np

from compiler.graph.ir import Call, Const, Expr, Graph, attrs_of, rewrite
from compiler.ops.common import FLOAT


def _is_const(x: Expr, value: float) -> bool:
    return isinstance(x, Const) and bool(np.all(x.data == value))


def _identity_operand(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    """The operand a neutral-element binary op returns, if its result type is that operand's."""
    if len(args) != 2:
        return None
    a, b = args
    neutral = {"add": (0, 0), "sub": (None, 0), "mul": (1, 1), "div": (None, 1)}.get(call.op)
    if neutral is None:
        return None
    left, right = neutral
    if right is not None and _is_const(b, right) and a.type == call.type:
        return a
    if left is not None and _is_const(a, left) and b.type == call.type:
        return b
    return None


def _noop(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    """The input, if this data-movement call leaves it unchanged."""
    x = args[0]
    if x.type != call.type:
        return None
    attrs = call.attr_dict
    if call.op in ("reshape", "expand", "cast"):
        return x
    if call.op == "transpose" and list(attrs["perm"]) == sorted(attrs["perm"]):
        return x
    if call.op == "concat" and len(args) == 1:
        return x
    if call.op == "pad" and not any(attrs["pads"]):
        return x
    if call.op == "slice" and all(s == 1 for s in attrs["steps"]):
        return x
    if call.op == "resize" and all(s == 1.0 for s in attrs["scales"]):
        return x
    return None


def _merge(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    """Collapse two consecutive reshapes or transposes into one."""
    x = args[0]
    if call.op == "reshape" and isinstance(x, Call) and x.op == "reshape":
        inner = x.args[0]
        return inner if inner.type == call.type else Call("reshape", x.args, call.attrs, call.type, call.name)
    if call.op == "transpose" and isinstance(x, Call) and x.op == "transpose":
        inner, outer = x.attr("perm"), call.attr("perm")
        perm = tuple(inner[p] for p in outer)
        if perm == tuple(range(len(perm))):
            return x.args[0]
        return Call("transpose", x.args, (("perm", perm),), call.type, call.name)
    return None


def _uniform_value(x: Expr) -> float | None:
    """The one value every element of a constant holds, if there is one."""
    if not isinstance(x, Const) or x.data.size == 0:
        return None
    first = x.data.flat[0]
    return float(first) if bool(np.all(x.data == first)) else None


def _power(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    """pow by a constant small integer, a half or minus one as multiplies, sqrt or reciprocal: a general
    pow costs a log and an exp per element, and exporters write tanh-GELU's cube as pow(x, 3).

    Each multiply rounds where pow rounds once, so cubes and fourth powers may differ in the last bit
    or two; sqrt differs from pow only at -0 (-0, not +0) and -inf (NaN, not +inf)."""
    if call.op != "pow":
        return None
    x, c = args
    exponent = _uniform_value(c)
    if exponent is None or x.type != call.type or x.type.dtype != FLOAT:
        return None

    def op(name: str, *operands: Expr) -> Call:
        return Call(name, operands, (), call.type, call.name)

    if exponent == 1.0:
        return x
    if exponent == 2.0:
        return op("mul", x, x)
    if exponent == 3.0:
        return op("mul", op("mul", x, x), x)
    if exponent == 4.0:
        square = op("mul", x, x)
        return op("mul", square, square)
    if exponent == 0.5:
        return op("sqrt", x)
    if exponent == -1.0:
        return op("reciprocal", x)
    return None


def input_taps(
    size: int, out: int, taps: int, stride: int, dilation: int, pad: int
) -> tuple[int, int] | None:
    """First and last tap of a window axis that read the input (not its padding) at some output
    position: tap t reads o * stride + t * dilation - pad for o in [0, out), an interval that moves
    right as t grows, so such taps are a contiguous run. None when no tap reads the input."""
    inside = [
        t for t in range(taps) if t * dilation - pad < size and (out - 1) * stride + t * dilation - pad >= 0
    ]
    return (inside[0], inside[-1]) if inside else None


def _padding_taps(call: Call, args: tuple[Expr, ...]) -> Expr | None:
    """The conv2d without the kernel rows and columns that only ever multiply padding (their
    products are zeros), when that leaves its pads non-negative."""
    x, w = args if call.op == "conv2d" else (None, None)
    if x is None or not isinstance(w, Const):
        return None
    kept: list[tuple[int, int]] = []
    pads = list(call.attr("pads"))
    for axis in (0, 1):
        size, out, taps = x.type.shape[2 + axis], call.type.shape[2 + axis], w.type.shape[2 + axis]
        stride, dilation = call.attr("strides")[axis], call.attr("dilations")[axis]
        run = input_taps(size, out, taps, stride, dilation, pads[axis])
        if run is None:
            return None
        first, last = run
        pads[axis] -= first * dilation  # pads: top, left, bottom, right
        pads[axis + 2] -= (taps - 1 - last) * dilation
        kept.append(run)
    if kept == [(0, w.type.shape[2] - 1), (0, w.type.shape[3] - 1)] or min(pads) < 0:
        return None
    (top, bottom), (left, right) = kept
    data = np.ascontiguousarray(w.data[:, :, top : bottom + 1, left : right + 1])
    weight = Const(f"{w.name}.taps{top}_{bottom}x{left}_{right}", data)
    attrs = attrs_of({**call.attr_dict, "pads": tuple(pads)})
    return Call("conv2d", (x, weight), attrs, call.type, call.name)


def simplify(graph: Graph) -> Graph:
    def rule(call: Call, args: tuple[Expr, ...]) -> Expr | None:
        if call.op == "fused" or not args:
            return None
        return (
            _identity_operand(call, args)
            or _noop(call, args)
            or _merge(call, args)
            or _power(call, args)
            or _padding_taps(call, args)
        )

    return rewrite(graph, rule)
