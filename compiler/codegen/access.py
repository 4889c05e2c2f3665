"""How the lanes of a vectorized loop touch memory, decided on TIR alone.

The LLVM emitter (compiler/codegen/llvm.py) asks this module what an access is and only then
chooses instructions: one vector load/store for lanes at consecutive elements, one wide load
thinned by a shuffle for a small constant stride, a scalar for an address every lane shares, one
element per lane otherwise; and, for a padded copy (`select(cond, A[clamped index], constant)`),
one masked load of the unclamped addresses. Keeping the decision free of llvmlite lets it be
tested on hand-built expressions, without emitting or running code.

Offsets are flat element offsets into a row-major buffer (see `flat_offset`); `var` is the
vectorized loop's variable, whose value is the lane number (None outside a vector loop).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from compiler.errors import CodegenError
from compiler.tir.ir import BinOp, Buffer, Expr, FloatImm, IntImm, Load, Select, Var, substitute, walk_expr
from compiler.tir.simplify import Ranges, affine_coeffs, simplify

AccessKind = Literal["scalar", "broadcast", "contiguous", "strided", "gather"]

MAX_STRIDE = 4
"""Largest lane stride loaded as one covering span of which every stride-th element is kept. The
span holds (lanes - 1) * stride + 1 elements, so the wider the stride the more of what it reads is
thrown away; wider strides are gathered lane by lane."""

PADDED_DTYPES = ("float32", "float64", "int32", "int64")
"""Element types whose padded loads take the masked fast path; the others (narrow or bool) keep
the general select of a load."""


@dataclass(frozen=True, slots=True)
class Access:
    """One load or store as the lanes of a vector loop perform it.

    kind: "scalar" (no vector loop), "broadcast" (every lane at the same element), "contiguous"
    (lane k at base + k), "strided" (lane k at base + k * stride, 2 <= stride <= MAX_STRIDE) or
    "gather" (one element per lane, at `lane_offset(offset, var, k)`).
    stride: elements between neighbouring lanes (0 for scalar and broadcast, None for gather).
    base: lane 0's offset, for contiguous and strided accesses (None otherwise)."""

    kind: AccessKind
    offset: Expr
    var: Var | None = None
    stride: int | None = None
    base: Expr | None = None


@dataclass(frozen=True, slots=True)
class Clamp:
    """`value` clamped into [lo, hi] in a load's index (None: that side is not clamped)."""

    value: Expr
    lo: int | None
    hi: int | None


@dataclass(frozen=True, slots=True)
class PaddedLoad:
    """`select(cond, load, fill)` whose load index clamps the lanes into the source tensor: the
    lanes `cond` selects can be loaded, under a mask, from the unclamped addresses (lane k at
    base + k * stride) whenever every selected lane lies inside all `clamps`."""

    load: Load
    cond: Expr
    fill: IntImm | FloatImm
    offset: Expr  # the load's flat offset without its clamps
    base: Expr
    stride: int
    clamps: tuple[Clamp, ...]


@dataclass(frozen=True, slots=True)
class NotPadded:
    """Why a select is not a padded load (it then takes the general path)."""

    reason: str


def flat_offset(buf: Buffer, indices: tuple[Expr, ...], ranges: Ranges) -> Expr:
    """The element offset of `buf[indices]` in its row-major storage, simplified with the loop
    ranges in scope so that split and fused indices fold back into plain affine forms."""
    if len(indices) != len(buf.shape):
        raise CodegenError(f"{buf.name}: {len(indices)} indices for rank {len(buf.shape)}")
    off: Expr = IntImm(0)
    stride = 1
    for d, i in zip(reversed(buf.shape), reversed(indices), strict=True):
        off = BinOp("+", off, BinOp("*", i, IntImm(stride)))
        stride *= d
    return simplify(off, ranges)


def depends_on(e: Expr, var: Var | None) -> bool:
    """Whether `e` varies with `var` (variables compare by identity)."""
    return var is not None and any(x is var for x in walk_expr(e))


def lane_offset(offset: Expr, var: Var, lane: int, ranges: Ranges | None = None) -> Expr:
    """The offset that lane `lane` accesses."""
    return simplify(substitute(offset, {var: IntImm(lane)}), ranges)


def clamp_into(offset: Expr, buf: Buffer) -> Expr:
    """`offset` clamped into the buffer: a lane that a predicated loop switches off may point
    anywhere, and a lane-by-lane load still reads it."""
    return BinOp("min", BinOp("max", offset, IntImm(0)), IntImm(buf.size - 1))


def lane_stride(offset: Expr, var: Var) -> int | None:
    """The distance between neighbouring lanes' elements when `offset` is affine and `var` appears
    in no other term of it (a term like `(var + o) // 2` makes the distance vary); None otherwise."""
    lin = affine_coeffs(offset)
    if lin is None or any(depends_on(atom, var) for atom in lin[0] if atom is not var):
        return None
    return lin[0].get(var)


