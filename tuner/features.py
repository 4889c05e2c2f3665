"""Features of a scheduled loop nest, for the cost model.

For the block doing most of the kernel's arithmetic (the anchor, else the output block): the
extents and kinds of its innermost loops, the parallel extent, vector width and unroll product,
and for each buffer it reads, the stride along the innermost and the vectorized loop, the reuse
(iterations of loops its index ignores) and the bytes it touches within the innermost loops;
plus the register-tile size and an arithmetic-intensity estimate. Fixed length, all log-scaled.
"""

from __future__ import annotations

import math

import numpy as np

from compiler.tir.ir import (
    Allocate,
    Block,
    Buffer,
    Expr,
    For,
    ForKind,
    Load,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    Var,
    substitute,
    walk_expr,
)
from compiler.tir.simplify import affine_coeffs

DEPTH = 8
LOADS = 3
_KIND = {ForKind.SERIAL: 0.0, ForKind.PARALLEL: 1.0, ForKind.VECTORIZED: 2.0, ForKind.UNROLLED: 3.0}
FEATURE_VERSION = 1
N_FEATURES = 1 + 2 * DEPTH + 4 + LOADS * 6 + 3


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def _paths(func: PrimFunc) -> list[tuple[list[For], Block]]:
    out: list[tuple[list[For], Block]] = []

    def go(s: Stmt, loops: list[For]) -> None:
        if isinstance(s, For):
            go(s.body, [*loops, s])
        elif isinstance(s, Block):
            out.append((loops, s))
        elif isinstance(s, Seq):
            for x in s.stmts:
                go(x, loops)
        elif isinstance(s, Allocate):
            go(s.body, loops)

    go(func.body, [])
    return out


def _work(block: Block, loops: list[For]) -> float:
    n = 1.0
    for f in loops:
        n *= f.extent
    ops = (
        sum(1 for x in walk_expr(block.body.value) if not isinstance(x, (Load, Var)))
        if isinstance(block.body, Store)
        else 1
    )
    return n * max(1, ops)


def extract(func: PrimFunc, flops: int, anchor: str | None = None) -> np.ndarray:
    """The feature vector of one scheduled PrimFunc (blocks still present)."""
    paths = _paths(func)
    feats = np.zeros(N_FEATURES, dtype=np.float32)
    feats[0] = _log(flops)
    if not paths:
        return feats
    main = [p for p in paths if p[1].name == anchor] or paths
    loops, block = max(main, key=lambda p: _work(p[1], p[0]))
    inner = loops[::-1][:DEPTH]
    for k, f in enumerate(inner):
        feats[1 + k] = _log(f.extent)
        feats[1 + DEPTH + k] = _KIND[f.kind]
    base = 1 + 2 * DEPTH
    par = math.prod(f.extent for f in loops if f.kind is ForKind.PARALLEL)
    vec = next((f.extent for f in loops if f.kind is ForKind.VECTORIZED), 1)
    unroll = math.prod(f.extent for f in loops if f.kind is ForKind.UNROLLED)
    feats[base : base + 4] = (_log(par), float(vec), _log(unroll), float(len(loops)))
    mapping: dict[Var, Expr] = {iv.var: b for iv, b in zip(block.iter_vars, block.bindings, strict=True)}
    loads: dict[Buffer, tuple[Expr, ...]] = {}
    if isinstance(block.body, Store):
        for x in walk_expr(block.body.value):
            if isinstance(x, Load) and x.buffer not in loads:
                loads[x.buffer] = tuple(substitute(i, mapping) for i in x.indices)
    ordered = sorted(loads.items(), key=lambda kv: -kv[0].size)[:LOADS]
    innermost = loops[-1] if loops else None
    vloop = next((f for f in loops if f.kind is ForKind.VECTORIZED), None)
    base += 4
    tile_bytes = 0.0
    for k, (buf, ix) in enumerate(ordered):
        strides = _strides(buf, ix)
        reuse = math.prod(
            f.extent for f in loops if f.kind is not ForKind.PARALLEL and strides.get(f.var, 0) == 0
        )
        foot = 1.0
        for f in loops[-3:]:
            if strides.get(f.var, 0):
                foot *= f.extent
        size = 4.0 if buf.dtype in ("float32", "int32") else 8.0
        tile_bytes += foot * size
        row = (
            _log(abs(strides.get(innermost.var, 0))) if innermost else 0.0,
            _log(abs(strides.get(vloop.var, 0))) if vloop else 0.0,
            float(strides.get(innermost.var, 0) == 0) if innermost else 0.0,
            _log(reuse),
            _log(foot * size),
            1.0 if buf.scope == "local" else 0.0,
        )
        feats[base + 6 * k : base + 6 * k + 6] = row
    base += 6 * LOADS
    out_buf = block.body.buffer if isinstance(block.body, Store) else None
    local = out_buf.size if out_buf is not None and out_buf.scope == "local" else 0
    tile_flops = 2.0 * math.prod(f.extent for f in loops[-3:])
    feats[base : base + 3] = (_log(local), _log(tile_flops / max(tile_bytes, 1.0) * 16), _log(tile_bytes))
    return feats


def _strides(buf: Buffer, ix: tuple[Expr, ...]) -> dict[Var, int]:
    """Element stride of each loop variable in the flattened index (0 when absent / non-affine)."""
    out: dict[Var, int] = {}
    stride = 1
    for d, e in zip(reversed(buf.shape), reversed(ix), strict=True):
        lin = affine_coeffs(e)
        if lin is not None:
            for atom, k in lin[0].items():
                if isinstance(atom, Var):
                    out[atom] = out.get(atom, 0) + k * stride
        stride *= d
    return out
