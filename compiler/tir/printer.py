"""Readable Python-like text of a PrimFunc (the `tir` and `scheduled` stages)."""

from __future__ import annotations

from compiler.tensor_type import DTYPES
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
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
)

_PREC = {
    "or": 1,
    "and": 2,
    "<": 4,
    "<=": 4,
    ">": 4,
    ">=": 4,
    "==": 4,
    "!=": 4,
    "+": 5,
    "-": 5,
    "*": 6,
    "/": 6,
    "//": 6,
    "%": 6,
}


def _btype(b: Buffer) -> str:
    short = DTYPES.get(b.dtype, b.dtype)
    scope = "" if b.scope == "global" else f", scope={b.scope!r}"
    return f"{short}[{', '.join(map(str, b.shape))}]{scope}"


def expr_str(e: Expr, parent: int = 0) -> str:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, IntImm):
        return str(e.value) if e.dtype != "bool" else str(bool(e.value))
    if isinstance(e, FloatImm):
        return repr(e.value)
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < parent else s
    if isinstance(e, Not):
        return f"not {expr_str(e.a, 7)}"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, Cast):
        return f"{DTYPES.get(e.dtype, e.dtype)}({expr_str(e.value)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    raise TypeError(f"unknown expression {e!r}")


def _stmt_lines(s: Stmt, indent: int, out: list[str]) -> None:
    pad = "    " * indent
    if isinstance(s, For):
        kind = "range" if s.kind is ForKind.SERIAL else s.kind.value
        out.append(f"{pad}for {s.var.name} in {kind}({s.extent}):")
        _stmt_lines(s.body, indent + 1, out)
    elif isinstance(s, Seq):
        for x in s.stmts:
            _stmt_lines(x, indent, out)
    elif isinstance(s, Store):
        idx = ", ".join(expr_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {expr_str(s.value)}")
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {expr_str(s.cond)}:")
        _stmt_lines(s.then, indent + 1, out)
        if s.orelse is not None:
            out.append(f"{pad}else:")
            _stmt_lines(s.orelse, indent + 1, out)
    elif isinstance(s, Allocate):
        out.append(f"{pad}{s.buffer.name} = alloc({_btype(s.buffer)})")
        _stmt_lines(s.body, indent, out)
    elif isinstance(s, Block):
        axes = ", ".join(
            f"{iv.var.name}={'R' if iv.reduce else 'S'}({iv.extent}, {expr_str(b)})"
            for iv, b in zip(s.iter_vars, s.bindings, strict=True)
        )
        out.append(f"{pad}with block({s.name!r}, {axes}):")
        if s.predicate is not None:
            out.append(f"{pad}    where({expr_str(s.predicate)})")
        if s.init is not None:
            out.append(f"{pad}    with init():")
            _stmt_lines(s.init, indent + 2, out)
        _stmt_lines(s.body, indent + 1, out)
    else:
        raise TypeError(f"unknown statement {s!r}")


def stmt_str(s: Stmt, indent: int = 0) -> str:
    out: list[str] = []
    _stmt_lines(s, indent, out)
    return "\n".join(out)


def func_str(f: PrimFunc) -> str:
    params = ", ".join(f"{b.name}: {_btype(b)}" for b in f.params)
    return f"@prim_func\ndef {f.name}({params}):\n{stmt_str(f.body, 1)}\n"
