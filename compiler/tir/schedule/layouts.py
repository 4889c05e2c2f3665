"""Constant parameters in the layouts schedules ask for: pack_layout, cache_read."""

from __future__ import annotations

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Buffer,
    Expr,
    FloatImm,
    For,
    ForKind,
    IntImm,
    IterVar,
    Layout,
    Load,
    PrimFunc,
    Select,
    Stmt,
    Store,
    Var,
    replace_buffer,
    seq,
)
from compiler.tir.schedule.blocks import _allocated
from compiler.tir.schedule.tree import _replace, _unique, find_block


def pack_layout(func: PrimFunc, param: str, layout: Layout) -> PrimFunc:
    """Read constant parameter `param` in a packed layout (the compiler packs its data to match)."""
    buf = next((p for p in func.params if p.name == param), None)
    if buf is None or buf is func.params[-1]:
        raise ScheduleError(f"pack_layout: {param!r} is not an input parameter of {func.name}")
    if any(name == param for name, _ in func.layouts):
        raise ScheduleError(f"pack_layout: {param!r} is already packed")
    axes = sorted(a for a, _ in layout.splits)
    if any(a >= len(buf.shape) for a in axes) or sorted(layout.perm) != list(
        range(len(buf.shape) + len(axes))
    ):
        raise ScheduleError(f"pack_layout: layout {layout.to_json()} does not fit {param} {list(buf.shape)}")
    packed = Buffer(buf.name, layout.packed_shape(buf.shape), buf.dtype, buf.scope)
    body = replace_buffer(func.body, buf, packed, layout.map_indices)
    params = tuple(packed if p is buf else p for p in func.params)
    return PrimFunc(func.name, params, body, (*func.layouts, (param, layout)))


def _check_layout(where: str, buf: Buffer, layout: Layout) -> None:
    axes = sorted(a for a, _ in layout.splits)
    if any(a >= len(buf.shape) for a in axes) or sorted(layout.perm) != list(
        range(len(buf.shape) + len(axes))
    ):
        raise ScheduleError(f"{where}: layout {layout.to_json()} does not fit {buf.name} {list(buf.shape)}")


def cache_read(func: PrimFunc, block: str, buffer: str, layout: Layout) -> tuple[PrimFunc, str]:
    """Copy `buffer` into a packed layout at the start of the kernel; `block` reads the copy.

    The runtime counterpart of pack_layout for operands that are not constants (a GEMM's B).
    Returns the name of the new packing block.
    """
    where = f"cache_read({block}, {buffer})"
    path = find_block(func, block)
    b = path[-1]
    assert isinstance(b, Block)
    src = next((p for p in func.params if p.name == buffer), None)
    if src is None:
        src = next((x for x in _allocated(func) if x.name == buffer), None)
    if src is None:
        raise ScheduleError(f"{where}: no buffer named {buffer!r}")
    _check_layout(where, src, layout)
    shape = layout.packed_shape(src.shape)
    packed = Buffer(f"{buffer}_packed", shape, src.dtype, "global")
    name = f"{buffer}_pack"
    ivs = tuple(IterVar(Var(f"i{d}"), n) for d, n in enumerate(shape))
    # packed index -> original index: undo the permutation, then join each split pair
    split: list[Expr] = [IntImm(0)] * len(shape)
    for j, p in enumerate(layout.perm):
        split[p] = ivs[j].var
    factors = dict(layout.splits)
    orig: list[Expr] = []
    preds: list[Expr] = []
    k = 0
    for axis, dim in enumerate(src.shape):
        if axis in factors:
            e = BinOp("+", BinOp("*", split[k], IntImm(factors[axis])), split[k + 1])
            if -(-dim // factors[axis]) * factors[axis] != dim:
                preds.append(BinOp("<", e, IntImm(dim)))
            orig.append(e)
            k += 2
        else:
            orig.append(split[k])
            k += 1
    zero = FloatImm(0.0, src.dtype) if src.dtype.startswith("float") else IntImm(0, src.dtype)
    value: Expr = Load(
        src, tuple(BinOp("min", o, IntImm(d - 1)) for o, d in zip(orig, src.shape, strict=True))
    )
    for pred in preds:
        value = Select(pred, value, zero)
    lvars = [Var(_unique(func, f"{name}_i{d}")) for d in range(len(shape))]
    nest: Stmt = Block(name, ivs, tuple(lvars), Store(packed, tuple(iv.var for iv in ivs), value))
    for lv, n in zip(reversed(lvars), reversed(shape), strict=True):
        nest = For(lv, n, ForKind.SERIAL, nest)
    new_b = Block(
        b.name,
        b.iter_vars,
        b.bindings,
        replace_buffer(b.body, src, packed, layout.map_indices),
        b.init,
        b.predicate,
    )
    body = _replace(func.body, b, new_b)
    return PrimFunc(func.name, func.params, Allocate(packed, seq([nest, body])), func.layouts), name
