"""TensorIR: the loop-nest program of one kernel.

Expressions and statements are frozen values. Variables and buffers compare by identity (two
loops may share a name hint; the printer and the schedule use unique names per PrimFunc).
Blocks (one per computed tensor) carry iteration variables bound to loop expressions, so the
schedule primitives can move loops around them without changing what they compute; `flatten`
(see compiler.tir.flatten) turns blocks into plain loads/stores before code generation.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

INDEX = "int64"


@dataclass(frozen=True, slots=True, eq=False)
class Var:
    name: str
    dtype: str = INDEX


@dataclass(frozen=True, slots=True)
class IntImm:
    value: int
    dtype: str = INDEX


@dataclass(frozen=True, slots=True)
class FloatImm:
    value: float
    dtype: str = "float32"


@dataclass(frozen=True, slots=True)
class BinOp:
    """Arithmetic, comparison and logic. `//` and `%` are floor division/modulo."""

    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        if self.op in CMP_OPS or self.op in ("and", "or"):
            return "bool"
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Not:
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True)
class Call:
    """A math intrinsic (exp, log, sqrt, tanh, erf, fabs, floor, ceil, round, pow), or DOT4."""

    name: str
    args: tuple[Expr, ...]
    dtype: str = "float32"


# Call(DOT4, (x0, x1, x2, x3, w), "int32"): the sum of uint8 x_k times signed byte k of int32 w (four
# int8 weights packed little-endian), exact in int32: the step of an 8-bit integer conv, which the
# code generator makes one VNNI instruction where the target has it
DOT4 = "dot4_u8s8"
# the same sum, with the promise that each pair of weights (bytes 0 and 1, bytes 2 and 3) keeps its
# two products within int16 for every x the kernel reads (its input's grid, padding included, as
# weight_pairs_fit checked it): what vpmaddubsw (AVX2's u8 x s8 pairs, summed in int16 with
# saturation) computes exactly
DOT4_PAIRS_FIT = "dot4_u8s8_pairs_fit"
# Call(DOT2, (x0, x1, w), "int32"): int16 x0 times the low int16 half of int32 w plus x1 times its
# high half, exact in int32 (neither product is (-2^15)^2): the same step over 8-bit values widened to
# 16 bits, which vpmaddwd computes exactly where vpmaddubsw's pairs could saturate
DOT2 = "dot2_s16"
DOT_NAMES = (DOT4, DOT4_PAIRS_FIT, DOT2)
# the x values one int32 of packed weights multiplies, by the x's dtype
DOT_WIDTH = {"uint8": 4, "int16": 2}


def int_dot(xs: Sequence[Expr], w: Expr, pairs_fit: bool = False) -> Call:
    """The integer conv's step over `xs` (four uint8 values: DOT4, or two int16: DOT2) and int32 `w`
    (the weights packed to match); `pairs_fit` makes DOT4 DOT4_PAIRS_FIT."""
    dtype = xs[0].dtype if xs else ""
    if dtype not in DOT_WIDTH or len(xs) != DOT_WIDTH[dtype] or any(x.dtype != dtype for x in xs):
        raise ValueError("an integer dot step takes four uint8 or two int16 values")
    if w.dtype != "int32":
        raise ValueError(f"an integer dot step's weights are packed in an int32, got {w.dtype}")
    if dtype == "int16":
        return Call(DOT2, (*xs, w), "int32")
    return Call(DOT4_PAIRS_FIT if pairs_fit else DOT4, (*xs, w), "int32")


@dataclass(frozen=True, slots=True)
class Select:
    cond: Expr
    t: Expr
    f: Expr

    @property
    def dtype(self) -> str:
        return self.t.dtype


@dataclass(frozen=True, slots=True)
class Cast:
    dtype: str
    value: Expr


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A dense row-major array. scope: 'global' (params, heap/workspace) or 'local' (registers/stack)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def with_shape(self, shape: Sequence[int], scope: str | None = None) -> Buffer:
        return Buffer(self.name, tuple(shape), self.dtype, scope or self.scope)


@dataclass(frozen=True, slots=True)
class Load:
    buffer: Buffer
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


Expr = Var | IntImm | FloatImm | BinOp | Not | Call | Select | Cast | Load

ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


@dataclass(frozen=True, slots=True)
class For:
    var: Var
    extent: int
    kind: ForKind
    body: Stmt


@dataclass(frozen=True, slots=True)
class Seq:
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Store:
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, slots=True)
class IfThenElse:
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Allocate:
    """Scope of a kernel-internal buffer (its storage lives for the duration of `body`)."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class IterVar:
    var: Var
    extent: int
    reduce: bool = False