def load_access(offset: Expr, var: Var | None) -> Access:
    """How a vector loop along `var` reads `offset`. Lane 0's offset is constant-folded without
    the loop ranges (a store's is simplified with them): either is exact, and this one keeps the
    code the emitter generates as it was."""
    if var is None or not depends_on(offset, var):
        return Access("scalar" if var is None else "broadcast", offset, var, 0)
    stride = lane_stride(offset, var)
    if stride is not None and 1 <= stride <= MAX_STRIDE:
        kind: AccessKind = "contiguous" if stride == 1 else "strided"
        return Access(kind, offset, var, stride, lane_offset(offset, var, 0))
    return Access("gather", offset, var)


def masked_load(access: Access) -> Access:
    """The load as a predicated vector loop performs it: a strided one lane by lane, since its
    covering span would also read where the switched-off lanes point, which may lie outside the
    buffer (a contiguous load is masked lane by lane by the masked-load intrinsic)."""
    if access.kind != "strided":
        return access
    return replace(access, kind="gather", stride=None, base=None)


def store_access(offset: Expr, var: Var | None, ranges: Ranges, *, masked: bool) -> Access:
    """How a vector loop along `var` writes `offset` (`masked`: in a predicated loop).

    Stores are contiguous or one element per lane (there is no strided store). When every lane
    writes the same element, the last lane's value is stored (the serial loop's result); in a
    predicated loop the last lane may be switched off, so such a store goes lane by lane. A store
    is contiguous only when neighbouring lanes write neighbouring elements (`lane_stride` 1): an
    offset like `v + (v + o) // 4` has lane coefficient 1 but skips elements, so it goes per lane."""
    if var is None:
        return Access("scalar", offset, None, 0)
    if not depends_on(offset, var):
        return Access("gather", offset, var) if masked else Access("broadcast", offset, var, 0)
    if lane_stride(offset, var) == 1:
        return Access("contiguous", offset, var, 1, lane_offset(offset, var, 0, ranges))
    return Access("gather", offset, var)


def padded_load(sel: Select, var: Var, ranges: Ranges) -> PaddedLoad | NotPadded:
    """`sel` as a padded load in a vector loop along `var`, or why it is not one.

    The pattern is a select between a load and a constant whose index clamps lane-dependent
    positions into the tensor (a padded copy); once the clamps are stripped the offset must step
    by 1 to MAX_STRIDE elements per lane, with `var` in no other term."""
    load, fill = sel.t, sel.f
    if not isinstance(load, Load) or not isinstance(fill, (FloatImm, IntImm)):
        return NotPadded("not a select between a load and a constant")
    if load.buffer.dtype not in PADDED_DTYPES:
        return NotPadded(f"{load.buffer.dtype} elements")
    inside, clamps = strip_clamps(flat_offset(load.buffer, load.indices, ranges), var)
    if not clamps:
        return NotPadded("no clamp of the vector lane in the index")
    lin = affine_coeffs(inside)
    if lin is None:
        return NotPadded("the unclamped offset is not affine")
    stride = lin[0].get(var)
    if stride is None:
        return NotPadded("no term of the lane variable alone in the unclamped offset")
    if not 1 <= stride <= MAX_STRIDE:
        return NotPadded(f"lane stride {stride} outside 1..{MAX_STRIDE}")
    if any(depends_on(atom, var) for atom in lin[0] if atom is not var):
        return NotPadded("the lane variable appears in a non-affine term")
    base = lane_offset(inside, var, 0, ranges)
    return PaddedLoad(load, sel.cond, fill, inside, base, stride, clamps)


def strip_clamps(e: Expr, var: Var) -> tuple[Expr, tuple[Clamp, ...]]:
    """`e` without its clamps `min(max(x, lo), hi)` of an `x` that depends on `var`, or their
    halves `max(x, lo)` / `min(x, hi)` where the simplifier proved the other bound holds; with the
    removed clamps, innermost first, then left to right."""
    if not isinstance(e, BinOp):
        return e, ()
    if (
        e.op == "min"
        and isinstance(e.b, IntImm)
        and isinstance(e.a, BinOp)
        and e.a.op == "max"
        and isinstance(e.a.b, IntImm)
        and depends_on(e.a.a, var)
    ):
        inner, clamps = strip_clamps(e.a.a, var)
        return inner, (*clamps, Clamp(inner, int(e.a.b.value), int(e.b.value)))
    if e.op in ("min", "max") and isinstance(e.b, IntImm) and depends_on(e.a, var):
        inner, clamps = strip_clamps(e.a, var)
        bound = int(e.b.value)
        half = Clamp(inner, bound, None) if e.op == "max" else Clamp(inner, None, bound)
        return inner, (*clamps, half)
    a, ca = strip_clamps(e.a, var)
    b, cb = strip_clamps(e.b, var)
    return (e if a is e.a and b is e.b else BinOp(e.op, a, b)), (*ca, *cb)
