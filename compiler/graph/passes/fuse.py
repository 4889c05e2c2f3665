"""Operator fusion: partition a graph into groups, each compiled to one kernel.

A fused graph is a Graph whose calls all have op "fused", attrs (("group", Group),) and as arguments
the group's external inputs (Vars, Consts or other fused calls) in params order.

Rules (with fuse=True; fuse=False makes every op its own group):
- an ANCHOR (conv, matmul, pool) or REDUCTION op starts a group;
- an ELEMWISE/BROADCAST op joins the group of a producer that has no other user and is not a graph
  output, provided that, when the group holds an anchor/reduction, the op keeps the group's output
  shape (an epilogue computed at the anchor's output points: bias, BN shift, residual, activation);
- an INJECTIVE op joins such a producer's group only if the group holds no anchor/reduction, so
  chains of injective and elementwise ops become one kernel; but a reshape that would end such a
  group becomes a group of its own (an alias: a view of the same memory, no kernel), so the
  group's kernel runs over its own shape (over the reshape's, every index of its chain would be
  rebuilt with a division and a remainder per merged or split axis);
- an ELEMWISE/BROADCAST op that joins a group also takes in the groups of its other operands that
  hold no anchor/reduction, end in that operand (no other user) and have its shape: the gates of a
  recurrent step (sigmoid(i) * tanh(c) + sigmoid(f) * c, each gate a slice of one product) become
  one kernel, not one per gate, and a GRU's reset gate (a slice of another product) is computed in
  the epilogue of the recurrent matmul it scales, not by a kernel of its own. Each op taken in still
  computes once per output point (a group of another shape, broadcast, is not taken in). An anchor's
  group takes in only elementwise ops and slices (`EPILOGUE_INJECTIVE`), which read a secondary
  input along the anchor's vectors; a transpose or layout transform there would turn the
  epilogue's vector reads into gathers, and a reshape its indices into divisions. A group
  that only views its input (`view_offset`: reshapes and slices of one contiguous run, such as a
  recurrent step's rows of the input's projection) is not taken in: it is no kernel at all, and
  taken in, its offset would make every step's kernel a workload of its own;
- a group never holds two anchors/reductions; secondary inputs (residual, bias) become extra params;
- a group holds at most MAX_GROUP_OPS ops: a kernel's loop nest inlines its whole chain into one
  expression, and a chain of thousands would make every later stage (scheduling, codegen) slow and
  deep; a longer chain continues in the next group.
- a DIAMOND, a producer whose users are elementwise ops of its own shape that all meet again in one
  op (x * sigmoid(x), x * hardsigmoid(x), GELU's x * (1 + erf(x / sqrt 2)) / 2), joins the producer's
  group whole: none of its values is needed outside, so the group keeps one output and the producer's
  result is never written to memory (a conv's SiLU epilogue runs in the conv's kernel).
Every group has exactly one output, which is why a producer with other users ends its group unless
they form such a diamond.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler.graph.ir import Call, Expr, Graph, Var, users
from compiler.graph.printer import const_names, format_function
from compiler.ops import registry
from compiler.ops.registry import Pattern
from compiler.ops.transform import contiguous_slice_offset

_MAX_NAME_OPS = 6
MAX_GROUP_OPS = 32
MAX_DIAMOND_OPS = 16  # a diamond's ops between its producer and the op where its branches meet
EPILOGUE_INJECTIVE = frozenset({"slice"})  # the injective ops an anchor's group may take in


@dataclass(frozen=True, slots=True, eq=False)
class Group:
    name: str  # kernel name e.g. "fused_conv2d_add_relu_3" (unique in the graph)
    params: tuple[Var, ...]  # one Var per distinct external input (Vars named p0, p1, ...)
    body: Graph  # inputs=params, exactly one output
    anchor: Call | None  # the anchor op inside body (conv2d/matmul/pool/...) or the reduction

    @property
    def ops(self) -> list[str]:
        return [c.op for c in self.body.calls()]


@dataclass
class _Building:
    members: list[Call]
    anchor: Call | None


def _pattern(call: Call) -> Pattern:
    return registry.get(call.op).pattern


def _target_group(
    call: Call, groups: list[_Building], group_of: dict[int, int], single_use: dict[int, bool]
) -> int | None:
    """The producer group this op may join (preferring one with an anchor), or None."""
    pattern = _pattern(call)
    if pattern > Pattern.INJECTIVE:
        return None
    choices: list[int] = []
    for arg in call.args:
        if not isinstance(arg, Call) or not single_use.get(id(arg), False):
            continue
        g = group_of[id(arg)]
        building = groups[g]
        if building.members[-1] is not arg or g in choices or len(building.members) >= MAX_GROUP_OPS:
            continue
        epilogue_ok = pattern != Pattern.INJECTIVE and call.type.shape == arg.type.shape
        if building.anchor is not None and not epilogue_ok:
            continue
        choices.append(g)
    if not choices:
        return None
    with_anchor = [g for g in choices if groups[g].anchor is not None]
    return (with_anchor or choices)[0]


def _absorbable(
    call: Call, target: int, groups: list[_Building], group_of: dict[int, int], single_use: dict[int, bool]
) -> list[int]:
    """The groups of `call`'s other operands that join `target` with it (see the module docstring:
    anchor-free groups ending in a single-use operand of the call's shape, while there is room)."""
    if _pattern(call) > Pattern.BROADCAST:
        return []
    size = len(groups[target].members) + 1
    taken: list[int] = []
    for arg in call.args:
        if not isinstance(arg, Call) or not single_use.get(id(arg), False):
            continue
        if arg.type.shape != call.type.shape:
            continue
        g = group_of[id(arg)]
        building = groups[g]
        if g == target or g in taken or building.anchor is not None or building.members[-1] is not arg:
            continue
        if _views(building.members) is not None:
            continue
        if groups[target].anchor is not None and not all(_epilogue_op(m) for m in building.members):
            continue
        if size + len(building.members) > MAX_GROUP_OPS:
            continue
        size += len(building.members)
        taken.append(g)
    return taken


