"""Layout alteration: convolution chains run in the blocked channel layout NCHW{b}c.

b is the target's float vector lanes. Every convolution that can run blocked becomes conv2d_nchwc
with its weight packed at compile time ([OC/b, C/ib, KH, KW, ib, b], a constant); the values between
such convolutions stay blocked as long as their ops are layout-agnostic: elementwise and
broadcasting ops (bias, activations, residual adds, squeeze-excitation scales; their constant
operands are re-laid out here), pooling windows, reductions over the spatial axes (global pooling)
and channel concatenation. A layout_transform is inserted only where a value crosses between a blocked and a
planar op (the chain's input, its outputs, ops with no blocked form), at most once per value and
direction, so consecutive blocked ops never convert between them.

What runs blocked (every rule states its reason in `why_planar` for `temper explain`):
- dense convs; their input block is b, or for a stem with fewer channels than b (an RGB image) all
  its channels;
- depthwise convs (one channel per group) and grouped convs whose groups are whole blocks of b, or
  narrower groups that a block holds a whole number of (RegNet's groups of 8 on a 16-lane target):
  those run as groups of b channels with a block-diagonal weight, zeros between the narrow groups,
  unless that multiplies the work by more than MAX_WIDENING;
- grouped convs whose groups are whole half blocks but not whole blocks (RegNet's groups of 24 on a
  16-lane target): they run in NCHW{b/2}c, half vectors, with layout transforms at their input and
  output (`group_block`), where planar they would run along short output rows.
A chain whose only convs are depthwise (one, say, between planar ops) stays NCHW: it does a few
products per value, so the layout transforms at its ends would cost more than its blocked kernels
save, and the planar depthwise kernel runs along the rows (`depthwise_chains`).
Channel counts that b does not divide (ShuffleNet's 116, 24 or 40 on a 16-lane target) are padded to
whole blocks with zero lanes, unless that wastes more than half of the real work; a dense conv whose
output channels would, but fill half blocks (8 channels on a 16-lane target), writes NCHW{b/2}c
(`narrow_block`), read by the next conv as its input block. Packed weights are
zero for those lanes, so they never reach a real channel, and only ops that keep finite values
finite (bias, activations, residuals, a quantization's rounding; a division only by one nonzero
constant) run on padded values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from compiler.graph.ir import AttrValue, Call, Const, Expr, Graph, attrs_of
from compiler.ops import registry
from compiler.ops.conv2d_blocked import pack_weight
from compiler.ops.layout import PLANAR, blocked_layout, to_blocked
from compiler.ops.registry import Pattern
from compiler.tensor_type import TensorType

# graph op -> the op this pass may turn it into (`temper explain` lists the implementations)
REWRITES = {"conv2d": "conv2d_nchwc"}
_SPATIAL_REDUCTIONS = ("reduce_mean", "reduce_max", "reduce_sum")
_POOLS = ("max_pool2d", "avg_pool2d")
_LAYOUT_DEPENDENT = ("batch_norm",)  # BROADCAST ops whose operands are not numpy-broadcast
# elementwise ops that map finite values (zero padding, zero-padded constants) to finite values: the
# ones allowed on values with padded lanes (a division of padding by padding would be NaN, and NaN
# times a zero weight is still NaN)
_FINITE = frozenset(
    {
        *("add", "sub", "mul", "maximum", "minimum", "prelu", "relu", "clip", "leaky_relu", "elu"),
        *("selu", "celu", "sigmoid", "tanh", "hard_sigmoid", "hard_swish", "gelu", "erf", "neg"),
        *("abs", "softplus", "softsign", "mish", "thresholded_relu", "exp"),
        *("round", "floor", "ceil", "cast"),  # a quantization's rounding and its bytes
    }
)


def _keeps_finite(call: Call) -> bool:
    """Whether the elementwise op maps finite values to finite values: an op of _FINITE, or a division
    by one finite, nonzero constant (a quantization's scale: padding / scale is 0)."""
    if call.op in _FINITE:
        return True
    if call.op != "div" or not isinstance(call.args[1], Const):
        return False
    divisor = call.args[1].data
    return (
        divisor.size == 1 and divisor.dtype.kind == "f" and bool(np.isfinite(divisor).all() and divisor.all())
    )


# padding channels up to whole blocks may cost at most this much of the real work
MAX_PADDING = 1.5
# groups narrower than a block widened to whole blocks may multiply the work by at most this: the
# zeros between them are multiplied too, but in vector registers instead of one narrow group at a time
MAX_WIDENING = 2


def _padded(channels: int, block: int) -> int:
    return -(-channels // block) * block


def why_planar(call: Call, block: int) -> str | None:
    """None when this conv2d can run blocked with channel block `block`, else the reason."""
    if call.op != "conv2d":
        return "not a conv2d"
    x, w = call.args
    if not isinstance(w, Const):
        return "its weight is not a constant (it cannot be packed at compile time)"
    if x.type.dtype != "float32" or x.type.ndim != 4:
        return f"the blocked layout is for 4-D float32 convs, this one is {x.type}"
    groups = call.attr("groups", 1)
    c, oc, cg = x.type.shape[1], call.type.shape[1], w.type.shape[1]
    if groups == 1 or (groups == c == oc and cg == 1):
        if _padded(oc, block) > MAX_PADDING * oc and not narrow_block(call, block):
            return f"its {oc} output channels would be mostly padding in blocks of {block}"
        return None
    if (cg % block or (oc // groups) % block) and widened_groups(call, block) is None:
        if group_block(call, block):
            return None
        return f"its {groups} groups of {cg} input channels are not whole blocks of {block}"
    return None


DEPTHWISE_CHAIN = (
    "a depthwise conv whose blocked chain would hold no other kind of conv: the layout transforms at "
    "the chain's ends would cost more than blocking saves (its planar kernel runs along the rows)"
)


def _depthwise(call: Call) -> bool:
    """One input and one output channel per group (a conv of one channel has groups == 1)."""
    groups, c = call.attr("groups", 1), call.args[0].type.shape[1]
    return groups > 1 and groups == c == call.type.shape[1] and call.args[1].type.shape[1] == 1


def group_block(call: Call, block: int) -> int:
    """The channel block of a grouped conv whose groups are not whole blocks of `block` but whole
    half blocks (RegNet's groups of 24 channels on a 16-lane target): it runs in NCHW{block/2}c, its
    input and output converted at its boundaries; 0 for every other conv."""
    groups = call.attr("groups", 1)
    w = call.args[1]
    oc, cg, half = call.type.shape[1], w.type.shape[1], block // 2
    if groups == 1 or block % 2 or half < 8 or (cg % block == 0 and (oc // groups) % block == 0):
        return 0
    if cg % half or (oc // groups) % half:
        return 0
    return half


def narrow_block(call: Call, block: int) -> int:
    """The output block of a dense conv whose output channels would be mostly padding in blocks of
    `block` but fill half blocks (MNASNet-0.5's projection to 8 channels on a 16-lane target): it
    reads its input as any dense conv and writes NCHW{block/2}c in vectors half as wide, which the
    next conv reads as its input block, where planar it would cost a layout transform on each side;
    0 for every other conv."""
    oc, half = call.type.shape[1], block // 2
    if call.attr("groups", 1) != 1 or block % 2 or half < 8 or _padded(oc, block) <= MAX_PADDING * oc:
        return 0
    return half if _padded(oc, half) <= MAX_PADDING * oc else 0


def output_block(call: Call, block: int) -> int:
    """The channel block a conv2d that can run blocked (why_planar is None) writes."""
    return group_block(call, block) or narrow_block(call, block) or block


def widened_groups(call: Call, block: int) -> Call | None:
    """The same grouped conv2d with groups of `block` input channels, each holding block / cg of the
    original groups in a block-diagonal weight (zeros between them), when its groups are narrower
    than a block, a block holds a whole number of them and that at most MAX_WIDENING times the work;
    else None. (As in any dense conv, an inf in one group's input reaches its block-mates as NaN.)"""
    x, w = call.args
    groups = call.attr("groups", 1)
    oc, cg = call.type.shape[1], w.type.shape[1]
    if not isinstance(w, Const) or groups == 1 or cg >= block or block % cg:
        return None
    og, r = oc // groups, block // cg
    if og % cg or groups % r or r > MAX_WIDENING:
        return None
    wide = np.zeros((oc, block, *w.type.shape[2:]), w.data.dtype)
    for g in range(groups):
        at = (g % r) * cg
        wide[g * og : (g + 1) * og, at : at + cg] = w.data[g * og : (g + 1) * og]
    weight = Const(f"{w.name}.groups{groups // r}", wide)
    attrs = attrs_of({**call.attr_dict, "groups": groups // r})
    return Call("conv2d", (x, weight), attrs, call.type, call.name)


def _input_block(call: Call, block: int, input_blocked: bool) -> int:
    """A stem with fewer channels than a block reads them all as one block (an RGB image as
    NCHW3c, no padding); every other conv reads blocks of `block`."""
    c = call.args[0].type.shape[1]
    if input_blocked or c >= block or call.attr("groups", 1) != 1:
        return block
    return c


def _blocked_type(t: TensorType, block: int) -> TensorType:
    n, c, h, w = t.shape
    return TensorType((n, -(-c // block), h, w, block), t.dtype)


def _as_nchw(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    return None if len(shape) > 4 else (1,) * (4 - len(shape)) + shape


class _Rewriter:
    """Builds the new graph: each old value exists natively in one layout, and its other form is a
    layout_transform made on demand, once."""

    def __init__(self, block: int, keep_planar: frozenset[int] = frozenset()) -> None:
        self.block = block
        self.keep_planar = keep_planar  # ids of convs that stay planar though they could run blocked
        self.native: set[int] = set()  # ids of the old nodes made blocked ops (not converted to blocked)
        self.planar: dict[int, Expr] = {}
        self.blocked: dict[int, Expr] = {}  # id(old) -> value in NCHW{block}c (or NCHW{ib}c for a stem)
        # ids of the old nodes made natively in half blocks by a narrow conv (narrow_block) or an
        # elementwise op over one: its bias, activation or residual stays in that layout
        self.narrow: set[int] = set()

    def as_planar(self, old: Expr) -> Expr:
        if id(old) not in self.planar:
            src = self.blocked[id(old)]
            layout = blocked_layout(src.type.shape[4])
            channels = old.type.shape[1]
            self.planar[id(old)] = _transform(
                src, layout, PLANAR, old.type, f"{_name(old)}.to_{PLANAR}",
                channels if channels % src.type.shape[4] else None,
            )  # fmt: skip
        return self.planar[id(old)]

    def as_blocked(self, old: Expr, block: int) -> Expr:
        have = self.blocked.get(id(old))
        if have is not None and have.type.shape[4] == block:
            return have
        if isinstance(old, Const):
            return Const(f"{old.name}.{blocked_layout(block)}", to_blocked(old.data, block))
        layout = blocked_layout(block)
        made = _transform(
            self.as_planar(old), PLANAR, layout, _blocked_type(old.type, block), f"{_name(old)}.to_{layout}"
        )
        if have is None:
            self.blocked[id(old)] = made
        return made

    def is_blocked(self, old: Expr) -> bool:
        return id(old) in self.blocked and self.blocked[id(old)].type.shape[4] == self.block

    # ----------------------------------------------------------------------- one rule per op kind
    def conv(self, call: Call) -> Expr | None:
        if why_planar(call, self.block) is not None or id(call) in self.keep_planar:
            return None
        call = widened_groups(call, self.block) or call
        x, w = call.args
        assert isinstance(w, Const)
        half = group_block(call, self.block)
        if half:
            packed = pack_weight(w.data, half, half)
            weight = Const(f"{w.name}.OIHW{half}i{half}o", packed)
            out = _blocked_type(call.type, half)
            return Call("conv2d_nchwc", (self.as_blocked(x, half), weight), call.attrs, out, call.name)
        ib = _input_block(call, self.block, self.is_blocked(x))
        depthwise = _depthwise(call)
        ob = narrow_block(call, self.block) or self.block
        packed = pack_weight(w.data, 1 if depthwise else ib, ob)
        layout = f"OIHW{1 if depthwise else ib}i{ob}o"
        weight = Const(f"{w.name}.{layout}", packed)
        out = _blocked_type(call.type, ob)
        if ob != self.block:
            self.narrow.add(id(call))
        attrs = call.attrs
        if depthwise:  # one group per lane, padding lanes included
            attrs = attrs_of({**call.attr_dict, "groups": out.shape[1] * self.block})
        return Call("conv2d_nchwc", (self.as_blocked(x, ib), weight), attrs, out, call.name)

    def broadcast(self, call: Call) -> Expr | None:
        """An elementwise/broadcasting op with a blocked operand of the output's channels."""
        pattern = registry.get(call.op).pattern
        if pattern > Pattern.BROADCAST or call.op in _LAYOUT_DEPENDENT or call.type.ndim != 4:
            return None
        c = call.type.shape[1]
        block = self.block
        if not any(self.is_blocked(a) for a in call.args):
            if not any(id(a) in self.narrow for a in call.args):
                return None
            block = self.block // 2  # after a narrow conv: in its half blocks
        if c % block and not _keeps_finite(call):
            return None
        args: list[Expr] = []
        for a in call.args:
            shape = _as_nchw(a.type.shape)
            if shape is None:
                return None
            if isinstance(a, Const):
                data = a.data.reshape(shape)
                if shape[1] == c:
                    args.append(Const(f"{a.name}.{blocked_layout(block)}", to_blocked(data, block)))
                elif shape[1] == 1:
                    args.append(Const(f"{a.name}.{blocked_layout(1)}", data[..., None]))
                else:
                    return None
            elif shape[1] == c and (a.type.ndim == 4 or self.is_blocked(a)):
                args.append(self.as_blocked(a, block))
            elif shape[1] == 1:
                args.append(_reshape(self.as_planar(a), (*shape, 1), f"{_name(a)}.{blocked_layout(1)}"))
            else:
                return None
        if block != self.block:
            self.narrow.add(id(call))
        return Call(call.op, tuple(args), call.attrs, _blocked_type(call.type, block), call.name)

    def reduction(self, call: Call) -> Expr | None:
        """A reduction over the spatial axes of a blocked value (global pooling)."""
        if call.op not in _SPATIAL_REDUCTIONS or not self.is_blocked(call.args[0]):
            return None
        axes = call.attr("axes")
        if axes is None or not call.attr("keepdims", 1) or {a % 4 for a in axes} - {2, 3}:
            return None
        x = self.blocked[id(call.args[0])]
        attrs = attrs_of({**call.attr_dict, "axes": tuple(sorted(a % 4 for a in axes))})
        return Call(call.op, (x,), attrs, _blocked_type(call.type, self.block), call.name)

    def pool(self, call: Call) -> Expr | None:
        """Pooling windows slide over the spatial axes of a blocked value as of a planar one."""
        if call.op not in _POOLS or not self.is_blocked(call.args[0]):
            return None
        x = self.blocked[id(call.args[0])]
        return Call(call.op, (x,), call.attrs, _blocked_type(call.type, self.block), call.name)

    def concat(self, call: Call) -> Expr | None:
        """Concatenation of whole channel blocks."""
        if call.op != "concat" or call.type.ndim != 4 or call.attr("axis") % 4 != 1:
            return None
        if any(a.type.shape[1] % self.block for a in call.args) or not any(
            self.is_blocked(a) for a in call.args
        ):
            return None
        args = tuple(self.as_blocked(a, self.block) for a in call.args)
        return Call("concat", args, call.attrs, _blocked_type(call.type, self.block), call.name)


def _name(e: Expr) -> str:
    return e.name or "value"


def _transform(x: Expr, src: str, dst: str, out: TensorType, name: str, channels: int | None = None) -> Call:
    attrs: dict[str, AttrValue] = {"src_layout": src, "dst_layout": dst}
    if channels is not None:
        attrs["channels"] = channels
    return Call("layout_transform", (x,), attrs_of(attrs), out, name)


def _reshape(x: Expr, shape: tuple[int, ...], name: str) -> Call:
    return Call("reshape", (x,), (("shape", shape),), TensorType(shape, x.type.dtype), name)


def layout_report(optimized: Graph, block: int, ran: bool) -> dict[str, object]:
    """What the pass decided, for the manifest: the block, how many convs run blocked, and for each
    conv left in NCHW the reason (convs that became matmuls are not convs any more)."""
    calls = optimized.calls()
    planar = {}
    for c in calls:
        if c.op == "conv2d":
            reason = why_planar(c, block) if ran and block > 1 else None
            if ran and block > 1 and reason is None:  # it could run blocked: its chain kept it planar
                reason = DEPTHWISE_CHAIN
            planar[c.name] = reason or "the alter_layout pass did not run (opt level, disabled, or no block)"
    return {
        "channel_block": block,
        # conv_algorithm may have turned some into Winograd convs, blocked as well
        "blocked_convs": sum(c.op in ("conv2d_nchwc", "conv2d_winograd_nchwc") for c in calls),
        "layout_transforms": sum(c.op == "layout_transform" for c in calls),
        "planar_convs": planar,
    }


def _rewrite(graph: Graph, block: int, keep_planar: frozenset[int]) -> _Rewriter:
    """Every node of `graph` in the layout its rules give it, the convs of `keep_planar` planar."""
    rw = _Rewriter(block, keep_planar)
    rules: list[Callable[[Call], Expr | None]] = [rw.conv, rw.broadcast, rw.reduction, rw.pool, rw.concat]
    for node in graph.nodes():
        if not isinstance(node, Call):
            rw.planar[id(node)] = node
            continue
        made = next((m for rule in rules if (m := rule(node)) is not None), None)
        if made is not None:
            rw.blocked[id(node)] = made
            rw.native.add(id(node))
            continue
        args = tuple(rw.as_planar(a) for a in node.args)
        same = all(a is b for a, b in zip(args, node.args, strict=True))
        rw.planar[id(node)] = node if same else Call(node.op, args, node.attrs, node.type, node.name)
    return rw


def _chains(graph: Graph, rw: _Rewriter) -> list[list[Call]]:
    """The blocked chains of a rewrite: the nodes of `graph` it made blocked, grouped by the blocked
    values that pass between them (a value converted from planar ends a chain)."""
    parent: dict[int, int] = {}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    blocked = [n for n in graph.nodes() if isinstance(n, Call) and id(n) in rw.native]
    for node in blocked:
        parent[id(node)] = id(node)
        for a in node.args:
            if id(a) in parent:
                parent[root(id(a))] = root(id(node))
    chains: dict[int, list[Call]] = {}
    for node in blocked:
        chains.setdefault(root(id(node)), []).append(node)
    return list(chains.values())


def _depthwise_only(graph: Graph, rw: _Rewriter) -> frozenset[int]:
    """The ids of the convs of the rewrite's chains whose convs are all depthwise."""
    planar: set[int] = set()
    for chain in _chains(graph, rw):
        convs = [n for n in chain if n.op == "conv2d"]
        if convs and all(_depthwise(c) for c in convs):
            planar.update(id(c) for c in convs)
    return frozenset(planar)


def depthwise_chains(graph: Graph, block: int) -> frozenset[int]:
    """The ids of the convs of `graph` that could run blocked but stay planar: those of a chain whose
    convs would all be depthwise."""
    return _depthwise_only(graph, _rewrite(graph, block, frozenset())) if block > 1 else frozenset()


def alter_conv_layout(graph: Graph, block: int) -> Graph:
    """Rewrite convolution chains into NCHW{block}c (block <= 1: the graph unchanged)."""
    if block <= 1 or not any(c.op == "conv2d" and why_planar(c, block) is None for c in graph.calls()):
        return graph
    rw = _rewrite(graph, block, frozenset())
    keep_planar = _depthwise_only(graph, rw)
    if keep_planar:
        rw = _rewrite(graph, block, keep_planar)
    return graph.with_outputs(tuple(rw.as_planar(o) for o in graph.outputs))