@dataclass(frozen=True, slots=True)
class Block:
    """One computation instance: iter vars bound to expressions of the surrounding loops.

    `init` runs when every reduction iter var is at 0 (start of a reduction). `predicate`
    guards instances that splits with non-dividing factors add.
    """

    name: str
    iter_vars: tuple[IterVar, ...]
    bindings: tuple[Expr, ...]
    body: Stmt
    init: Stmt | None = None
    predicate: Expr | None = None


Stmt = For | Seq | Store | IfThenElse | Allocate | Block


@dataclass(frozen=True, slots=True)
class Layout:
    """A packed layout of a constant parameter: split axes by factors, then permute.

    E.g. weights [K, N] -> [N/16, K, 16] is splits=((1, 16),), perm=(1, 0, 2). Axes are padded
    with zeros up to a multiple of their factor. The compiler applies the same map to the
    constant's data when it builds the artifact.
    """

    splits: tuple[tuple[int, int], ...]
    perm: tuple[int, ...]

    def split_shape(self, shape: Sequence[int]) -> list[int]:
        out: list[int] = []
        factors = dict(self.splits)
        for axis, d in enumerate(shape):
            if axis in factors:
                f = factors[axis]
                out += [-(-d // f), f]
            else:
                out.append(d)
        return out

    def packed_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        split = self.split_shape(shape)
        return tuple(split[p] for p in self.perm)

    def map_indices(self, ix: Sequence[Expr]) -> tuple[Expr, ...]:
        factors = dict(self.splits)
        split: list[Expr] = []
        for axis, i in enumerate(ix):
            if axis in factors:
                f = IntImm(factors[axis])
                split += [BinOp("//", i, f), BinOp("%", i, f)]
            else:
                split.append(i)
        return tuple(split[p] for p in self.perm)

    def to_json(self) -> dict[str, list[list[int]] | list[int]]:
        return {"splits": [list(s) for s in self.splits], "perm": list(self.perm)}


@dataclass(frozen=True, slots=True)
class PrimFunc:
    """A kernel: buffer parameters (inputs first, output last) and a body.

    `layouts` names parameters that the schedule packed (param name -> Layout): their data must
    be packed the same way before the kernel is called.
    """

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    layouts: tuple[tuple[str, Layout], ...] = ()


# ----------------------------------------------------------------------------------------- helpers


def const(value: int | float, dtype: str = INDEX) -> Expr:
    if dtype.startswith("float"):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


def wrap(x: Expr | int | float) -> Expr:
    if isinstance(x, bool):
        return IntImm(int(x), "bool")
    if isinstance(x, int):
        return IntImm(x)
    if isinstance(x, float):
        return FloatImm(x)
    return x


def seq(stmts: Sequence[Stmt]) -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def children_of(stmt: Stmt) -> tuple[Stmt, ...]:
    if isinstance(stmt, (For, Allocate, Block)):
        return (stmt.body,)
    if isinstance(stmt, Seq):
        return stmt.stmts
    if isinstance(stmt, IfThenElse):
        return (stmt.then,) if stmt.orelse is None else (stmt.then, stmt.orelse)
    return ()


def walk_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Pre-order iteration over statements (blocks' init included)."""
    stack = [stmt]
    while stack:
        s = stack.pop()
        yield s
        kids = list(children_of(s))
        if isinstance(s, Block) and s.init is not None:
            kids.insert(0, s.init)
        stack.extend(reversed(kids))


def expr_children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, BinOp):
        return (e.a, e.b)
    if isinstance(e, (Not,)):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Load):
        return e.indices
    return ()


def walk_expr(e: Expr) -> Iterator[Expr]:
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(expr_children(x))


def map_expr(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Bottom-up rebuild; fn(node_with_new_children) -> replacement or None (keep)."""
    if isinstance(e, BinOp):
        a, b = map_expr(e.a, fn), map_expr(e.b, fn)
        e = e if (a is e.a and b is e.b) else BinOp(e.op, a, b)
    elif isinstance(e, Not):
        a = map_expr(e.a, fn)
        e = e if a is e.a else Not(a)
    elif isinstance(e, Call):
        args = tuple(map_expr(x, fn) for x in e.args)
        e = Call(e.name, args, e.dtype)
    elif isinstance(e, Select):
        e = Select(map_expr(e.cond, fn), map_expr(e.t, fn), map_expr(e.f, fn))
    elif isinstance(e, Cast):
        e = Cast(e.dtype, map_expr(e.value, fn))
    elif isinstance(e, Load):
        e = Load(e.buffer, tuple(map_expr(x, fn) for x in e.indices))
    r = fn(e)
    return e if r is None else r


def substitute(e: Expr, mapping: Mapping[Var, Expr]) -> Expr:
    if not mapping:
        return e
    return map_expr(e, lambda x: mapping.get(x) if isinstance(x, Var) else None)


def map_stmt(
    stmt: Stmt, fs: Callable[[Stmt], Stmt | None], fe: Callable[[Expr], Expr | None] | None = None
) -> Stmt:
    """Bottom-up statement rebuild. fs(stmt) -> replacement or None; fe applied to expressions."""

    def ex(e: Expr) -> Expr:
        return e if fe is None else map_expr(e, fe)

    s = stmt
    if isinstance(s, For):
        s = For(s.var, s.extent, s.kind, map_stmt(s.body, fs, fe))
    elif isinstance(s, Seq):
        s = seq([map_stmt(x, fs, fe) for x in s.stmts])
    elif isinstance(s, Store):
        s = Store(s.buffer, tuple(ex(i) for i in s.indices), ex(s.value))
    elif isinstance(s, IfThenElse):
        s = IfThenElse(
            ex(s.cond), map_stmt(s.then, fs, fe), None if s.orelse is None else map_stmt(s.orelse, fs, fe)
        )
    elif isinstance(s, Allocate):
        s = Allocate(s.buffer, map_stmt(s.body, fs, fe))
    elif isinstance(s, Block):
        s = Block(
            s.name,
            s.iter_vars,
            tuple(ex(b) for b in s.bindings),
            map_stmt(s.body, fs, fe),
            None if s.init is None else map_stmt(s.init, fs, fe),
            None if s.predicate is None else ex(s.predicate),
        )
    r = fs(s)
    return s if r is None else r


def substitute_stmt(stmt: Stmt, mapping: Mapping[Var, Expr]) -> Stmt:
    if not mapping:
        return stmt
    return map_stmt(stmt, lambda s: None, lambda x: mapping.get(x) if isinstance(x, Var) else None)


def replace_buffer(
    stmt: Stmt,
    old: Buffer,
    new: Buffer,
    index_fn: Callable[[tuple[Expr, ...]], Sequence[Expr]] | None = None,
) -> Stmt:
    """Point every load/store of `old` at `new`, optionally remapping indices."""

    def idx(ix: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(index_fn(ix)) if index_fn else ix

    def fe(e: Expr) -> Expr | None:
        if isinstance(e, Load) and e.buffer is old:
            return Load(new, idx(e.indices))
        return None

    def fs(s: Stmt) -> Stmt | None:
        if isinstance(s, Store) and s.buffer is old:
            return Store(new, idx(s.indices), s.value)
        if isinstance(s, Allocate) and s.buffer is old:
            return Allocate(new, s.body)
        return None

    return map_stmt(stmt, fs, fe)
