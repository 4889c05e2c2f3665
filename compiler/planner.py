"""Execution plan: kernel calls in order over statically planned buffers.

Intermediate values share one workspace; each gets an offset chosen first-fit over the values'
lifetimes, so memory is reused as soon as a value is dead. Constants are laid out (packed to the
layout their kernel's schedule asked for) into one params blob, 64-byte aligned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.graph.ir import Call, Const, Expr, Graph
from compiler.graph.passes.fuse import view_offset
from compiler.kernels import Kernel
from compiler.tensor_type import raw_bytes
from compiler.tir.ir import Layout

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pack_constant(data: np.ndarray, layout: Layout) -> np.ndarray:
    """Apply a schedule's packed layout to constant data (zero-padding split axes)."""
    factors = dict(layout.splits)
    pad = [(0, (-d) % factors[a]) if a in factors else (0, 0) for a, d in enumerate(data.shape)]
    if any(p[1] for p in pad):
        data = np.pad(data, pad)
    split_shape = layout.split_shape(data.shape)
    return np.ascontiguousarray(data.reshape(split_shape).transpose(layout.perm))


@dataclass
class _Buf:
    id: int
    shape: tuple[int, ...]
    dtype: str
    kind: str
    name: str | None = None
    offset: int | None = None
    alias_of: int | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "shape": list(self.shape), "dtype": self.dtype, "kind": self.kind}
        if self.name is not None:
            d["name"] = self.name
        if self.offset is not None:
            d["offset"] = self.offset
        if self.alias_of is not None:
            d["alias_of"] = self.alias_of
        return d


def _offset_in_root(buf: _Buf) -> int:
    """Where a buffer starts in the buffer with memory of its own that it views (an alias names that
    buffer directly, so only its own offset counts)."""
    return (buf.offset or 0) if buf.kind == "alias" else 0


class _Workspace:
    """First-fit allocator over [offset, offset+size) intervals."""

    def __init__(self) -> None:
        self.live: list[tuple[int, int, int]] = []  # (offset, size, buffer id)
        self.high = 0

    def alloc(self, size: int, bid: int) -> int:
        size = _align(max(size, 1))
        off = 0
        for o, s, _ in sorted(self.live):
            if o - off >= size:
                break
            off = max(off, o + s)
        self.live.append((off, size, bid))
        self.high = max(self.high, off + size)
        return off

    def free(self, bid: int) -> None:
        self.live = [x for x in self.live if x[2] != bid]


def make_plan(fused: Graph, kernels: Mapping[Call, Kernel | None]) -> tuple[dict[str, Any], bytes]:
    """kernels: fused call -> its Kernel, or None for a view of its input (an alias at a byte offset
    into the buffer it views, fuse.view_offset; no call). Graph nodes
    compare by identity, so they key the maps here."""
    bufs: list[_Buf] = []
    of_node: dict[Expr, int] = {}
    params = bytearray()
    param_ids: dict[tuple[Const, str], int] = {}

    def new(shape: tuple[int, ...], dtype: str, kind: str, **kw: Any) -> int:
        b = _Buf(len(bufs), tuple(shape), dtype, kind, **kw)
        bufs.append(b)
        return b.id

    def const_buf(c: Const, layout: Layout | None) -> int:
        key = (c, "" if layout is None else repr(layout))
        if key not in param_ids:
            data = c.data if layout is None else pack_constant(c.data, layout)
            off = _align(len(params))
            params.extend(b"\0" * (off - len(params)))
            params.extend(raw_bytes(data))
            param_ids[key] = new(data.shape, str(data.dtype), "param", name=c.name, offset=off)
        return param_ids[key]

    def root(bid: int) -> int:
        """The buffer with memory of its own that bid views (itself unless an alias)."""
        while (up := bufs[bid].alias_of) is not None:
            bid = up
        return bid

    out_names: dict[Expr, list[str]] = {}
    for name, o in zip(fused.output_names, fused.outputs, strict=True):
        out_names.setdefault(o, []).append(name)

    inputs = {}
    for v in fused.inputs:
        of_node[v] = new(v.type.shape, v.type.dtype, "input", name=v.name)
        inputs[v.name] = of_node[v]

    steps: list[dict[str, Any]] = []
    step_reads: list[list[int]] = []
    for node in fused.calls():
        k = kernels[node]
        arg_ids = []
        for i, a in enumerate(node.args):
            if isinstance(a, Const):
                layout = None
                if k is not None:
                    layout = dict(k.scheduled.layouts).get(f"p{i}")
                arg_ids.append(const_buf(a, layout))
            else:
                arg_ids.append(of_node[a])
        names = out_names.get(node)
        if k is None and not names:
            offset = view_offset(node.attr("group"))
            assert offset is not None, f"{node.name} has no kernel but is not a view of its input"
            of_node[node] = new(
                node.type.shape,
                node.type.dtype,
                "alias",
                alias_of=root(arg_ids[0]),
                offset=(_offset_in_root(bufs[arg_ids[0]]) + offset) or None,
            )
            continue
        if names:
            oid = new(node.type.shape, node.type.dtype, "output", name=names[0])
        else:
            oid = new(node.type.shape, node.type.dtype, "workspace")
        of_node[node] = oid
        if k is None:
            raise AssertionError("an output alias must be a copy kernel")
        steps.append({"kernel": k.symbol, "args": [*arg_ids, oid]})
        step_reads.append(arg_ids)

    # graph outputs that are inputs/constants directly
    outputs: dict[str, int] = {}
    for name, o in zip(fused.output_names, fused.outputs, strict=True):
        if isinstance(o, Const):
            outputs[name] = const_buf(o, None)
        else:
            outputs[name] = of_node[o]

    # lifetimes of workspace buffers (alias reads count for their root)
    last_use: dict[int, int] = {}
    for s, reads in enumerate(step_reads):
        for r in reads:
            last_use[root(r)] = s
    pinned = {root(b) for b in outputs.values()}
    ws = _Workspace()
    for s, step in enumerate(steps):
        out_id = step["args"][-1]
        if bufs[out_id].kind == "workspace":
            bufs[out_id].offset = ws.alloc(bufs[out_id].nbytes, out_id)
        for r in {root(x) for x in step_reads[s]}:
            if bufs[r].kind == "workspace" and last_use.get(r) == s and r not in pinned:
                ws.free(r)
    plan = {
        "buffers": [b.to_json() for b in bufs],
        "workspace_bytes": ws.high,
        "inputs": inputs,
        "outputs": outputs,
        "steps": steps,
    }
    return plan, bytes(params)
