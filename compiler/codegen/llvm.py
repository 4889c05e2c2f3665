"""Flattened PrimFunc -> LLVM IR (llvmlite.ir).

One emitter per kernel. Loop kinds map directly: serial -> a counted loop, unrolled -> the body
repeated, vectorized -> the body evaluated once on LLVM vectors (contiguous accesses become vector
loads/stores, invariant ones scalars that are broadcast, others per-lane; compiler/codegen/access.py
tells which is which), parallel -> the body outlined into a function of a range of iterations,
which temper's parallel runtime (parallel.c, linked into every library) runs on every core, threads
claiming chunks of the range until none is left. Kernels have the C ABI `int32_t name(void **args)`.
A kernel given a constant to stream prefetches it ahead of its reads from one of its loops
(compiler/codegen/stream.py, `_stream_step`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir

from compiler.codegen.access import (
    Access,
    NotPadded,
    clamp_into,
    flat_offset,
    lane_offset,
    load_access,
    masked_load,
    padded_load,
    store_access,
)
from compiler.codegen.mathfns import (
    emit_acos,
    emit_acosh,
    emit_asin,
    emit_asinh,
    emit_atan,
    emit_atanh,
    emit_cos,
    emit_cosh,
    emit_erf,
    emit_exp,
    emit_log,
    emit_pow,
    emit_sigmoid,
    emit_sin,
    emit_sinh,
    emit_tan,
    emit_tanh,
)
from compiler.codegen.stream import (
    LINE_BYTES,
    PREFETCH_LOCALITY,
    STREAM_LEAD_BYTES,
    buffer_bytes,
    stream_loop,
    stream_stride,
)
from compiler.errors import CodegenError
from compiler.runtime.errors import OUT_OF_MEMORY
from compiler.tir.flatten import free_vars
from compiler.tir.ir import (
    DOT2,
    DOT4_PAIRS_FIT,
    DOT_NAMES,
    Allocate,
    BinOp,
    Buffer,
    Call,
    Cast,
    Expr,
    FloatImm,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Load,
    Not,
    PrimFunc,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
    walk_expr,
    walk_stmts,
)
from compiler.tir.legality import MAX_UNROLL_EXTENT, lane_combine
from compiler.tir.simplify import bounds, simplify, specialize

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

WORKSPACE_ALLOC, WORKSPACE_FREE = "temper_workspace_alloc", "temper_workspace_free"  # workspace.c
PARALLEL_FOR = "temper_parallel_for"
MAX_STACK_BUFFER_BYTES = 1 << 20
"""The most a `local` buffer (alloca'd) may take: the runtime's workers have 8 MiB stacks
(parallel.c), and so do the default threads that call kernels."""
"""The parallel runtime's entry (compiler/codegen/parallel.c): (body, data, extent), where
`body(data, start, end)` runs the iterations [start, end) of an outlined parallel loop."""

_MEM_TYPES: dict[str, ir.Type] = {
    "float16": ir.HalfType(),
    "float32": F32,
    "float64": F64,
    "int64": I64,
    "int32": I32,
    "int16": I16,
    "int8": I8,
    "uint8": I8,
    "bool": I8,
}


# the value a reduction step's op leaves unchanged: masked-off lanes and fresh vector accumulators
_IDENTITY = {"+": 0.0, "max": float("-inf"), "min": float("inf")}


_INT_FOLD: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "min": min,
    "max": max,
    "//": lambda x, y: x // y,  # floor division and modulo, as the emitted code computes them
    "%": lambda x, y: x % y,
}


def _fold_int(op: str, x: ir.Value, y: ir.Value) -> ir.Value | None:
    """`x op y` for scalar integers known here: both constants (an unrolled loop's index times a
    stride), or an identity (`x + 0`, `x * 1`, `x * 0`, `x // 1`). The index arithmetic of every
    unrolled iteration would otherwise be emitted for LLVM to fold, and the IR text, its parsing
    and its optimisation grow with it. None: emit the instruction."""
    ty = x.type
    if not isinstance(ty, ir.IntType) or ty.width not in (32, 64) or y.type != ty:
        return None
    cx = x.constant if isinstance(x, ir.Constant) and isinstance(x.constant, int) else None
    cy = y.constant if isinstance(y, ir.Constant) and isinstance(y.constant, int) else None
    if cx is not None and cy is not None and op in _INT_FOLD and not (op in ("//", "%") and cy == 0):
        value = _INT_FOLD[op](cx, cy) & ((1 << ty.width) - 1)  # wrapped to the type, as LLVM does
        return ir.Constant(ty, value - (1 << ty.width) if value >> (ty.width - 1) else value)
    if (op in ("+", "-") and cy == 0) or (op in ("*", "//") and cy == 1):
        return x
    if (op == "+" and cx == 0) or (op == "*" and cx == 1):
        return y
    if (op == "*" and (cx == 0 or cy == 0)) or (op == "%" and cy == 1):
        return ir.Constant(ty, 0)
    return None


def _value_key(v: ir.Value) -> object:
    """What makes two operands the same value: a constant's type and value, else the value itself
    (by identity)."""
    if isinstance(v, ir.Constant) and isinstance(v.constant, int):
        return (str(v.type), v.constant)
    return id(v)


def reg_type(dtype: str) -> ir.Type:
    return I1 if dtype == "bool" else _MEM_TYPES[dtype]


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


@dataclass
class _Ctx:
    """Per-LLVM-function emission state."""

    fn: ir.Function
    builder: ir.IRBuilder
    entry: ir.IRBuilder
    vars: dict[Var, ir.Value] = field(default_factory=dict)
    bufs: dict[Buffer, ir.Value] = field(default_factory=dict)
    ranges: dict[Var, int] = field(default_factory=dict)
    vec: tuple[Var, int] | None = None
    mask: ir.Value | None = None  # active lanes inside a predicated vectorized loop
    # the loops around the point of emission from the nearest parallel loop (or the kernel's top)
    # down, outermost first: (index, extent), which number the weight-streaming steps
    loops: list[tuple[ir.Value, int]] = field(default_factory=list)
    # a buffer's pointer as its element type, made once in the entry block where the pointer is
    # the function's argument or its alloca (see KernelEmitter._ptr), with the pointer it casts
    typed: dict[Buffer, tuple[ir.Value, ir.Value]] = field(default_factory=dict)

    @contextlib.contextmanager
    def scalar(self, *, unmasked: bool = False) -> Iterator[None]:
        """Scalar code inside a vector loop (an address, one lane at a time): no vector context for
        the block (with `unmasked`, no lane mask either), restored after it whatever happens."""
        saved = self.vec, self.mask
        self.vec = None
        if unmasked:
            self.mask = None
        try:
            yield
        finally:
            self.vec, self.mask = saved


class KernelEmitter:
    def __init__(
        self,
        module: ir.Module,
        func: PrimFunc,
        symbol: str,
        stream: str | None = None,
        dot_instructions: Mapping[int, str] | None = None,
    ) -> None:
        self.module = module
        # by lane count, the target's instruction summing u8 x s8 products exactly into int32 lanes
        # (Target.dot_instructions); other widths take the exact generic expansion
        self.dot_instructions = dict(dot_instructions or {})
        self.func = func
        self.symbol = symbol
        self._outlined = 0
        self._load_accesses: dict[tuple[Load, Var | None], Access] = {}
        # a store's flat offset, by its buffer, the identity of its indices and the extents of the
        # variables they read (_offset); the indices are kept alive beside it so their id stays theirs
        self._index_vars: dict[int, tuple[tuple[Expr, ...], tuple[Var, ...]]] = {}
        self._offsets: dict[tuple[Buffer, int, tuple[int | None, ...]], Expr] = {}
        # how a vector loop writes such an offset, by the offset's identity (it is kept in _offsets)
        self._store_accesses: dict[tuple[int, Var, bool], Access] = {}
        # integer scalars already computed, by block, op and operands (_binop)
        self._numbered: dict[tuple[Any, ...], tuple[ir.Value, ...]] = {}
        # the constant parameter prefetched ahead of its reads, and the loop taking the steps
        # (compiler/codegen/stream.py)
        self._stream = next((p for p in func.params if p.name == stream), None)
        self._stream_at = stream_loop(func.body) if self._stream is not None else None
        # reduction steps accumulating into a vector slot while their loop runs (_vector_accumulated),
        # by the identity of their Store
        self._vector_slots: dict[int, tuple[ir.Value, ir.VectorType]] = {}

    # ------------------------------------------------------------------ entry points
    def emit(self) -> ir.Function:
        """The C-ABI entry unpacks `void **args` and calls the body, whose buffer parameters are
        `noalias` (the memory plan never hands a kernel overlapping buffers it writes), so LLVM may
        keep accumulators in registers and vectorize freely; the body is inlined into the entry."""
        n = len(self.func.params)
        body = ir.Function(self.module, ir.FunctionType(I32, [PTR] * n), f"{self.symbol}.body")
        body.linkage = "internal"
        body.attributes.add("alwaysinline")
        for arg in body.args:
            arg.add_attribute("noalias")
        ctx = self._new_ctx(body)
        for buf, arg in zip(self.func.params, body.args, strict=True):
            ctx.bufs[buf] = arg
        self._stmt(ctx, self.func.body)
        ctx.builder.ret(ir.Constant(I32, 0))
        ctx.entry.branch(body.blocks[1])

        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR]), self.symbol)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptrs = [
            b.load(b.gep(fn.args[0], [ir.Constant(I64, i)], inbounds=True, source_etype=PTR), typ=PTR)
            for i in range(n)
        ]
        b.ret(b.call(body, ptrs))  # 0, or an error code (compiler.runtime.errors)
        return fn

    def _new_ctx(self, fn: ir.Function) -> _Ctx:
        entry_bb = fn.append_basic_block("entry")
        body_bb = fn.append_basic_block("body")
        entry = ir.IRBuilder(entry_bb)
        builder = ir.IRBuilder(body_bb)
        return _Ctx(fn, builder, entry)

    # ------------------------------------------------------------------ helpers
    def _intrinsic(self, name: str, ty: ir.Type) -> ir.Function:
        suffix = f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32"
        if (isinstance(ty, ir.VectorType) and ty.element == F64) or ty == F64:
            suffix = suffix.replace("f32", "f64")
        full = f"llvm.{name}.{suffix}"
        existing = self.module.globals.get(full)
        if existing is not None:
            return existing
        nargs = 2 if name in ("pow", "maxnum", "minnum") else 1
        return ir.Function(self.module, ir.FunctionType(ty, [ty] * nargs), full)

    def _extern(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    @staticmethod
    def _splat(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
        vt = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vt, [v.constant] * lanes)
        undef = ir.Constant(vt, ir.Undefined)
        one = b.insert_element(undef, v, ir.Constant(I32, 0))
        return b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def _match(self, ctx: _Ctx, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        va, vb = isinstance(a.type, ir.VectorType), isinstance(b.type, ir.VectorType)
        if va and not vb:
            b = self._splat(ctx.builder, b, a.type.count)
        elif vb and not va:
            a = self._splat(ctx.builder, a, b.type.count)
        return a, b

    # ------------------------------------------------------------------ expressions
    def _ptr(self, ctx: _Ctx, buf: Buffer, off: ir.Value, as_type: ir.Type | None = None) -> ir.Value:
        """Address of element `off` of buf, typed as a pointer to `as_type` (default: the element)."""
        mem = _MEM_TYPES[buf.dtype]
        base = ctx.bufs[buf]
        if base.type != mem.as_pointer():
            known = ctx.typed.get(buf)
            if known is not None and known[0] is base:
                base = known[1]
            elif isinstance(base, (ir.Argument, ir.AllocaInstr)):  # defined in the entry block
                ctx.typed[buf] = (base, ctx.entry.bitcast(base, mem.as_pointer()))
                base = ctx.typed[buf][1]
            else:
                base = ctx.builder.bitcast(base, mem.as_pointer())
        p = ctx.builder.gep(base, [off], inbounds=True, source_etype=mem)
        if as_type is not None and as_type != mem:
            p = ctx.builder.bitcast(p, as_type.as_pointer())
        return p

    def _offset(self, ctx: _Ctx, buf: Buffer, indices: tuple[Expr, ...]) -> Expr:
        """flat_offset of buf[indices] under the loop ranges in scope. An unrolled loop emits its
        body once per iteration from the same statements (a register tile's stores), so a place's
        offset is simplified once for each set of extents of the variables it reads."""
        known = self._index_vars.get(id(indices))
        if known is None or known[0] is not indices:
            used = {x for i in indices for x in walk_expr(i) if isinstance(x, Var)}
            known = (indices, tuple(used))
            self._index_vars[id(indices)] = known
        key = (buf, id(indices), tuple(ctx.ranges.get(v) for v in known[1]))
        off = self._offsets.get(key)
        if off is None:
            off = self._offsets[key] = flat_offset(buf, indices, ctx.ranges)
        return off

    def _load(self, ctx: _Ctx, e: Load) -> ir.Value:
        b = ctx.builder
        if e.buffer not in ctx.bufs:
            raise CodegenError(f"buffer {e.buffer.name} is not in scope")
        mem = _MEM_TYPES[e.buffer.dtype]
        vec_var = ctx.vec[0] if ctx.vec is not None else None
        # the same load recurs across the iterations of unrolled loops it does not depend on
        # (the input tile of every Winograd position): its address analysis is done once
        acc = self._load_accesses.get((e, vec_var))
        if acc is None:
            acc = load_access(flat_offset(e.buffer, e.indices, ctx.ranges), vec_var)
            self._load_accesses[(e, vec_var)] = acc
        masked = ctx.mask is not None and not self._tile_lanes(ctx, e.buffer, acc)
        if masked:
            acc = masked_load(acc)
        if acc.kind in ("scalar", "broadcast"):
            v = b.load(self._ptr(ctx, e.buffer, self._expr(ctx, acc.offset)), typ=mem)
            return b.trunc(v, I1) if e.buffer.dtype == "bool" else v
        assert ctx.vec is not None  # the offset depends on the vector variable
        var, lanes = ctx.vec
        if acc.kind == "contiguous":
            assert acc.base is not None
            with ctx.scalar():
                p = self._ptr(ctx, e.buffer, self._expr(ctx, acc.base), ir.VectorType(mem, lanes))
            vt = ir.VectorType(mem, lanes)
            if masked:
                fn = self._masked("load", vt)
                v = b.call(fn, [b.bitcast(p, PTR), ir.Constant(I32, 4), ctx.mask, ir.Constant(vt, None)])
            else:
                v = b.load(p, typ=vt, align=4)
            return b.trunc(v, ir.VectorType(I1, lanes)) if e.buffer.dtype == "bool" else v
        if acc.kind == "strided":
            # load the covering span as one (odd-sized) vector, keep every c-th lane
            assert acc.base is not None and acc.stride is not None
            c = acc.stride
            span = (lanes - 1) * c + 1
            with ctx.scalar():
                p = self._ptr(ctx, e.buffer, self._expr(ctx, acc.base), ir.VectorType(mem, span))
            wide = b.load(p, typ=ir.VectorType(mem, span), align=4)
            v = b.shuffle_vector(
                wide,
                ir.Constant(ir.VectorType(mem, span), ir.Undefined),
                ir.Constant(ir.VectorType(I32, lanes), [k * c for k in range(lanes)]),
            )
            return b.trunc(v, ir.VectorType(I1, lanes)) if e.buffer.dtype == "bool" else v
        # gather: one scalar load per lane
        out = ir.Constant(ir.VectorType(reg_type(e.buffer.dtype), lanes), ir.Undefined)
        with ctx.scalar():
            for lane in range(lanes):
                lo = lane_offset(acc.offset, var, lane, ctx.ranges)
                if ctx.mask is not None:
                    lo = clamp_into(lo, e.buffer)
                v = b.load(self._ptr(ctx, e.buffer, self._expr(ctx, lo)), typ=mem)
                if e.buffer.dtype == "bool":
                    v = b.trunc(v, I1)
                out = b.insert_element(out, v, ir.Constant(I32, lane))
        return out

    def _expr(self, ctx: _Ctx, e: Expr) -> ir.Value:
        b = ctx.builder
        if isinstance(e, Var):
            if ctx.vec is not None and e is ctx.vec[0]:
                lanes = ctx.vec[1]
                return ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
            try:
                return ctx.vars[e]
            except KeyError:
                raise CodegenError(f"variable {e.name} is not in scope") from None
        if isinstance(e, IntImm):
            return ir.Constant(reg_type(e.dtype), int(e.value))
        if isinstance(e, FloatImm):
            return ir.Constant(reg_type(e.dtype), float(e.value))
        if isinstance(e, Load):
            return self._load(ctx, e)
        if isinstance(e, BinOp):
            return self._binop(ctx, e)
        if isinstance(e, Not):
            a = self._expr(ctx, e.a)
            return b.not_(a)
        if isinstance(e, Select):
            known = simplify(e.cond, ctx.ranges)
            if isinstance(known, IntImm):  # e.g. a position of an unrolled tile: only its own branch
                return self._expr(ctx, e.t if known.value else e.f)
            padded = self._padded_load(ctx, e)
            if padded is not None:
                return padded
            c = self._expr(ctx, e.cond)
            t, f = self._match(ctx, self._expr(ctx, e.t), self._expr(ctx, e.f))
            if isinstance(c.type, ir.VectorType) and not isinstance(t.type, ir.VectorType):
                t = self._splat(b, t, c.type.count)
                f = self._splat(b, f, c.type.count)
            elif isinstance(t.type, ir.VectorType) and not isinstance(c.type, ir.VectorType):
                pass  # scalar condition selecting vectors is valid LLVM
            return b.select(c, t, f)
        if isinstance(e, Cast):
            return self._cast(ctx, self._expr(ctx, e.value), e.value.dtype, e.dtype)
        if isinstance(e, Call):
            return self._call(ctx, e)
        raise CodegenError(f"cannot generate code for {type(e).__name__}")

    def _padded_load(self, ctx: _Ctx, sel: Select) -> ir.Value | None:
        """`select(cond, A[clamped index], constant)` in a vector loop (a padded copy of a tensor)
        as one masked load of the unclamped addresses, where every lane that `cond` selects lies
        inside its clamps (lanes outside the clamps are never touched). Vectors where a selected
        lane is clamped take the lane-by-lane path. A lane stride of 2-4 (a copy dealt into phases)
        loads the covering span under a spread mask and keeps every stride-th lane. None: not this
        pattern (access.padded_load decides which selects are) or lanes it cannot vectorize."""
        if ctx.vec is None:
            return None
        var, lanes = ctx.vec
        pad = padded_load(sel, var, ctx.ranges)
        if isinstance(pad, NotPadded) or pad.load.buffer not in ctx.bufs:
            return None
        e, stride = pad.load, pad.stride
        b = ctx.builder
        c = self._expr(ctx, pad.cond)
        if not isinstance(c.type, ir.VectorType):
            return None
        inside_lanes: ir.Value = ir.Constant(c.type, [1] * lanes)
        for clamp in pad.clamps:
            xv = self._expr(ctx, clamp.value)
            if not isinstance(xv.type, ir.VectorType):
                return None
            for op, bound in ((">=", clamp.lo), ("<=", clamp.hi)):
                if bound is not None:
                    ok = b.icmp_signed(op, xv, ir.Constant(xv.type, [bound] * lanes))
                    inside_lanes = b.and_(inside_lanes, ok)
        wanted = c if ctx.mask is None else b.and_(c, ctx.mask)
        clamped = b.and_(wanted, b.not_(inside_lanes))
        any_clamped = b.icmp_unsigned(
            "!=", b.bitcast(clamped, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0)
        )
        vt = ir.VectorType(_MEM_TYPES[e.buffer.dtype], lanes)
        fill = self._splat(b, self._expr(ctx, pad.fill), lanes)
        with b.if_else(any_clamped) as (slow, fast):
            with slow:
                slow_value = b.select(c, self._load(ctx, e), fill)
                slow_block = b.block
            with fast:
                with ctx.scalar():
                    base = self._expr(ctx, pad.base)
                ptr = ctx.bufs[e.buffer]
                mem = _MEM_TYPES[e.buffer.dtype]
                if ptr.type != mem.as_pointer():
                    ptr = b.bitcast(ptr, mem.as_pointer())
                # not inbounds: the first lane's address may lie before the buffer (a masked lane)
                p = b.bitcast(b.gep(ptr, [base], source_etype=mem), PTR)
                if stride == 1:
                    fast_value = b.call(self._masked("load", vt), [p, ir.Constant(I32, 4), wanted, fill])
                else:
                    span = (lanes - 1) * stride + 1
                    spread = b.shuffle_vector(
                        wanted,
                        ir.Constant(ir.VectorType(I1, lanes), [0] * lanes),
                        ir.Constant(
                            ir.VectorType(I32, span),
                            [j // stride if j % stride == 0 else lanes for j in range(span)],
                        ),
                    )
                    wide_t = ir.VectorType(mem, span)
                    wide = b.call(
                        self._masked("load", wide_t),
                        [p, ir.Constant(I32, 4), spread, self._splat(b, self._expr(ctx, pad.fill), span)],
                    )
                    fast_value = b.shuffle_vector(
                        wide,
                        ir.Constant(wide_t, ir.Undefined),
                        ir.Constant(ir.VectorType(I32, lanes), [k * stride for k in range(lanes)]),
                    )
                fast_block = b.block
        phi = b.phi(vt)
        phi.add_incoming(slow_value, slow_block)
        phi.add_incoming(fast_value, fast_block)
        return phi

    def _cast(self, ctx: _Ctx, v: ir.Value, src: str, dst: str) -> ir.Value:
        b = ctx.builder
        if src == dst:
            return v
        lanes = v.type.count if isinstance(v.type, ir.VectorType) else None

        def ty(d: str) -> ir.Type:
            t = reg_type(d)
            return ir.VectorType(t, lanes) if lanes else t

        if dst == "bool":
            zero: ir.Value = ir.Constant(reg_type(src), 0.0 if _is_float(src) else 0)
            if lanes:
                zero = self._splat(b, zero, lanes)
            return b.fcmp_unordered("!=", v, zero) if _is_float(src) else b.icmp_signed("!=", v, zero)
        if _is_float(src) and _is_float(dst):
            widths = {"float16": 16, "float32": 32, "float64": 64}
            return b.fpext(v, ty(dst)) if widths[dst] > widths[src] else b.fptrunc(v, ty(dst))
        if _is_float(src):  # (a uint8 above 127 is out of range for a signed conversion to 8 bits)
            return b.fptoui(v, ty(dst)) if dst == "uint8" else b.fptosi(v, ty(dst))
        if _is_float(dst):
            return b.uitofp(v, ty(dst)) if src in ("bool", "uint8") else b.sitofp(v, ty(dst))
        sw, dw = reg_type(src).width, reg_type(dst).width
        if sw == dw:
            return v
        if sw > dw:
            return b.trunc(v, ty(dst))
        return b.zext(v, ty(dst)) if src in ("bool", "uint8") else b.sext(v, ty(dst))

    def _binop(self, ctx: _Ctx, e: BinOp) -> ir.Value:
        b = ctx.builder
        if e.op == "+" and isinstance(e.b, Call) and e.b.name in DOT_NAMES:
            return self._dot(ctx, e.b, self._expr(ctx, e.a))
        if e.op in ("and", "or"):
            x, y = self._match(ctx, self._expr(ctx, e.a), self._expr(ctx, e.b))
            return b.and_(x, y) if e.op == "and" else b.or_(x, y)
        dt = e.a.dtype
        x, y = self._match(ctx, self._expr(ctx, e.a), self._expr(ctx, e.b))
        if _is_float(dt):
            if e.op in ("+", "-", "*", "/"):
                fn = {"+": b.fadd, "-": b.fsub, "*": b.fmul, "/": b.fdiv}[e.op]
                r = fn(x, y)
                r.flags.append("contract")
                return r
            if e.op in ("min", "max"):
                return b.call(self._intrinsic("minnum" if e.op == "min" else "maxnum", x.type), [x, y])
            if e.op in ("<", "<=", ">", ">=", "==", "!="):
                return b.fcmp_ordered(e.op, x, y) if e.op != "!=" else b.fcmp_unordered(e.op, x, y)
            if e.op == "%":
                return b.frem(x, y)
            raise CodegenError(f"float op {e.op} unsupported")
        folded = _fold_int(e.op, x, y)
        if folded is not None:
            return folded
        if not isinstance(x.type, ir.IntType):
            return self._int_binop(ctx, e, x, y)
        # value numbering within a basic block: the iterations of an unrolled tile compute the same
        # index terms (a row's offset) again for every access, for LLVM to merge; a value made
        # earlier in the same block is reused instead (it dominates everything after it there)
        key = (id(b.block), e.op, _value_key(x), _value_key(y))
        known = self._numbered.get(key)
        if known is not None:
            return known[0]
        r = self._int_binop(ctx, e, x, y)
        self._numbered[key] = (r, b.block, x, y)  # holds what the key's ids stand for
        return r

    def _int_binop(self, ctx: _Ctx, e: BinOp, x: ir.Value, y: ir.Value) -> ir.Value:
        """`x op y` for integer (or boolean) scalars or vectors."""
        b = ctx.builder
        if e.op == "+":
            return b.add(x, y)
        if e.op == "-":
            return b.sub(x, y)
        if e.op == "*":
            return b.mul(x, y)
        if e.op in ("<", "<=", ">", ">=", "==", "!="):
            return b.icmp_signed(e.op, x, y)
        if e.op in ("min", "max"):
            c = b.icmp_signed("<" if e.op == "min" else ">", x, y)
            return b.select(c, x, y)
        if e.op in ("//", "%"):
            lo, _ = bounds(e.a, ctx.ranges)
            dlo, _ = bounds(e.b, ctx.ranges)
            # truncation is floor for a scalar whose ranges prove it non-negative (an address in a
            # vector loop that does not vary with its lanes too); lanes switched off by a mask may
            # run past the ranges, so vectors keep the exact floor
            if lo >= 0 and dlo > 0 and not isinstance(x.type, ir.VectorType):
                return b.sdiv(x, y) if e.op == "//" else b.srem(x, y)
            q, r = b.sdiv(x, y), b.srem(x, y)
            zero = (
                ir.Constant(r.type, 0)
                if not isinstance(r.type, ir.VectorType)
                else self._splat(b, ir.Constant(r.type.element, 0), r.type.count)
            )
            neg = b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero))
            fix = b.and_(b.icmp_signed("!=", r, zero), neg)
            if e.op == "//":
                return b.sub(q, b.zext(fix, q.type))
            return b.select(fix, b.add(r, y), r)
        if e.op == "/":
            return b.sdiv(x, y)
        raise CodegenError(f"integer op {e.op} unsupported")

    # float32 only (inline code keeps vectorized loops vectorized); other dtypes take the paths below
    _INLINE: dict[str, Callable[..., ir.Value]] = {
        "exp": emit_exp,
        "sigmoid": emit_sigmoid,
        "tanh": emit_tanh,
        "erf": emit_erf,
        "log": emit_log,
        "pow": emit_pow,
        "sin": emit_sin,
        "cos": emit_cos,
        "tan": emit_tan,
        "asin": emit_asin,
        "acos": emit_acos,
        "atan": emit_atan,
        "sinh": emit_sinh,
        "cosh": emit_cosh,
        "asinh": emit_asinh,
        "acosh": emit_acosh,
        "atanh": emit_atanh,
    }
    _LLVM_MATH = {
        "log": "log",
        "sqrt": "sqrt",
        "fabs": "fabs",
        "floor": "floor",
        "ceil": "ceil",
        "round": "roundeven",
        "pow": "pow",
    }
    _LIBM = {
        "tanh": "tanhf",
        "erf": "erff",
        "exp": "expf",
        "sin": "sinf",
        "cos": "cosf",
        **{f: f"{f}f" for f in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")},
    }

    # by int32 lane count: vpmaddubsw (u8 x s8 pairs summed into int16) and vpmaddwd (int16 pairs
    # summed into int32), the two steps of DOT4 without VNNI; vpmaddwd alone is DOT2
    _PMADDUBSW = {
        4: "llvm.x86.ssse3.pmadd.ub.sw.128",
        8: "llvm.x86.avx2.pmadd.ub.sw",
        16: "llvm.x86.avx512.pmaddubs.w.512",
    }
    _PMADDWD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.avx512.pmaddw.d.512"}

    def _dot(self, ctx: _Ctx, e: Call, acc: ir.Value | None = None) -> ir.Value:
        """An integer dot step plus `acc`, exact in int32 whichever way it is computed.
        DOT4(x0, x1, x2, x3, w): the four uint8 x_k times the four signed bytes of int32 w (byte k,
        little-endian):
        - vpdpbusd (VNNI): one instruction over the x_k packed into an int32 (adjacent byte loads,
          which LLVM merges into one);
        - vpmaddubsw, then vpmaddwd by ones (AVX2, AVX-512 BW): only for DOT4_PAIRS_FIT, whose weight
          pairs keep their int16 sums from saturating.
        DOT2(x0, x1, w): the two int16 x_k times the two int16 halves of w: vpmaddwd over the x_k
        packed into an int32, at every width the target has a dot instruction for.
        Elsewhere (scalars, other widths) the products are spelled out."""
        b = ctx.builder
        args = [self._expr(ctx, a) for a in e.args]
        vectors = [a for a in [*args, acc] if a is not None and isinstance(a.type, ir.VectorType)]
        lanes = vectors[0].type.count if vectors else 0

        def full(v: ir.Value) -> ir.Value:
            return self._splat(b, v, lanes) if lanes and not isinstance(v.type, ir.VectorType) else v

        i32 = ir.VectorType(I32, lanes) if lanes else I32

        def const(c: int) -> ir.Value:
            return ir.Constant(i32, [c] * lanes) if lanes else ir.Constant(I32, c)

        width = len(args) - 1  # x values per int32 of weights
        bits = 32 // width
        # one value per k (a broadcast operand stays scalar until packed); an int16 x is a uint8
        # value widened, or any int16: its low half is what the packing and the products read
        extend = b.sext if e.name == DOT2 else b.zext
        xs = [
            extend(x, ir.VectorType(I32, x.type.count) if isinstance(x.type, ir.VectorType) else I32)
            for x in args[:width]
        ]
        w = full(args[width])
        instruction = self.dot_instructions.get(lanes)
        if e.name == DOT2:
            instruction = "vpmaddwd" if instruction is not None else None
        elif instruction == "vpmaddubsw" and e.name != DOT4_PAIRS_FIT:
            instruction = None  # its pairs could saturate
        if instruction is None:
            total = full(acc) if acc is not None else None
            for k in range(width):
                wk = b.ashr(b.shl(w, const(32 - bits * (k + 1))), const(32 - bits))
                term = b.mul(full(xs[k]), wk)
                total = term if total is None else b.add(total, term)
            assert total is not None
            return total
        mask = const((1 << bits) - 1)
        packed = b.and_(full(xs[0]), mask)
        for k in range(1, width):
            packed = b.or_(packed, b.shl(b.and_(full(xs[k]), mask), const(bits * k)))
        total = full(acc) if acc is not None else const(0)
        if instruction == "vpdpbusd":
            fn = self._extern(f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", i32, [i32, i32, i32])
            return b.call(fn, [total, packed, w])
        halves = ir.VectorType(I16, 2 * lanes)
        widen = self._extern(self._PMADDWD[lanes], i32, [halves, halves])
        if instruction == "vpmaddwd":
            return b.add(total, b.call(widen, [b.bitcast(packed, halves), b.bitcast(w, halves)]))
        octets = ir.VectorType(I8, 4 * lanes)
        pairs_fn = self._extern(self._PMADDUBSW[lanes], halves, [octets, octets])
        pairs = b.call(pairs_fn, [b.bitcast(packed, octets), b.bitcast(w, octets)])
        return b.add(total, b.call(widen, [pairs, ir.Constant(halves, [1] * 2 * lanes)]))

    # a divisor whose reciprocal path below is exact: far from overflow and underflow either way
    _QUOTIENT_RANGE = (2.0**-60, 2.0**60)

    def _rounded_quotient(self, ctx: _Ctx, e: BinOp) -> ir.Value | None:
        """round(a / b) for float32 vectors a over a divisor b that is one value for every lane (a
        quantization's scale): b's reciprocal y once, then q = a * y corrected by one step
        (Markstein's: r = a - b * q exact by FMA, q + r * y), which is a / b correctly rounded
        wherever it matters to round(), at a few FMAs where the division takes many cycles a
        vector. A divisor outside _QUOTIENT_RANGE takes the division. None where the shape does
        not apply."""
        b = ctx.builder
        if ctx.vec is None or e.dtype != "float32":
            return None
        num, den = self._expr(ctx, e.a), self._expr(ctx, e.b)
        if not isinstance(num.type, ir.VectorType) or isinstance(den.type, ir.VectorType):
            return None
        lanes = num.type.count
        fabs = b.call(self._intrinsic("fabs", F32), [den])
        lo, hi = (ir.Constant(F32, bound) for bound in self._QUOTIENT_RANGE)
        in_range = b.and_(b.fcmp_ordered(">=", fabs, lo), b.fcmp_ordered("<=", fabs, hi))
        fma = self._extern(f"llvm.fma.v{lanes}f32", num.type, [num.type] * 3)
        with b.if_else(in_range, likely=True) as (fast, slow):
            with fast:
                y = self._splat(b, b.fdiv(ir.Constant(F32, 1.0), den), lanes)
                q = b.fmul(num, y)
                r = b.call(fma, [b.fneg(q), self._splat(b, den, lanes), num])
                corrected = b.call(fma, [r, y, q])
                # q where the correction is no number (q infinite: it overflowed, like the quotient)
                # or zero (its sign is q's, which the correction's sum may lose)
                zero = ir.Constant(num.type, [0.0] * lanes)
                fast_value = b.select(b.fcmp_unordered("==", corrected, zero), q, corrected)
                fast_block = b.block
            with slow:
                slow_value = b.fdiv(num, self._splat(b, den, lanes))
                slow_block = b.block
        merged = b.phi(num.type)
        merged.add_incoming(fast_value, fast_block)
        merged.add_incoming(slow_value, slow_block)
        return merged

    def _call(self, ctx: _Ctx, e: Call) -> ir.Value:
        b = ctx.builder
        if e.name in DOT_NAMES:
            return self._dot(ctx, e)
        if e.name == "round" and isinstance(e.args[0], BinOp) and e.args[0].op == "/":
            quotient = self._rounded_quotient(ctx, e.args[0])
            if quotient is not None:
                return b.call(self._intrinsic("roundeven", quotient.type), [quotient])
        args = [self._expr(ctx, a) for a in e.args]
        if len(args) == 2:
            args = list(self._match(ctx, args[0], args[1]))
        if e.name in self._INLINE and e.dtype == "float32":
            return self._INLINE[e.name](b, *args)
        if e.name in self._LLVM_MATH:
            return b.call(self._intrinsic(self._LLVM_MATH[e.name], args[0].type), args)
        if e.name in self._LIBM:
            f = self._extern(self._LIBM[e.name], F32, [F32])
            v = args[0]
            if not isinstance(v.type, ir.VectorType):
                return b.call(f, [v])
            out = ir.Constant(v.type, ir.Undefined)
            for lane in range(v.type.count):
                x = b.extract_element(v, ir.Constant(I32, lane))
                out = b.insert_element(out, b.call(f, [x]), ir.Constant(I32, lane))
            return out
        raise CodegenError(f"unknown intrinsic {e.name}")

    # ------------------------------------------------------------------ statements
    def _stmt(self, ctx: _Ctx, s: Stmt) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self._stmt(ctx, x)
        elif isinstance(s, Store):
            self._store(ctx, s)
        elif isinstance(s, For):
            self._for(ctx, s)
        elif isinstance(s, IfThenElse):
            self._if(ctx, s)
        elif isinstance(s, Allocate):
            self._allocate(ctx, s)
        else:
            raise CodegenError(f"cannot generate code for {type(s).__name__} (flatten first)")

    def _store(self, ctx: _Ctx, s: Store) -> None:
        b = ctx.builder
        off = self._offset(ctx, s.buffer, s.indices)
        if ctx.vec is not None and self._lane_reduction(ctx, s, off):
            return
        val = self._accumulate(ctx, s) or self._expr(ctx, s.value)
        if s.buffer.dtype == "bool":
            val = b.zext(
                val, ir.VectorType(I8, val.type.count) if isinstance(val.type, ir.VectorType) else I8
            )
        if ctx.vec is None:
            b.store(val, self._ptr(ctx, s.buffer, self._expr(ctx, off)))
            return
        var, lanes = ctx.vec
        if not isinstance(val.type, ir.VectorType):
            val = self._splat(b, val, lanes)
        masked = ctx.mask is not None
        acc = self._store_accesses.get((id(off), var, masked))
        if acc is None or acc.offset is not off:
            acc = store_access(off, var, ctx.ranges, masked=masked)
            self._store_accesses[(id(off), var, masked)] = acc
        if ctx.mask is not None and self._tile_lanes(ctx, s.buffer, acc):
            # the switched-off lanes keep what they held, and the tile stays in registers
            assert acc.base is not None
            with ctx.scalar():
                p = self._ptr(ctx, s.buffer, self._expr(ctx, acc.base), val.type)
            st = b.store(b.select(ctx.mask, val, b.load(p, typ=val.type, align=4)), p)
            st.align = 4
            return
        if ctx.mask is not None:
            self._masked_store(ctx, s.buffer, acc, val)
            return
        if acc.kind == "broadcast":
            # every lane writes the same element: the last lane wins (as in the serial loop)
            last = b.extract_element(val, ir.Constant(I32, lanes - 1))
            with ctx.scalar():
                b.store(last, self._ptr(ctx, s.buffer, self._expr(ctx, off)))
            return
        with ctx.scalar():
            if acc.kind == "contiguous":
                assert acc.base is not None
                st = b.store(val, self._ptr(ctx, s.buffer, self._expr(ctx, acc.base), val.type))
                st.align = 4
            else:
                for lane in range(lanes):
                    lo = lane_offset(off, var, lane, ctx.ranges)
                    b.store(
                        b.extract_element(val, ir.Constant(I32, lane)),
                        self._ptr(ctx, s.buffer, self._expr(ctx, lo)),
                    )

    def _lane_reduction(self, ctx: _Ctx, s: Store, off: Expr) -> bool:
        """`acc[i] = op(acc[i], x)` in a vector loop over the reduced axis (legality allows only
        that, see lane_combine): the lanes of x combined into one value (masked-off lanes as the
        op's identity), then into the scalar accumulator. False for any other store."""
        op = lane_combine(s)
        assert ctx.vec is not None
        var, lanes = ctx.vec
        if op is None or any(x is var for x in walk_expr(off)):
            return False
        b = ctx.builder
        value = s.value
        assert isinstance(value, BinOp)
        x = self._expr(ctx, value.b)
        if not isinstance(x.type, ir.VectorType):
            x = self._splat(b, x, lanes)
        vt = x.type
        if ctx.mask is not None:
            x = b.select(ctx.mask, x, ir.Constant(vt, [_IDENTITY[op]] * lanes))
        slot, slot_type = self._vector_slots.get(id(s), (None, None))
        if slot is not None and slot_type == vt:
            b.store(self._min_max(b, op, b.load(slot, typ=vt), x), slot)
            return True
        with ctx.scalar(unmasked=True):
            ptr = self._ptr(ctx, s.buffer, self._expr(ctx, off))
            b.store(self._combine_lanes(b, op, b.load(ptr, typ=_MEM_TYPES[s.buffer.dtype]), x), ptr)
        return True

    def _min_max(self, b: ir.IRBuilder, op: str, acc: ir.Value, x: ir.Value) -> ir.Value:
        """max or min (`op`) of two values of one type, lane by lane for vectors (NaN-ignoring)."""
        return b.call(self._intrinsic(f"{op}num", acc.type), [acc, x])

    def _combine_lanes(self, b: ir.IRBuilder, op: str, acc: ir.Value, x: ir.Value) -> ir.Value:
        """op(acc, op over the lanes of vector x), acc a scalar."""
        vt, mem = x.type, acc.type
        code = f"v{vt.count}{'f64' if mem == F64 else 'f32'}"
        if op == "+":
            name = f"llvm.vector.reduce.fadd.{code}"
            return b.call(self._extern(name, mem, [mem, vt]), [acc, x], fastmath=("reassoc", "contract"))
        # halving steps of vector maxnum/minnum: LLVM expands its fmax/fmin reductions into a chain
        # of scalar steps, each with its own NaN test
        while vt.count > 1 and vt.count % 2 == 0:
            half = vt.count // 2
            lo = b.shuffle_vector(x, x, ir.Constant(ir.VectorType(I32, half), list(range(half))))
            hi = b.shuffle_vector(x, x, ir.Constant(ir.VectorType(I32, half), list(range(half, vt.count))))
            x = self._min_max(b, op, lo, hi)
            vt = x.type
        if vt.count > 1:
            code = f"v{vt.count}{'f64' if mem == F64 else 'f32'}"
            x = b.call(self._extern(f"llvm.vector.reduce.f{op}.{code}", mem, [vt]), [x])
        else:
            x = b.extract_element(x, ir.Constant(I32, 0))
        return self._min_max(b, op, acc, x)

    def _vector_accumulated(self, ctx: _Ctx, s: For) -> Store | None:
        """The max or min step of loop `s` when its body is a vectorized loop running only that
        step (`acc[i] = op(acc[i], x)`, maybe predicated) into an accumulator that neither loop
        indexes: softmax's row maximum and ReduceMax split into vector steps. Such a step then keeps
        a vector of partial results over the whole of `s`, combined across lanes once after it
        (_accumulated_loop), not once per step: the combination is a chain of halving steps longer
        than the step's own arithmetic. Sums keep their per-step combination: LLVM reassociates
        those itself, and a vector slot for LayerNorm's sums measured no faster."""
        inner = s.body
        if not isinstance(inner, For) or ctx.vec is not None:
            return None
        if inner.kind is not ForKind.VECTORIZED or inner.extent < 2 or not _vectorizable(inner):
            return None
        step = inner.body
        if isinstance(step, IfThenElse) and step.orelse is None:
            step = step.then
        if not isinstance(step, Store) or lane_combine(step) in (None, "+"):
            return None
        indexed = {x for i in step.indices for x in walk_expr(i) if isinstance(x, Var)}
        value = step.value
        assert isinstance(value, BinOp)
        if s.var in indexed or inner.var in indexed:
            return None
        if any(isinstance(x, Load) and x.buffer is step.buffer for x in walk_expr(value.b)):
            return None
        return step

    def _accumulated_loop(self, ctx: _Ctx, s: For, step: Store) -> None:
        """Loop `s` with `step` accumulating into a vector slot set to the
        op's identity before it; after it, the slot's lanes combined into the accumulator."""
        op = lane_combine(step)
        assert op is not None and isinstance(s.body, For)
        mem = _MEM_TYPES[step.buffer.dtype]
        vt = ir.VectorType(mem, s.body.extent)
        slot = ctx.entry.alloca(vt, name=f"{step.buffer.name}.lanes")
        b = ctx.builder
        b.store(ir.Constant(vt, [_IDENTITY[op]] * vt.count), slot)
        self._vector_slots[id(step)] = (slot, vt)
        try:
            self._sequential(ctx, s)
        finally:
            del self._vector_slots[id(step)]
        b = ctx.builder
        ptr = self._ptr(ctx, step.buffer, self._expr(ctx, flat_offset(step.buffer, step.indices, ctx.ranges)))
        b.store(self._combine_lanes(b, op, b.load(ptr, typ=mem), b.load(slot, typ=vt)), ptr)

    def _accumulate(self, ctx: _Ctx, s: Store) -> ir.Value | None:
        """`buf[i] = buf[i] + x` (a reduction step): the add may be reassociated and contracted (an
        FMA with the product that feeds it). Sums along a row run as vectors by the schedule's
        choice (_lane_reduction), not LLVM's: its loop vectorizer is off (library.py)."""
        v = s.value
        if not (
            isinstance(v, BinOp)
            and v.op == "+"
            and _is_float(v.dtype)
            and isinstance(v.a, Load)
            and v.a.buffer is s.buffer
            and v.a.indices == s.indices
        ):
            return None
        x, y = self._match(ctx, self._expr(ctx, v.a), self._expr(ctx, v.b))
        r = ctx.builder.fadd(x, y)
        r.flags.extend(["reassoc", "contract"])
        return r

    def _tile_lanes(self, ctx: _Ctx, buf: Buffer, acc: Access) -> bool:
        """Whether a predicated vector loop may touch every lane of this access to a register tile
        as if no lane were switched off: a `local` buffer read or written at consecutive elements
        that all lie inside it, whatever the mask (a partial column tile whose allocation covers
        the whole tile), on this function's own stack, so no other thread writes the lanes a
        store keeps. Such an access takes plain loads and stores (a store keeping the switched-off
        lanes' old values), which LLVM keeps in registers; a masked access to the tile's memory
        pins every accumulator of it on the stack."""
        if buf.scope != "local" or acc.kind != "contiguous" or ctx.vec is None:
            return False
        own = ctx.bufs.get(buf)
        if not isinstance(own, ir.AllocaInstr) or own.function is not ctx.fn:
            return False
        lo, hi = bounds(acc.offset, ctx.ranges)
        return lo >= 0 and hi <= buf.size - 1

    def _masked(self, kind: str, vt: ir.VectorType) -> ir.Function:
        el = vt.element
        if isinstance(el, ir.HalfType):
            code = "f16"
        else:
            code = "f32" if el == F32 else "f64" if el == F64 else f"i{el.width}"
        name = f"llvm.masked.{kind}.v{vt.count}{code}.p0"
        fn = self.module.globals.get(name)
        if fn is None:
            mask_t = ir.VectorType(I1, vt.count)
            if kind == "load":
                fn = ir.Function(self.module, ir.FunctionType(vt, [PTR, I32, mask_t, vt]), name)
            else:
                fn = ir.Function(self.module, ir.FunctionType(VOID, [vt, PTR, I32, mask_t]), name)
        return fn

    def _masked_store(self, ctx: _Ctx, buf: Buffer, acc: Access, val: ir.Value) -> None:
        b = ctx.builder
        assert ctx.vec is not None  # only vector stores are masked
        var, lanes = ctx.vec
        mask = ctx.mask
        with ctx.scalar(unmasked=True):
            if acc.kind == "contiguous":
                assert acc.base is not None
                p = self._ptr(ctx, buf, self._expr(ctx, acc.base), val.type)
                b.call(self._masked("store", val.type), [val, b.bitcast(p, PTR), ir.Constant(I32, 4), mask])
            else:
                for lane in range(lanes):
                    with b.if_then(b.extract_element(mask, ir.Constant(I32, lane))):
                        lo = lane_offset(acc.offset, var, lane, ctx.ranges)
                        b.store(
                            b.extract_element(val, ir.Constant(I32, lane)),
                            self._ptr(ctx, buf, self._expr(ctx, lo)),
                        )

    def _if(self, ctx: _Ctx, s: IfThenElse) -> None:
        b = ctx.builder
        c = self._expr(ctx, s.cond)
        if isinstance(c.type, ir.VectorType):  # predicated lanes of a vectorized loop
            outer = ctx.mask
            ctx.mask = c if outer is None else b.and_(outer, c)
            self._stmt(ctx, s.then)
            if s.orelse is not None:
                nc = b.not_(c)
                ctx.mask = nc if outer is None else b.and_(outer, nc)
                self._stmt(ctx, s.orelse)
            ctx.mask = outer
            return
        with b.if_else(c) as (then, orelse):
            with then:
                self._stmt(ctx, s.then)
            with orelse:
                if s.orelse is not None:
                    self._stmt(ctx, s.orelse)

    def _allocate(self, ctx: _Ctx, s: Allocate) -> None:
        buf = s.buffer
        mem = _MEM_TYPES[buf.dtype]
        nbytes = buf.size * (mem.width // 8 if isinstance(mem, ir.IntType) else 4 if mem == F32 else 8)
        if buf.scope == "local" or nbytes <= 4096:
            if nbytes > MAX_STACK_BUFFER_BYTES:
                raise CodegenError(
                    f"local buffer {buf.name} of {nbytes} bytes exceeds the {MAX_STACK_BUFFER_BYTES} bytes "
                    "a kernel may keep on a thread's stack"
                )
            arr = ctx.entry.alloca(ir.ArrayType(mem, buf.size))
            arr.align = 64
            ctx.bufs[buf] = arr
            self._stmt(ctx, s.body)
            return
        # from the runtime's workspace cache (compiler/codegen/workspace.c), not malloc: large blocks
        # from malloc are fresh pages, faulted in anew on every call
        alloc = self._extern(WORKSPACE_ALLOC, PTR, [I64])
        free = self._extern(WORKSPACE_FREE, VOID, [PTR, I64])
        size = ir.Constant(I64, (nbytes + 63) // 64 * 64)
        b = ctx.builder
        p = b.call(alloc, [size])
        if ctx.fn.function_type.return_type == I32:  # the kernel's body (not an outlined loop body)
            with b.if_then(b.icmp_unsigned("==", p, ir.Constant(PTR, None)), likely=False):
                b.ret(ir.Constant(I32, OUT_OF_MEMORY))
        ctx.bufs[buf] = p
        self._stmt(ctx, s.body)
        ctx.builder.call(free, [p, size])

    def _counted_loop(
        self, ctx: _Ctx, var: Var, start: ir.Value, end: ir.Value, body: Stmt, extent: int
    ) -> None:
        """for var in [start, end): body; `extent`, the loop's whole extent (a parallel loop's
        chunk runs part of it), numbers the streaming steps."""
        b = ctx.builder
        stream = self._stream_start(ctx, extent) if var is self._stream_at and ctx.vec is None else None
        pre = b.block
        head = ctx.fn.append_basic_block(f"{var.name}.head")
        loop = ctx.fn.append_basic_block(f"{var.name}.body")
        done = ctx.fn.append_basic_block(f"{var.name}.done")
        b.branch(head)
        b.position_at_end(head)
        phi = b.phi(I64, name=var.name)
        phi.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", phi, end), loop, done)
        b.position_at_end(loop)
        ctx.vars[var] = phi
        ctx.loops.append((phi, extent))
        if stream is not None:
            self._stream_step(ctx, stream, phi)
        self._stmt(ctx, body)
        ctx.loops.pop()
        nxt = b.add(phi, ir.Constant(I64, 1))
        phi.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(done)

    def _for(self, ctx: _Ctx, s: For) -> None:
        ctx.ranges[s.var] = s.extent
        if s.extent == 1:
            ctx.vars[s.var] = ir.Constant(I64, 0)
            self._stmt(ctx, s.body)
            return
        if s.kind is ForKind.PARALLEL:
            self._parallel(ctx, s)
        elif s.kind is ForKind.VECTORIZED and ctx.vec is None and _vectorizable(s):
            ctx.vec = (s.var, s.extent)
            self._stmt(ctx, s.body)
            ctx.vec = None
        elif (step := self._vector_accumulated(ctx, s)) is not None:
            self._accumulated_loop(ctx, s, step)
        else:
            self._sequential(ctx, s)

    def _sequential(self, ctx: _Ctx, s: For) -> None:
        """A serial or unrolled loop (one that is not vectorized where it stands): short unrolled
        loops as repeated bodies, the others counted."""
        if s.kind in (ForKind.UNROLLED, ForKind.VECTORIZED) and s.extent <= MAX_UNROLL_EXTENT:
            for i in range(s.extent):
                ctx.vars[s.var] = ir.Constant(I64, i)
                ctx.loops.append((ctx.vars[s.var], s.extent))
                self._stmt(ctx, specialize(s.body, s.var, i, ctx.ranges) if ctx.vec is not None else s.body)
                ctx.loops.pop()
        else:
            self._counted_loop(ctx, s.var, ir.Constant(I64, 0), ir.Constant(I64, s.extent), s.body, s.extent)

    def _stream_steps(self, ctx: _Ctx, extent: int) -> int:
        """S: the steps of weight streaming, the iterations of the step's loop (of `extent`) and of
        the loops around it from the nearest parallel loop (or the kernel's top) down."""
        return math.prod(e for _, e in ctx.loops) * extent

    def _stream_start(self, ctx: _Ctx, extent: int) -> ir.Value | None:
        """Before the step's loop: the address of its first step's first line. Of step number
        s = o * extent + r (o: the enclosing loops' indices, linearized), the step's loop adds the
        r part itself (`_stream_step`): only this one address crosses into the loop, where the
        enclosing loops' indices, kept live in it, made LLVM spill a full register tile."""
        buf = self._stream
        assert buf is not None
        base = ctx.bufs.get(buf)
        if base is None:  # not captured by this parallel loop: it does not read the weight
            return None
        b = ctx.builder
        outer: ir.Value = ir.Constant(I64, 0)
        for value, e in ctx.loops:
            outer = b.add(b.mul(outer, ir.Constant(I64, e)), value)
        lines, steps = buffer_bytes(buf) // LINE_BYTES, self._stream_steps(ctx, extent)
        line = b.udiv(b.mul(outer, ir.Constant(I64, extent * lines)), ir.Constant(I64, steps))
        line = b.add(line, ir.Constant(I64, STREAM_LEAD_BYTES // LINE_BYTES))
        # kept in a stack slot, read by each step (an atomic load: LLVM leaves the slot in memory), so
        # that no register is taken from the loop: kernels whose register tile fills the registers
        # spilled it when the address stayed in one
        slot = ctx.entry.alloca(PTR, name="stream.start")
        b.store(b.gep(base, [b.mul(line, ir.Constant(I64, LINE_BYTES))], source_etype=I8), slot)
        return slot

    def _stream_step(self, ctx: _Ctx, start: ir.Value, r: ir.Value) -> None:
        """One step of weight streaming (compiler/codegen/stream.py), number s = o * extent + r of
        S: of the streamed weight's L lines it prefetches `per_step` from about line s*L/S on,
        STREAM_LEAD_BYTES ahead (`start` holds the address of line o*extent*L/S, ahead; the last
        steps reach past the weight's end: see compiler/codegen/stream.py). Straight-line code with
        constants the instructions carry (a loop of prefetches, or a division by S, inside the
        register tile's reduction made LLVM spill the accumulators)."""
        assert self._stream is not None
        b = ctx.builder
        per_step, scale, shift = stream_stride(
            buffer_bytes(self._stream) // LINE_BYTES, self._stream_steps(ctx, 1)
        )
        line = b.lshr(b.mul(r, ir.Constant(I64, scale)), ir.Constant(I64, shift))
        at = b.load_atomic(start, "monotonic", 8, typ=PTR)
        first = b.gep(at, [b.mul(line, ir.Constant(I64, LINE_BYTES))], source_etype=I8)
        fetch = self._extern("llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        # read, locality, data cache
        hints = [ir.Constant(I32, 0), ir.Constant(I32, PREFETCH_LOCALITY), ir.Constant(I32, 1)]
        for k in range(per_step):
            b.call(fetch, [b.gep(first, [ir.Constant(I64, LINE_BYTES * k)], source_etype=I8), *hints])

    def _parallel(self, ctx: _Ctx, s: For) -> None:
        if ctx.vec is not None:
            raise CodegenError(f"parallel loop {s.var.name} inside a vectorized loop")
        b = ctx.builder
        fvars = sorted((v for v in free_vars(s) if v is not s.var), key=lambda v: v.name)
        bufs = _buffers_used(s)
        captured_bufs = [x for x in bufs if x in ctx.bufs]
        n = len(fvars) + len(captured_bufs)
        data = ctx.entry.alloca(I64, size=max(n, 1))
        for i, v in enumerate(fvars):
            b.store(ctx.vars[v], b.gep(data, [ir.Constant(I64, i)], source_etype=I64))
        for j, buf in enumerate(captured_bufs):
            p = b.gep(data, [ir.Constant(I64, len(fvars) + j)], source_etype=I64)
            b.store(b.ptrtoint(ctx.bufs[buf], I64), p)
        self._outlined += 1
        name = f"{self.symbol}.par{self._outlined}"
        # the runtime calls `name(data, start, end)` for each chunk of iterations it hands out; it
        # unpacks the captured values and calls the loop's body, whose buffer parameters are noalias
        # like the kernel body's (pointers loaded from memory would carry no aliasing facts, and LLVM
        # could not keep accumulators in registers)
        loop_fn = ir.Function(
            self.module,
            ir.FunctionType(VOID, [I64] * len(fvars) + [PTR] * len(captured_bufs) + [I64, I64]),
            f"{name}.body",
        )
        loop_fn.linkage = "internal"
        loop_fn.attributes.add("alwaysinline")
        body_fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR, I64, I64]), name)
        body_fn.linkage = "internal"
        eb = ir.IRBuilder(body_fn.append_basic_block("entry"))
        arr = body_fn.args[0]
        values = [
            eb.load(eb.gep(arr, [ir.Constant(I64, i)], source_etype=I64), typ=I64) for i in range(len(fvars))
        ]
        for j in range(len(captured_bufs)):
            p = eb.gep(arr, [ir.Constant(I64, len(fvars) + j)], source_etype=I64)
            values.append(eb.inttoptr(eb.load(p, typ=I64), PTR))
        eb.call(loop_fn, [*values, body_fn.args[1], body_fn.args[2]])
        eb.ret_void()
        inner = self._new_ctx(loop_fn)
        inner.ranges = dict(ctx.ranges)  # (inner.loops starts empty: the outer indices are not captured)
        for v, arg in zip(fvars, loop_fn.args, strict=False):
            inner.vars[v] = arg
        for buf, arg in zip(captured_bufs, loop_fn.args[len(fvars) : -2], strict=True):
            arg.add_attribute("noalias")
            inner.bufs[buf] = arg
        start, end = loop_fn.args[-2:]
        self._counted_loop(inner, s.var, start, end, s.body, s.extent)
        inner.builder.ret_void()
        inner.entry.branch(loop_fn.blocks[1])
        run = self._extern(PARALLEL_FOR, VOID, [PTR, PTR, I64])
        b.call(run, [body_fn, data, ir.Constant(I64, s.extent)])


def _vectorizable(s: For) -> bool:
    for x in walk_stmts(s.body):
        if isinstance(x, (Allocate,)):
            return False
        if isinstance(x, For) and x.kind is not ForKind.UNROLLED:
            return False
    return True


def _buffers_used(s: Stmt) -> list[Buffer]:
    seen: dict[Buffer, None] = {}
    for x in walk_stmts(s):
        exprs: list[Expr] = []
        if isinstance(x, Store):
            seen.setdefault(x.buffer, None)
            exprs = [x.value, *x.indices]
        elif isinstance(x, IfThenElse):
            exprs = [x.cond]
        for e in exprs:
            for y in walk_expr(e):
                if isinstance(y, Load):
                    seen.setdefault(y.buffer, None)
    return list(seen)


def emit_kernel(
    module: ir.Module,
    func: PrimFunc,
    symbol: str,
    stream: str | None = None,
    dot_instructions: Mapping[int, str] | None = None,
) -> ir.Function:
    """The kernel `func` as the C-ABI function `symbol`; `stream` names the constant parameter it
    prefetches ahead of its reads (compiler/codegen/stream.py), if any; `dot_instructions` are the target's
    u8 x s8 dot-product instructions by width (Target.dot_instructions)."""
    return KernelEmitter(module, func, symbol, stream, dot_instructions).emit()


def emit_alias(module: ir.Module, symbol: str, of: str) -> ir.Function:
    """A kernel entry `symbol` that runs the kernel entry `of` (same C ABI)."""
    target = module.get_global(of)
    if not isinstance(target, ir.Function):
        raise CodegenError(f"no kernel {of!r} in the module to alias as {symbol!r}")
    fn = ir.Function(module, ir.FunctionType(I32, [PTR]), symbol)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(b.call(target, [fn.args[0]]))
    return fn
