"""Inline float32 math (exp, tanh, erf) that works on scalars and LLVM vectors alike.

libm has no vector entry points LLVM can call here, so `llvm.exp.v8f32` would become eight scalar
calls; these polynomial forms keep vectorized loops vectorized. Accuracy: exp within ~2 ulp
(range reduction by ln 2, degree-6 polynomial), tanh via exp, erf within 1.5e-7 absolute
(Abramowitz & Stegun 7.1.26).
"""

from __future__ import annotations

import math

from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)


def _const(ty: ir.Type, v: float) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, v).constant] * ty.count)
    return ir.Constant(ty, v)


def _int_ty(ty: ir.Type) -> ir.Type:
    return ir.VectorType(I32, ty.count) if isinstance(ty, ir.VectorType) else I32


def _fast(instr: ir.Instruction) -> ir.Instruction:
    instr.flags.append("contract")
    return instr


def _intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    suffix = f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32"
    full = f"llvm.{name}.{suffix}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), full)
    return fn


def _poly(b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """Horner: coeffs[0] + x*(coeffs[1] + x*(...))."""
    ty = x.type
    acc: ir.Value = _const(ty, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _fast(b.fadd(_fast(b.fmul(acc, x)), _const(ty, c)))
    return acc


def emit_exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    m = b.module
    ty = x.type
    x = b.call(_intrinsic(m, "minnum", ty, 2), [x, _const(ty, 88.3762626647949)])
    x = b.call(_intrinsic(m, "maxnum", ty, 2), [x, _const(ty, -87.3365447505531)])
    n = b.call(_intrinsic(m, "roundeven", ty, 1), [_fast(b.fmul(x, _const(ty, 1.0 / math.log(2.0))))])
    r = _fast(b.fsub(x, _fast(b.fmul(n, _const(ty, 0.693359375)))))
    r = _fast(b.fsub(r, _fast(b.fmul(n, _const(ty, -2.12194440e-4)))))
    p = _poly(
        b,
        r,
        [1.0, 1.0, 0.5, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4],
    )
    it = _int_ty(ty)
    e = b.shl(b.add(b.fptosi(n, it), _const_int(it, 127)), _const_int(it, 23))
    return _fast(b.fmul(p, b.bitcast(e, ty)))


def _const_int(ty: ir.Type, v: int) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [v] * ty.count)
    return ir.Constant(ty, v)


def emit_tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    m = b.module
    ty = x.type
    ax = b.call(_intrinsic(m, "fabs", ty, 1), [x])
    t = emit_exp(b, _fast(b.fmul(ax, _const(ty, -2.0))))
    r = b.fdiv(b.fsub(_const(ty, 1.0), t), b.fadd(_const(ty, 1.0), t))
    # Near 0, 1 - exp(-2|x|) cancels: an odd polynomial keeps tanh's relative accuracy there.
    z = _fast(b.fmul(ax, ax))
    odd = _poly(
        b, z, [-3.33332819422e-1, 1.33314422036e-1, -5.37397155531e-2, 2.06390887954e-2, -5.70498872745e-3]
    )
    small = _fast(b.fadd(ax, _fast(b.fmul(_fast(b.fmul(odd, z)), ax))))
    r = b.select(b.fcmp_ordered("<", ax, _const(ty, 0.625)), small, r)
    return b.call(_intrinsic(m, "copysign", ty, 2), [r, x])


def emit_erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    m = b.module
    ty = x.type
    ax = b.call(_intrinsic(m, "fabs", ty, 1), [x])
    t = b.fdiv(_const(ty, 1.0), _fast(b.fadd(_const(ty, 1.0), _fast(b.fmul(ax, _const(ty, 0.3275911))))))
    p = _fast(b.fmul(t, _poly(b, t, [0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429])))
    e = emit_exp(b, b.fneg(_fast(b.fmul(ax, ax))))
    r = b.fsub(_const(ty, 1.0), _fast(b.fmul(p, e)))
    return b.call(_intrinsic(m, "copysign", ty, 2), [r, x])
