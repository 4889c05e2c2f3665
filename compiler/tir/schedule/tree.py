"""Finding and replacing loops and blocks in a PrimFunc's statement tree (what every primitive
stands on)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compiler.errors import ScheduleError
from compiler.tir.ir import (
    Allocate,
    BinOp,
    Block,
    Expr,
    For,
    IfThenElse,
    PrimFunc,
    Seq,
    Stmt,
    children_of,
    map_stmt,
    seq,
    walk_stmts,
)


def _path_to(root: Stmt, pred: Callable[[Stmt], bool]) -> list[Stmt] | None:
    """Ancestors-and-self path (root first) of the first statement satisfying pred."""
    stack: list[tuple[Stmt, list[Stmt]]] = [(root, [])]
    while stack:
        s, path = stack.pop()
        p = [*path, s]
        if pred(s):
            return p
        kids = children_of(s)
        stack.extend((k, p) for k in reversed(kids))
    return None


def find_loop(func: PrimFunc, name: str) -> list[Stmt]:
    path = _path_to(func.body, lambda s: isinstance(s, For) and s.var.name == name)
    if path is None:
        raise ScheduleError(f"no loop named {name!r} in {func.name}")
    return path


def find_block(func: PrimFunc, name: str) -> list[Stmt]:
    path = _path_to(func.body, lambda s: isinstance(s, Block) and s.name == name)
    if path is None:
        raise ScheduleError(f"no block named {name!r} in {func.name}")
    return path


def _replace(root: Stmt, target: Stmt, new: Stmt | None) -> Stmt:
    """Top-down identity replacement (new=None deletes target from its Seq)."""
    if root is target:
        if new is None:
            raise ScheduleError("cannot delete the root statement")
        return new
    if isinstance(root, For):
        return For(root.var, root.extent, root.kind, _replace(root.body, target, new))
    if isinstance(root, Allocate):
        return Allocate(root.buffer, _replace(root.body, target, new))
    if isinstance(root, Block):
        return Block(
            root.name,
            root.iter_vars,
            root.bindings,
            _replace(root.body, target, new),
            root.init,
            root.predicate,
        )
    if isinstance(root, IfThenElse):
        return IfThenElse(
            root.cond,
            _replace(root.then, target, new),
            None if root.orelse is None else _replace(root.orelse, target, new),
        )
    if isinstance(root, Seq):
        out: list[Stmt] = []
        for s in root.stmts:
            if s is target:
                if new is not None:
                    out.append(new)
            else:
                out.append(_replace(s, target, new))
        return seq(out)
    return root


def _contains(root: Stmt, target: Stmt) -> bool:
    return any(s is target for s in walk_stmts(root))


def loop_names(func: PrimFunc) -> list[str]:
    return [s.var.name for s in walk_stmts(func.body) if isinstance(s, For)]


def block_names(func: PrimFunc) -> list[str]:
    return [s.name for s in walk_stmts(func.body) if isinstance(s, Block)]


def _unique(func: PrimFunc, base: str) -> str:
    names = set(loop_names(func))
    if base not in names:
        return base
    k = 1
    while f"{base}{k}" in names:
        k += 1
    return f"{base}{k}"


def _blocks_under(s: Stmt) -> list[Block]:
    return [x for x in walk_stmts(s) if isinstance(x, Block)]


def _loops_of(path: Sequence[Stmt]) -> list[For]:
    return [s for s in path if isinstance(s, For)]


def _add_predicate(stmt: Stmt, cond: Expr) -> Stmt:
    def fs(s: Stmt) -> Stmt | None:
        if isinstance(s, Block):
            p = cond if s.predicate is None else BinOp("and", s.predicate, cond)
            return Block(s.name, s.iter_vars, s.bindings, s.body, s.init, p)
        return None

    return map_stmt(stmt, fs)
