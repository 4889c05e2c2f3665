"""Index and arithmetic simplification.

Integer expressions are normalised to linear forms (sum of coefficient * atom + constant); floor
division and modulo by a constant are resolved when loop ranges prove the remainder stays inside
one period — this is what turns `(o * 16 + i) // 16` back into `o` after a split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Call,
    Cast,
    Expr,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    Load,
    Not,
    Select,
    Seq,
    Stmt,
    Store,
    Var,
    seq,
)

Ranges = Mapping[Var, int]  # var -> extent (values 0 .. extent-1)
INF = math.inf


def _is_int(e: Expr) -> bool:
    return e.dtype.startswith("int")


def _linear(e: Expr) -> tuple[dict[Expr, int], int] | None:
    """e as ({atom: coeff}, const) when built from + - * by constants; None otherwise."""
    if isinstance(e, IntImm):
        return {}, e.value
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        la, lb = _linear(e.a), _linear(e.b)
        if la is None or lb is None:
            return None
        sign = 1 if e.op == "+" else -1
        terms = dict(la[0])
        for k, v in lb[0].items():
            terms[k] = terms.get(k, 0) + sign * v
        return _recombine({k: v for k, v in terms.items() if v != 0}, la[1] + sign * lb[1])
    if isinstance(e, BinOp) and e.op == "*":
        la, lb = _linear(e.a), _linear(e.b)
        if la is None or lb is None:
            return None
        if not la[0]:
            la, lb = lb, la
        if not lb[0]:
            c = lb[1]
            return {k: v * c for k, v in la[0].items() if v * c != 0}, la[1] * c
        return None
    if isinstance(e, (Var, BinOp, Load, Select, Call, Cast)):
        return {e: 1}, 0
    return None


def _recombine(terms: dict[Expr, int], c: int) -> tuple[dict[Expr, int], int]:
    """(x // n) * n * k + (x % n) * k == x * k: a fused loop's row/column pair becomes its flat index
    again (so a vector along a fused spatial loop is a contiguous access)."""
    for atom, k in list(terms.items()):
        if not (isinstance(atom, BinOp) and atom.op == "%" and isinstance(atom.b, IntImm)):
            continue
        div = BinOp("//", atom.a, atom.b)
        if terms.get(div) != k * atom.b.value or atom not in terms:
            continue
        inner = _linear(atom.a)
        if inner is None:
            continue
        del terms[atom], terms[div]
        for t, v in inner[0].items():
            terms[t] = terms.get(t, 0) + v * k
        c += inner[1] * k
        terms = {t: v for t, v in terms.items() if v != 0}
    return terms, c


def _from_linear(terms: dict[Expr, int], c: int) -> Expr:
    out: Expr | None = None
    for atom, k in terms.items():
        t: Expr = atom if k == 1 else BinOp("*", atom, IntImm(k))
        if out is None:
            out = t
        elif k < 0:
            out = BinOp("-", out, atom if k == -1 else BinOp("*", atom, IntImm(-k)))
        else:
            out = BinOp("+", out, t)
    if out is None:
        return IntImm(c)
    if c > 0:
        return BinOp("+", out, IntImm(c))
    if c < 0:
        return BinOp("-", out, IntImm(-c))
    return out


def bounds(e: Expr, ranges: Ranges) -> tuple[float, float]:
    """Inclusive integer bounds of e (±inf when unknown)."""
    if isinstance(e, IntImm):
        return e.value, e.value
    if isinstance(e, Var):
        ext = ranges.get(e)
        return (0, ext - 1) if ext is not None else (-INF, INF)
    if isinstance(e, BinOp):
        (a0, a1), (b0, b1) = bounds(e.a, ranges), bounds(e.b, ranges)
        if e.op == "+":
            return a0 + b0, a1 + b1
        if e.op == "-":
            return a0 - b1, a1 - b0
        if e.op == "*":
            cands = [
                x * y
                for x in (a0, a1)
                for y in (b0, b1)
                if not (math.isinf(x) and y == 0) and not (math.isinf(y) and x == 0)
            ]
            return (min(cands), max(cands)) if cands else (-INF, INF)
        if e.op == "//" and b0 == b1 and b0 > 0:
            return (a0 // b0 if not math.isinf(a0) else a0), (a1 // b0 if not math.isinf(a1) else a1)
        if e.op == "%" and b0 == b1 and b0 > 0:
            if a0 >= 0 and a1 < b0:
                return a0, a1
            return 0, b0 - 1
        if e.op == "min":
            return min(a0, b0), min(a1, b1)
        if e.op == "max":
            return max(a0, b0), max(a1, b1)
    if isinstance(e, Select):
        (t0, t1), (f0, f1) = bounds(e.t, ranges), bounds(e.f, ranges)
        return min(t0, f0), max(t1, f1)
    return -INF, INF


def _divmod(op: str, a: Expr, c: int, ranges: Ranges) -> Expr:
    lin = _linear(a)
    if lin is None:
        return BinOp(op, a, IntImm(c))
    terms, k = lin
    quot = {t: v // c for t, v in terms.items() if v % c == 0}
    rest = {t: v for t, v in terms.items() if v % c != 0}
    kq, kr = divmod(k, c)
    rem = _from_linear(rest, kr)
    lo, hi = bounds(rem, ranges)
    if not (math.isinf(lo) or math.isinf(hi)) and lo // c == hi // c:
        shift = int(lo // c)
        if op == "//":
            return _from_linear(quot, kq + shift)
        return simplify(_from_linear(rest, kr - shift * c), ranges)
    nested = _divmod_by_part(op, terms, k, c, ranges)
    if nested is not None:
        return nested
    if op == "%":
        return BinOp("%", rem, IntImm(c)) if not rest or quot else BinOp("%", a, IntImm(c))
    return BinOp("//", a, IntImm(c))


def _divmod_by_part(op: str, terms: dict[Expr, int], k: int, c: int, ranges: Ranges) -> Expr | None:
    """a // c and a % c when a = d * A + F with d dividing c and 0 <= F < d: then a // c = A // (c / d)
    and a % c = (A % (c / d)) * d + F. This is how a flat index rebuilt from a fused loop splits again
    into the axes of another shape (a reshape of a transpose: `(f * 784 + r) // 1568` is `f // 2` when
    r < 784), which keeps the vector lane's term affine."""
    for d in sorted({math.gcd(c, abs(v)) for v in terms.values()} - {1, c}, reverse=True):
        coarse = {t: v // d for t, v in terms.items() if v % d == 0}
        fine = {t: v for t, v in terms.items() if v % d != 0}
        kd, kf = divmod(k, d)
        part = _from_linear(fine, kf)
        lo, hi = bounds(part, ranges)
        if lo < 0 or hi >= d:
            continue
        whole = _from_linear(coarse, kd)
        m = IntImm(c // d)
        if op == "//":
            return simplify(BinOp("//", whole, m), ranges)
        return simplify(BinOp("+", BinOp("*", BinOp("%", whole, m), IntImm(d)), part), ranges)
    return None


_FOLD: dict[str, Callable[[int | float, int | float], int | float | bool]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "min": min,
    "max": max,
    "<": lambda x, y: x < y,
    "<=": lambda x, y: x <= y,
    ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y,
    "==": lambda x, y: x == y,
    "!=": lambda x, y: x != y,
}


def _const_value(e: Expr) -> int | float | None:
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    return None


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    ranges = ranges or {}
    if isinstance(e, BinOp):
        a, b = simplify(e.a, ranges), simplify(e.b, ranges)
        ca, cb = _const_value(a), _const_value(b)
        if ca is not None and cb is not None:
            if e.op in _FOLD:
                folded = _FOLD[e.op](ca, cb)
                if isinstance(folded, bool):
                    return IntImm(int(folded), "bool")
                return IntImm(int(folded), a.dtype) if _is_int(a) else FloatImm(float(folded), a.dtype)
            if e.op in ("//", "%") and _is_int(a) and cb != 0:
                return IntImm(int(ca // cb) if e.op == "//" else int(ca % cb), a.dtype)
            if e.op == "/" and not _is_int(a) and cb != 0:
                return FloatImm(ca / cb, a.dtype)
        if e.op in ("and", "or") and (ca is not None or cb is not None):
            k, other = (ca, b) if ca is not None else (cb, a)
            if e.op == "and":
                return other if k else IntImm(0, "bool")
            return IntImm(1, "bool") if k else other
        if _is_int(a) and e.op in ("+", "-", "*"):
            lin = _linear(BinOp(e.op, a, b))
            if lin is not None:
                return _from_linear(*lin)
        if _is_int(a) and e.op in ("//", "%") and isinstance(cb, int) and cb > 0:
            if cb == 1:
                return a if e.op == "//" else IntImm(0, a.dtype)
            return _divmod(e.op, a, cb, ranges)
        if _is_int(a) and (e.op in ("min", "max") or e.op in ("<", "<=", ">", ">=", "==", "!=")):
            (a0, a1), (b0, b1) = bounds(a, ranges), bounds(b, ranges)
            if e.op == "min":
                if a1 <= b0:
                    return a
                if b1 <= a0:
                    return b
            elif e.op == "max":
                if a0 >= b1:
                    return a
                if b0 >= a1:
                    return b
            else:
                decided = _decide(e.op, a0, a1, b0, b1)
                if decided is not None:
                    return IntImm(int(decided), "bool")
        if not _is_int(a):
            if e.op == "*" and (ca == 1.0 or cb == 1.0):
                return b if ca == 1.0 else a
            if e.op == "+" and (ca == 0.0 or cb == 0.0):
                return b if ca == 0.0 else a
        return e if (a is e.a and b is e.b) else BinOp(e.op, a, b)
    if isinstance(e, Select):
        c = simplify(e.cond, ranges)
        if isinstance(c, IntImm):
            return simplify(e.t if c.value else e.f, ranges)
        return Select(c, simplify(e.t, ranges), simplify(e.f, ranges))
    if isinstance(e, Not):
        a = simplify(e.a, ranges)
        if isinstance(a, IntImm):
            return IntImm(int(not a.value), "bool")
        return Not(a)
    if isinstance(e, Load):
        return Load(e.buffer, tuple(simplify(i, ranges) for i in e.indices))
    if isinstance(e, Call):
        return Call(e.name, tuple(simplify(x, ranges) for x in e.args), e.dtype)
    if isinstance(e, Cast):
        v = simplify(e.value, ranges)
        cv = _const_value(v)
        if cv is not None:
            if e.dtype.startswith("float"):
                return FloatImm(float(cv), e.dtype)
            if e.dtype.startswith("int"):
                return IntImm(int(cv), e.dtype)
        if v.dtype == e.dtype:
            return v
        return Cast(e.dtype, v)
    return e


def _decide(op: str, a0: float, a1: float, b0: float, b1: float) -> bool | None:
    if op == "<":
        return True if a1 < b0 else False if a0 >= b1 else None
    if op == "<=":
        return True if a1 <= b0 else False if a0 > b1 else None
    if op == ">":
        return True if a0 > b1 else False if a1 <= b0 else None
    if op == ">=":
        return True if a0 >= b1 else False if a1 < b0 else None
    if op == "==":
        if a0 == a1 == b0 == b1:
            return True
        return False if a1 < b0 or b1 < a0 else None
    if op == "!=":
        d = _decide("==", a0, a1, b0, b1)
        return None if d is None else not d
    return None


def affine_coeffs(e: Expr) -> tuple[dict[Expr, int], int] | None:
    """Public view of the linear form (used by region analysis and the vectorizer)."""
    return _linear(simplify(e))


def simplify_stmt(s: Stmt, ranges: Mapping[Var, int]) -> Stmt:
    """Simplify every expression under s with the loop (and block iterator) ranges in scope; ifs
    and block predicates that the ranges decide disappear."""
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, simplify_stmt(s.body, {**ranges, s.var: s.extent}))
    if isinstance(s, Seq):
        return seq([simplify_stmt(x, ranges) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, simplify_stmt(s.body, ranges))
    if isinstance(s, IfThenElse):
        c = simplify(s.cond, ranges)
        if isinstance(c, IntImm):
            if c.value:
                return simplify_stmt(s.then, ranges)
            return simplify_stmt(s.orelse, ranges) if s.orelse is not None else Seq(())
        return IfThenElse(
            c, simplify_stmt(s.then, ranges), None if s.orelse is None else simplify_stmt(s.orelse, ranges)
        )
    if isinstance(s, Store):
        return Store(s.buffer, tuple(simplify(i, ranges) for i in s.indices), simplify(s.value, ranges))
    if isinstance(s, Block):
        inner = {**ranges, **{iv.var: iv.extent for iv in s.iter_vars}}
        pred = None if s.predicate is None else simplify(s.predicate, ranges)
        if isinstance(pred, IntImm) and pred.value:
            pred = None
        return Block(
            s.name,
            s.iter_vars,
            tuple(simplify(x, ranges) for x in s.bindings),
            simplify_stmt(s.body, inner),
            None if s.init is None else simplify_stmt(s.init, inner),
            pred,
        )
    return s


def specialize(s: Stmt, var: Var, value: int, ranges: Mapping[Var, int]) -> Stmt:
    """s with the constant `value` for `var` (an iteration of an unrolled loop), selects whose
    condition that decides reduced to their taken branch. Top-down, so the branches not taken are
    never visited: a select chain over the positions of a tile shrinks to one position's expression
    at the cost of that expression, not of the whole chain."""
    const = IntImm(value)
    memo: dict[int, Expr] = {}

    def ex(e: Expr) -> Expr:
        done = memo.get(id(e))
        if done is not None:
            return done
        if e is var:
            out: Expr = const
        elif isinstance(e, Select):
            c = ex(e.cond)
            known = simplify(c, ranges) if c is not e.cond else c
            if isinstance(known, IntImm):
                out = ex(e.t if known.value else e.f)
            else:
                out = Select(c, ex(e.t), ex(e.f))
        elif isinstance(e, BinOp):
            a, b = ex(e.a), ex(e.b)
            out = e if (a is e.a and b is e.b) else BinOp(e.op, a, b)
        elif isinstance(e, Not):
            a = ex(e.a)
            out = e if a is e.a else Not(a)
        elif isinstance(e, Load):
            ix = tuple(ex(i) for i in e.indices)
            out = e if all(a is b for a, b in zip(ix, e.indices, strict=True)) else Load(e.buffer, ix)
        elif isinstance(e, Call):
            args = tuple(ex(x) for x in e.args)
            out = Call(e.name, args, e.dtype)
        elif isinstance(e, Cast):
            out = Cast(e.dtype, ex(e.value))
        else:
            out = e
        memo[id(e)] = out
        return out

    return _map_exprs(s, ex)


def _map_exprs(s: Stmt, ex: Callable[[Expr], Expr]) -> Stmt:
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _map_exprs(s.body, ex))
    if isinstance(s, Seq):
        return seq([_map_exprs(x, ex) for x in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _map_exprs(s.body, ex))
    if isinstance(s, IfThenElse):
        orelse = None if s.orelse is None else _map_exprs(s.orelse, ex)
        return IfThenElse(ex(s.cond), _map_exprs(s.then, ex), orelse)
    if isinstance(s, Store):
        return Store(s.buffer, tuple(ex(i) for i in s.indices), ex(s.value))
    if isinstance(s, Block):
        return Block(
            s.name,
            s.iter_vars,
            tuple(ex(b) for b in s.bindings),
            _map_exprs(s.body, ex),
            None if s.init is None else _map_exprs(s.init, ex),
            None if s.predicate is None else ex(s.predicate),
        )
    return s
