"""ONNX recurrent layers (RNN, GRU, LSTM) -> graph ops, unrolled over their time steps.

The graph IR has no loops and every shape is static, so a sequence of T steps becomes T copies of
one step's graph ops, chained by the hidden (and, for LSTM, cell) state. The input's share of every
gate is computed for the whole sequence before the recurrence (X W^T plus the biases that do not
depend on the state: one matmul, two for GRU, see PROJECTIONS); each step reads its rows of it in
place, adds its recurrent product H R^T and applies the gates. A
reverse direction takes the steps last to first; Y holds every step's hidden state at its time
position. The steps a model's recurrences unroll in all are bounded by `Limits.recurrence_steps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from compiler.frontend.context import NodeContext, OpConverter, ScanInfo
from compiler.frontend.convert_tensor import emit_slice
from compiler.graph.ir import Expr

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
"""Gate blocks stacked in W, R and each half of B (ONNX orders them i o f c for LSTM, z r h for GRU)."""
DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}
"""The activations a step may use (ONNX name -> graph op); the parametrised ones are refused."""
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
PROJECTIONS = {"RNN": ((0, 1),), "GRU": ((0, 2), (2, 1)), "LSTM": ((0, 4),)}
"""The input projections of a step, as (first gate block, blocks): one of every gate, but for GRU
one of z and r and one of h, which the step uses apart (so each step's share of each is a
contiguous run of rows, read in place)."""


def _check(node: onnx.NodeProto, attrs: dict[str, Any], info: ScanInfo) -> str | None:
    """Sigmoid, Tanh and Relu activations, no clip, no LSTM input_forget, sequence_lens a constant."""
    op = node.op_type
    if attrs.get("direction", "forward") not in DIRECTIONS:
        return f"{op} direction {attrs['direction']!r}"
    names = attrs.get("activations")
    if names is not None and any(a not in ACTIVATIONS for a in names):
        return f"{op} activations {list(names)} (supported: {', '.join(ACTIVATIONS)})"
    if "clip" in attrs:
        return f"{op} clip"
    if attrs.get("input_forget", 0):
        return "LSTM input_forget"
    if len(node.input) > 4 and node.input[4] and node.input[4] not in info.consts:
        return f"{op} sequence_lens computed at run time"
    return None


@dataclass(frozen=True)
class _Direction:
    """One direction of a layer: its weights, activations and how one step updates the state."""

    ctx: NodeContext
    hidden: int
    activations: tuple[str, ...]  # graph ops f, g (, h)
    recurrent: tuple[Expr, ...]  # R^T [hidden, gates * hidden]; for GRU its z r and its h columns
    state_bias: Expr | None  # GRU's Rbh: the h gate's recurrent bias, added inside the step
    peepholes: tuple[Expr, ...]  # LSTM's P of this direction split into i, o, f ([hidden] each), or ()

    @classmethod
    def of(
        cls,
        ctx: NodeContext,
        hidden: int,
        activations: tuple[str, ...],
        rt: Expr,
        state_bias: Expr | None,
        peepholes: Expr | None,
    ) -> _Direction:
        """The direction with its weight blocks sliced once, not once per step."""
        recurrent: tuple[Expr, ...] = (rt,)
        if ctx.op_type == "GRU":
            recurrent = tuple(
                emit_slice(ctx, rt, {1: span}) for span in ((0, 2 * hidden, 1), (2 * hidden, 3 * hidden, 1))
            )
        blocks: tuple[Expr, ...] = ()
        if peepholes is not None:
            blocks = tuple(
                emit_slice(ctx, peepholes, {0: (k * hidden, (k + 1) * hidden, 1)}) for k in range(3)
            )
        return cls(ctx, hidden, activations, recurrent, state_bias, blocks)

    def projection(self, projected: Expr, t: int) -> Expr:
        """Step t of an input projection [steps, batch, width] as [batch, width]: one contiguous run
        of its rows, which the compiled model reads in place (a view, no kernel), so every step's
        kernels are the same workload, compiled once."""
        _, batch, width = projected.type.shape
        taken = emit_slice(self.ctx, projected, {0: (t, t + 1, 1)})
        return self.ctx.emit("reshape", [taken], shape=(batch, width))

    def gate(self, z: Expr, k: int, count: int = 1) -> Expr:
        """Gate block k (count blocks) of a [batch, gates * hidden] value."""
        return emit_slice(self.ctx, z, {1: (k * self.hidden, (k + count) * self.hidden, 1)})

    def act(self, which: int, z: Expr) -> Expr:
        return self.ctx.emit(self.activations[which], [z])

    def step(self, projected: Sequence[Expr], t: int, h: Expr, c: Expr) -> tuple[Expr, Expr]:
        """The next (hidden, cell) state at time step t of the input projections [steps, batch, width]
        (`PROJECTIONS`: every gate's, or GRU's z and r, then its h)."""
        emit, op = self.ctx.emit, self.ctx.op_type
        if op == "GRU":
            return self._gru(projected, t, h), c
        xt = self.projection(projected[0], t)
        if op == "RNN":
            return self.act(0, emit("add", [xt, emit("matmul", [h, self.recurrent[0]])])), c
        z = emit("add", [xt, emit("matmul", [h, self.recurrent[0]])])
        i, o, f, candidate = (self.gate(z, k) for k in range(4))
        if self.peepholes:
            i = emit("add", [i, emit("mul", [self.peepholes[0], c])])
            f = emit("add", [f, emit("mul", [self.peepholes[2], c])])
        kept = emit("mul", [self.act(0, f), c])
        cell = emit("add", [kept, emit("mul", [self.act(0, i), self.act(1, candidate)])])
        if self.peepholes:
            o = emit("add", [o, emit("mul", [self.peepholes[1], cell])])
        return emit("mul", [self.act(0, o), self.act(2, cell)]), cell

    def _gru(self, projected: Sequence[Expr], t: int, h: Expr) -> Expr:
        emit = self.ctx.emit
        rt_zr, rt_h = self.recurrent
        zr = emit("add", [self.projection(projected[0], t), emit("matmul", [h, rt_zr])])
        update, reset = self.act(0, self.gate(zr, 0)), self.act(0, self.gate(zr, 1))
        assert self.state_bias is not None
        if self.ctx.attr("linear_before_reset", 0):
            recurrent = emit("mul", [reset, emit("add", [emit("matmul", [h, rt_h]), self.state_bias])])
        else:
            recurrent = emit("add", [emit("matmul", [emit("mul", [reset, h]), rt_h]), self.state_bias])
        candidate = self.act(1, emit("add", [self.projection(projected[1], t), recurrent]))
        # (1 - z) * candidate + z * h
        return emit("add", [candidate, emit("mul", [update, emit("sub", [h, candidate])])])


def _activations(ctx: NodeContext, directions: int) -> list[tuple[str, ...]]:
    """Each direction's activations as graph ops (f, g, h in ONNX's order)."""
    default = DEFAULT_ACTIVATIONS[ctx.op_type]
    names = list(ctx.attr("activations", default * directions))
    per = len(default)
    if len(names) != per * directions:
        raise ctx.error(f"{ctx.op_type} needs {per} activations per direction, got {names}")
    return [tuple(ACTIVATIONS[n] for n in names[d * per : (d + 1) * per]) for d in range(directions)]


def _pick(ctx: NodeContext, value: Expr, d: int) -> Expr:
    """Direction d of a [dirs, ...] value, without its leading axis."""
    taken = emit_slice(ctx, value, {0: (d, d + 1, 1)})
    return ctx.emit("reshape", [taken], shape=value.type.shape[1:])


def _initial(ctx: NodeContext, i: int, layout: int, shape: tuple[int, int, int]) -> Expr | None:
    """initial_h (input 5) or initial_c (input 6) as [dirs, batch, hidden]; None when omitted."""
    value = ctx.optional(i)
    if value is None:
        return None
    if layout == 1 and value.type.ndim == 3:
        value = ctx.emit("transpose", [value], perm=(1, 0, 2))
    if value.type.shape != shape:
        what = "initial_h" if i == 5 else "initial_c"
        raise ctx.error(
            f"{ctx.op_type} {what} must be {list(shape)} in layout 0, got {list(value.type.shape)}"
        )
    return value


def _biases(ctx: NodeContext, bias: Expr | None, d: int, gates: int, hidden: int) -> tuple[Expr, Expr | None]:
    """(the bias added to the input projection [gates * hidden], GRU's h-gate recurrent bias [hidden]):
    Wb + Rb, but for GRU the h gate's Rbh, which the reset gate scales, stays out of the projection."""
    width = gates * hidden
    if bias is None:
        zeros = ctx.new_const(np.zeros(width, np.float32), name=f"{ctx.name}.bias")
        return zeros, (emit_slice(ctx, zeros, {0: (0, hidden, 1)}) if ctx.op_type == "GRU" else None)
    both = _pick(ctx, bias, d)
    w_bias = emit_slice(ctx, both, {0: (0, width, 1)})
    r_bias = emit_slice(ctx, both, {0: (width, 2 * width, 1)})
    if ctx.op_type != "GRU":
        return ctx.emit("add", [w_bias, r_bias]), None
    zr = ctx.emit(
        "add",
        [emit_slice(ctx, w_bias, {0: (0, 2 * hidden, 1)}), emit_slice(ctx, r_bias, {0: (0, 2 * hidden, 1)})],
    )
    projected = ctx.emit("concat", [zr, emit_slice(ctx, w_bias, {0: (2 * hidden, width, 1)})], axis=0)
    return projected, emit_slice(ctx, r_bias, {0: (2 * hidden, width, 1)})


def _live(ctx: NodeContext, lengths: Sequence[int] | None, t: int, d: int) -> Expr | bool:
    """Which sequences step t advances, as a [batch, 1] boolean constant; True when all of them (no
    padding, or none has ended), False when none. A sequence of length n takes steps 0..n-1 in either
    direction: a reverse pass leaves its state untouched through the padding past n - 1 and starts at
    step n - 1 from the initial state, as ONNX defines it."""
    if lengths is None or all(n > t for n in lengths):
        return True
    if not any(n > t for n in lengths):
        return False
    mask = np.array([n > t for n in lengths]).reshape(len(lengths), 1)
    return ctx.new_const(mask, name=f"{ctx.name}.live{d}_{t}")


def _recurrent(ctx: NodeContext) -> Sequence[Expr | None]:
    op, gates = ctx.op_type, GATES[ctx.op_type]
    x, w, r, bias = ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.optional(3)
    direction, layout = str(ctx.attr("direction", "forward")), int(ctx.attr("layout", 0))
    directions = DIRECTIONS[direction]
    if x.type.ndim != 3 or layout not in (0, 1):
        raise ctx.error(f"{op} X must be 3-D in layout 0 or 1, got {list(x.type.shape)} in layout {layout}")
    if layout == 1:  # [batch, seq, input] -> [seq, batch, input]
        x = ctx.emit("transpose", [x], perm=(1, 0, 2))
    steps, batch, inputs = x.type.shape
    hidden = int(ctx.attr("hidden_size", r.type.shape[-1] if r.type.ndim == 3 else 0))
    for what, value, expect in (
        ("W", w, (directions, gates * hidden, inputs)),
        ("R", r, (directions, gates * hidden, hidden)),
        ("B", bias, (directions, 2 * gates * hidden)),
        ("P", ctx.optional(7) if op == "LSTM" else None, (directions, 3 * hidden)),
    ):
        if value is not None and value.type.shape != expect:
            raise ctx.error(
                f"{op} {what} must be {list(expect)} ({direction}, hidden_size {hidden}, {inputs} inputs), "
                f"got {list(value.type.shape)}"
            )
    if min(steps, batch, hidden) < 1:
        raise ctx.error(
            f"{op} needs a step, a batch and a hidden unit, got X {list(x.type.shape)}, hidden {hidden}"
        )
    taken = ctx.budget.unrolled
    if not ctx.budget.unroll(steps * directions):
        raise ctx.error(
            f"{op} over {steps} time steps ({direction}): a model's recurrences unroll at most "
            f"{ctx.budget.limits.recurrence_steps} steps in all, {taken} taken before this node"
        )
    lengths = ctx.ints(4, f"{op} sequence_lens")
    if lengths is not None and (len(lengths) != batch or any(not 1 <= n <= steps for n in lengths)):
        raise ctx.error(
            f"{op} sequence_lens {lengths[:8]} must give each of the {batch} sequences a length "
            f"within 1..{steps} (the steps of X)"
        )
    # padded sequences: at step t only those longer than t advance (`_live`)
    padded = lengths if lengths is not None and any(n != steps for n in lengths) else None
    states = [_initial(ctx, i, layout, (directions, batch, hidden)) for i in (5, 6)]
    flat = ctx.emit("reshape", [x], shape=(steps * batch, inputs))
    ys, finals, cells = [], [], []
    for d, activations in enumerate(_activations(ctx, directions)):
        projection_bias, state_bias = _biases(ctx, bias, d, gates, hidden)
        wt = ctx.emit("transpose", [_pick(ctx, w, d)], perm=(1, 0))
        projected = []
        for k, count in PROJECTIONS[op]:
            span = (k * hidden, (k + count) * hidden, 1)
            part_wt = wt if count == gates else emit_slice(ctx, wt, {1: span})
            part_bias = projection_bias if count == gates else emit_slice(ctx, projection_bias, {0: span})
            product = ctx.emit("add", [ctx.emit("matmul", [flat, part_wt]), part_bias])
            projected.append(ctx.emit("reshape", [product], shape=(steps, batch, count * hidden)))
        peepholes = ctx.optional(7) if op == "LSTM" else None
        part = _Direction.of(
            ctx,
            hidden,
            activations,
            ctx.emit("transpose", [_pick(ctx, r, d)], perm=(1, 0)),
            state_bias,
            _pick(ctx, peepholes, d) if peepholes is not None else None,
        )
        zeros = ctx.new_const(np.zeros((batch, hidden), np.float32), name=f"{ctx.name}.zeros")
        h = _pick(ctx, states[0], d) if states[0] is not None else zeros
        c = _pick(ctx, states[1], d) if states[1] is not None and op == "LSTM" else zeros
        backwards = direction == "reverse" or d == 1
        hs: dict[int, Expr] = {}
        for t in reversed(range(steps)) if backwards else range(steps):
            live = _live(ctx, padded, t, d)
            if live is False:  # every sequence has ended by step t: no state changes, outputs are 0
                hs[t] = ctx.emit("reshape", [zeros], shape=(1, 1, batch, hidden))
                continue
            h_next, c_next = part.step(projected, t, h, c)
            out = h_next
            if live is not True:  # some have ended: they keep their state and output 0
                h_next = ctx.emit("where", [live, h_next, h])
                c_next = ctx.emit("where", [live, c_next, c]) if op == "LSTM" else c_next
                out = ctx.emit("where", [live, h_next, zeros])
            h, c = h_next, c_next
            hs[t] = ctx.emit("reshape", [out], shape=(1, 1, batch, hidden))
        ys.append(ctx.emit("concat", [hs[t] for t in range(steps)], axis=0) if steps > 1 else hs[0])
        finals.append(ctx.emit("reshape", [h], shape=(1, batch, hidden)))
        cells.append(ctx.emit("reshape", [c], shape=(1, batch, hidden)))
    y = ys[0] if directions == 1 else ctx.emit("concat", ys, axis=1)  # [seq, dirs, batch, hidden]
    y_h = finals[0] if directions == 1 else ctx.emit("concat", finals, axis=0)  # [dirs, batch, hidden]
    y_c = cells[0] if directions == 1 else ctx.emit("concat", cells, axis=0)
    if layout == 1:  # [batch, seq, dirs, hidden] and [batch, dirs, hidden]
        y = ctx.emit("transpose", [y], perm=(2, 0, 1, 3))
        y_h = ctx.emit("transpose", [y_h], perm=(1, 0, 2))
        y_c = ctx.emit("transpose", [y_c], perm=(1, 0, 2))
    return [y, y_h, y_c] if op == "LSTM" else [y, y_h]


CONVERTERS: dict[str, OpConverter] = {op: OpConverter(_recurrent, _check) for op in GATES}