def _epilogue_op(call: Call) -> bool:
    return _pattern(call) <= Pattern.BROADCAST or call.op in EPILOGUE_INJECTIVE


def _views(members: list[Call]) -> int | None:
    """The element offset into its input of a chain of reshapes and contiguous slices (each member
    reading the one before it), None when a member computes anything."""
    offset = 0
    for member in members:
        if member.op == "slice":
            own = contiguous_slice_offset(member.args[0].type.shape, member.attr_dict)
            if own is None:
                return None
            offset += own
        elif member.op != "reshape":
            return None
    return offset


def view_offset(group: Group) -> int | None:
    """The byte offset into its one input at which a group that only views it starts (its reshapes
    and slices of one contiguous run need no kernel: the output is that run of the input's memory);
    None when the group computes anything."""
    if len(group.params) != 1:
        return None
    offset = _views(group.body.calls())
    return None if offset is None else offset * np.dtype(group.params[0].type.dtype).itemsize


def _trailing_reshape(building: _Building) -> Call | None:
    """Take a reshape ending a group of other ops off it (its input, the member before it, becomes the
    group's output) and return it; None when the group does not end in one."""
    last = building.members[-1]
    if last.op != "reshape" or all(m.op == "reshape" for m in building.members):
        return None
    building.members.pop()
    return last


def _group_name(members: list[Call], index: int) -> str:
    ops = [c.op for c in members]
    shown = ops[:_MAX_NAME_OPS] + (["etc"] if len(ops) > _MAX_NAME_OPS else [])
    return f"fused_{'_'.join(shown)}_{index}"


def _diamonds(graph: Graph, uses: dict[int, list[Call]], outputs: set[int]) -> dict[int, Call]:
    """id(op) -> the producer whose diamond it belongs to (its branches and the op where they meet).

    From a producer with several users, the branches are followed in graph order, always taking the
    earliest op that a value of the diamond feeds; the diamond closes when one op is left that every
    branch feeds. Every op taken must be elementwise/broadcast with the producer's shape and not a
    graph output, so that nothing outside the diamond reads its values."""
    position = {id(c): i for i, c in enumerate(graph.calls())}
    joined: dict[int, Call] = {}
    for a in graph.calls():
        distinct = {id(u): u for u in uses.get(id(a), [])}
        if len(distinct) < 2 or id(a) in outputs or id(a) in joined:
            continue
        open_ = dict(distinct)
        region: list[Call] = []
        while len(open_) > 1 and len(region) < MAX_DIAMOND_OPS:
            n = min(open_.values(), key=lambda c: position[id(c)])
            if not _branch_op(n, a) or id(n) in outputs or id(n) in joined or not uses.get(id(n)):
                break
            region.append(n)
            del open_[id(n)]
            open_.update({id(u): u for u in uses[id(n)]})
        if len(open_) != 1:
            continue
        (sink,) = open_.values()
        if not _branch_op(sink, a) or id(sink) in joined:
            continue
        for member in (*region, sink):
            joined[id(member)] = a
    return joined


