"""Tensor expressions: how op families state their math (the compute definition).

`compute(shape, lambda i, j: ...)` describes every output element; reductions use
`reduce_sum/reduce_prod/reduce_max` over `reduce_axis` variables. Lowering turns each computed
tensor into one block inside a naive loop nest; schedules then reshape those loops.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from compiler.tir.ir import (
    INDEX,
    BinOp,
    Buffer,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    IterVar,
    Load,
    Select,
    Var,
    walk_expr,
)


@dataclass(frozen=True, slots=True, eq=False)
class Reduce:
    """Top-level body of a reduction stage: combine `source` over `axes` starting from `identity`."""

    combiner: str  # "sum" | "prod" | "max" | "min"
    source: Expr
    axes: tuple[IterVar, ...]
    identity: Expr

    @property
    def dtype(self) -> str:
        return self.source.dtype


@dataclass(eq=False)
class ComputeOp:
    name: str
    axes: tuple[IterVar, ...]
    body: Expr | Reduce
    inputs: tuple[Tensor, ...] = ()
    tag: str = ""  # op family tag, e.g. "conv2d", "pad", "elemwise"


@dataclass(eq=False)
class Tensor:
    buffer: Buffer
    op: ComputeOp | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.buffer.shape

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, idx: Expr | int | Sequence[Expr | int]) -> Expr:
        items = idx if isinstance(idx, (tuple, list)) else (idx,)
        ix = tuple(IntImm(i) if isinstance(i, int) else i for i in items)
        if len(ix) != len(self.shape):
            raise ValueError(f"{self.buffer.name}: {len(ix)} indices for rank {len(self.shape)}")
        return Load(self.buffer, ix)


def placeholder(shape: Sequence[int], dtype: str, name: str) -> Tensor:
    t = Tensor(Buffer(name, tuple(shape), dtype))
    _scope()[t.buffer] = t
    return t


def reduce_axis(extent: int, name: str) -> IterVar:
    return IterVar(Var(name), int(extent), reduce=True)


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Expr | Reduce],
    name: str,
    tag: str = "",
    axis_names: Sequence[str] | None = None,
    dtype: str | None = None,
) -> Tensor:
    names = list(axis_names) if axis_names else [f"i{k}" for k in range(len(shape))]
    axes = tuple(IterVar(Var(n), int(d)) for n, d in zip(names, shape, strict=True))
    body = fcompute(*[a.var for a in axes])
    if isinstance(body, (int, float)):
        body = IntImm(body) if isinstance(body, int) else FloatImm(body)
    out_dtype = dtype or body.dtype
    inputs: list[Tensor] = []
    seen: set[int] = set()
    src = body.source if isinstance(body, Reduce) else body
    for x in walk_expr(src):
        if isinstance(x, Load) and id(x.buffer) not in seen:
            seen.add(id(x.buffer))
            t = _scope().get(x.buffer)
            if t is not None:
                inputs.append(t)
    op = ComputeOp(name, axes, body, tuple(inputs), tag)
    t = Tensor(Buffer(name, tuple(int(d) for d in shape), out_dtype), op)
    _scope()[t.buffer] = t
    return t


# Buffer -> tensor for the compute graph being built, so a stage finds its producers from its
# loads. Scoped to one lowering by `tensor_scope()`; outside a scope each call gets a fresh dict.
_SCOPE: contextvars.ContextVar[dict[Buffer, Tensor] | None] = contextvars.ContextVar(
    "tensor_scope", default=None
)


def _scope() -> dict[Buffer, Tensor]:
    s = _SCOPE.get()
    return s if s is not None else {}


@contextlib.contextmanager
def tensor_scope() -> Iterator[dict[Buffer, Tensor]]:
    token = _SCOPE.set({})
    try:
        yield _SCOPE.get() or {}
    finally:
        _SCOPE.reset(token)


def zero(dtype: str) -> Expr:
    """0 of `dtype` (an integer constant for integer types: LLVM takes no float literal for them)."""
    return FloatImm(0.0, dtype) if dtype.startswith("float") else IntImm(0, dtype)


def reduce_sum(source: Expr, axes: Sequence[IterVar]) -> Reduce:
    return Reduce("sum", source, tuple(axes), zero(source.dtype))


def reduce_prod(source: Expr, axes: Sequence[IterVar]) -> Reduce:
    one = FloatImm(1.0, source.dtype) if source.dtype.startswith("float") else IntImm(1, source.dtype)
    return Reduce("prod", source, tuple(axes), one)


def _lowest(dtype: str, sign: int) -> Expr:
    """The identity of max (sign -1) or min (sign 1): an infinity for floats, the extreme integer
    of the dtype for integers (which have no infinity)."""
    if dtype.startswith("float"):
        return FloatImm(sign * float("inf"), dtype)
    bits = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "bool": 1}.get(dtype, 64)
    if dtype.startswith("uint") or dtype == "bool":
        return IntImm(0 if sign < 0 else (1 << bits) - 1, dtype)
    return IntImm(-(1 << (bits - 1)) if sign < 0 else (1 << (bits - 1)) - 1, dtype)


def reduce_max(source: Expr, axes: Sequence[IterVar]) -> Reduce:
    return Reduce("max", source, tuple(axes), _lowest(source.dtype, -1))


def reduce_min(source: Expr, axes: Sequence[IterVar]) -> Reduce:
    return Reduce("min", source, tuple(axes), _lowest(source.dtype, 1))


# ------------------------------------------------------------------------ expression sugar


def f32(x: float) -> Expr:
    return FloatImm(float(x), "float32")


def idx(x: int) -> Expr:
    return IntImm(int(x), INDEX)


def add(a: Expr, b: Expr) -> Expr:
    return BinOp("+", a, b)


def sub(a: Expr, b: Expr) -> Expr:
    return BinOp("-", a, b)


def mul(a: Expr, b: Expr) -> Expr:
    return BinOp("*", a, b)


def div(a: Expr, b: Expr) -> Expr:
    return BinOp("/", a, b)


def maximum(a: Expr, b: Expr) -> Expr:
    return BinOp("max", a, b)


def minimum(a: Expr, b: Expr) -> Expr:
    return BinOp("min", a, b)


def call(name: str, *args: Expr) -> Expr:
    return Call(name, tuple(args), args[0].dtype)


def select(c: Expr, t: Expr, f: Expr) -> Expr:
    return Select(c, t, f)


def cast(dtype: str, x: Expr) -> Expr:
    return x if x.dtype == dtype else Cast(dtype, x)


def clamp(e: Expr, hi: int) -> Expr:
    """Clamp an index into [0, hi]; keeps speculative loads (both arms of a select) in bounds."""
    return minimum(maximum(e, IntImm(0)), IntImm(hi))


def all_of(conds: Sequence[Expr]) -> Expr | None:
    out: Expr | None = None
    for c in conds:
        out = c if out is None else BinOp("and", out, c)
    return out


def broadcast_indices(out_shape: Sequence[int], in_shape: Sequence[int], ix: Sequence[Expr]) -> list[Expr]:
    """Numpy broadcasting: index of the input element feeding output element `ix`."""
    off = len(out_shape) - len(in_shape)
    return [IntImm(0) if d == 1 and out_shape[off + k] != 1 else ix[off + k] for k, d in enumerate(in_shape)]


def flat_index(shape: Sequence[int], ix: Sequence[Expr]) -> Expr:
    out: Expr = IntImm(0)
    for d, i in zip(shape, ix, strict=True):
        out = BinOp("+", BinOp("*", out, IntImm(d)), i)
    return out


def unflatten_index(shape: Sequence[int], flat: Expr) -> list[Expr]:
    out: list[Expr] = []
    stride = 1
    strides = []
    for d in reversed(shape):
        strides.append(stride)
        stride *= d
    strides.reverse()
    for d, s in zip(shape, strides, strict=True):
        e: Expr = BinOp("//", flat, IntImm(s)) if s != 1 else flat
        out.append(BinOp("%", e, IntImm(d)) if d != 1 else IntImm(0))
    return out