def _branch_op(call: Call, producer: Call) -> bool:
    return _pattern(call) <= Pattern.BROADCAST and call.type.shape == producer.type.shape


def partition(graph: Graph, fuse: bool = True) -> Graph:
    """Group every call of a plain graph; returns the fused graph (see the module docstring)."""
    uses = users(graph)
    outputs = {id(o) for o in graph.outputs}
    single_use = {
        id(c): len({id(u) for u in uses.get(id(c), [])}) == 1 and id(c) not in outputs for c in graph.calls()
    }
    diamond_of = _diamonds(graph, uses, outputs) if fuse else {}
    closed: dict[int, bool] = {}  # producer -> whether its diamond joined its group
    groups: list[_Building] = []
    group_of: dict[int, int] = {}
    for call in graph.calls():
        if call.op == "fused":
            raise ValueError("graph is already partitioned")
        target = None
        producer = diamond_of.get(id(call))
        if producer is not None:
            g = group_of[id(producer)]
            if id(producer) not in closed:  # the diamond's first op: is there room after the producer?
                size = sum(1 for v in diamond_of.values() if v is producer)
                closed[id(producer)] = (
                    groups[g].members[-1] is producer and len(groups[g].members) + size <= MAX_GROUP_OPS
                )
            target = g if closed[id(producer)] else None
        if target is None:
            target = _target_group(call, groups, group_of, single_use) if fuse else None
        if target is None:
            is_anchor = _pattern(call) in (Pattern.ANCHOR, Pattern.REDUCTION)
            groups.append(_Building([call], call if is_anchor else None))
            target = len(groups) - 1
        else:
            for g in _absorbable(call, target, groups, group_of, single_use) if fuse else ():
                for member in groups[g].members:
                    group_of[id(member)] = target
                groups[target].members.extend(groups[g].members)
                groups[g].members = []
            groups[target].members.append(call)
        group_of[id(call)] = target
    groups = [b for b in groups if b.members]
    for building in list(groups):
        reshape = _trailing_reshape(building)
        if reshape is not None:
            groups.append(_Building([reshape], None))

    memo: dict[int, Expr] = {id(v): v for v in graph.inputs}
    for node in graph.nodes():
        if not isinstance(node, Call):
            memo[id(node)] = node
    position = {id(c): i for i, c in enumerate(graph.calls())}
    ordered = sorted(groups, key=lambda b: position[id(b.members[-1])])  # a group runs after its inputs
    for index, building in enumerate(ordered):
        memo[id(building.members[-1])] = _build(building, index, memo)
    return graph.with_outputs(tuple(memo[id(o)] for o in graph.outputs))


def _build(building: _Building, index: int, memo: dict[int, Expr]) -> Call:
    """One fused call: params for external inputs, the members rebuilt on them as the body."""
    inside = {id(c) for c in building.members}
    externals: list[Expr] = []
    params: list[Var] = []
    local: dict[int, Expr] = {}
    anchor = None
    for member in building.members:
        for arg in member.args:
            if id(arg) not in inside and id(arg) not in local:
                param = Var(f"p{len(params)}", arg.type)
                params.append(param)
                externals.append(memo[id(arg)])
                local[id(arg)] = param
        new = Call(
            member.op, tuple(local[id(a)] for a in member.args), member.attrs, member.type, member.name
        )
        local[id(member)] = new
        if member is building.anchor:
            anchor = new
    root = building.members[-1]
    body = Graph(tuple(params), (local[id(root)],), ("out",))
    group = Group(_group_name(building.members, index), tuple(params), body, anchor)
    name = building.anchor.name if building.anchor is not None else root.name
    return Call("fused", tuple(externals), (("group", group),), root.type, name)


def groups_of(graph: Graph) -> list[Group]:
    """The groups of a fused graph, in execution order."""
    return [c.attr("group") for c in graph.calls() if c.op == "fused"]


def print_fused(graph: Graph) -> str:
    """Every group as its own function (params %p0...), then main calling them by kernel name."""
    lines: list[str] = []
    for group in groups_of(graph):
        lines += [*format_function(group.name, group.body, {}), ""]
    lines += format_function("main", graph, const_names(graph))
    return "\n".join(lines) + "\n"
