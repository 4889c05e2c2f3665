"""Inline float32 math (exp, tanh, erf, log, pow, sin, cos, tan, the inverse trigonometric and the
hyperbolic functions) that works on scalars and LLVM vectors alike.

libm has no vector entry points LLVM can call here, so `llvm.exp.v8f32` would become eight scalar
calls; these polynomial forms keep vectorized loops vectorized. Accuracy: exp within ~2 ulp
(range reduction by ln 2, degree-6 polynomial), tanh via exp, erf within 1.5e-7 absolute
(Abramowitz & Stegun 7.1.26), log within ~1 ulp (Cephes logf), pow within ~0.5 ulp (computed in
float64 from float32 inputs, so the rounding of the float32 result dominates), sin and cos within
~2.5e-7 absolute (range reduction by pi/2 in float64, Cephes sinf/cosf polynomials). tan, acos,
asin, atan, sinh, cosh, acosh, asinh and atanh are computed in float64 with errors far below
float32's, so that their one rounding to float32 dominates; tan reduces its argument exactly for
every float32 (Payne-Hanek).
"""

from __future__ import annotations

import math
import struct

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
FLT_MIN = 2.0**-126  # the smallest normal float32
SQRT_HALF_BITS = 0x3F3504F3  # float32 sqrt(1/2): the mantissa range [sqrt(1/2), sqrt(2)) starts here
DBL_MIN = 2.0**-1022  # the smallest normal float64
SQRT_HALF_BITS_F64: int = struct.unpack("<Q", struct.pack("<d", math.sqrt(0.5)))[0]


def _const(ty: ir.Type, v: float) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, v).constant] * ty.count)
    return ir.Constant(ty, v)


def _int_ty(ty: ir.Type) -> ir.Type:
    """The integer type of a float type's bits: i32 for float32, i64 for float64 (lane for lane)."""
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    it = I64 if isinstance(elem, ir.DoubleType) else I32
    return ir.VectorType(it, ty.count) if isinstance(ty, ir.VectorType) else it


def _with_element(ty: ir.Type, elem: ir.Type) -> ir.Type:
    """`elem`, or a vector of it with as many lanes as `ty`."""
    return ir.VectorType(elem, ty.count) if isinstance(ty, ir.VectorType) else elem


def _fast(instr: ir.Instruction) -> ir.Instruction:
    instr.flags.append("contract")
    return instr


def _intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    bits = "f64" if isinstance(elem, ir.DoubleType) else "f32"
    suffix = f"v{ty.count}{bits}" if isinstance(ty, ir.VectorType) else bits
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
    """e^x = 2^n * e^r, r = x - n ln 2 in [-ln2/2, ln2/2]: a polynomial for e^r, then 2^n applied as
    two factors 2^(n - n//2) and 2^(n//2), each a normal float for every n the clamp allows, so the
    product rounds once: to a subnormal down to e^-103.97, to inf past float32's largest value. x is
    clamped to where that holds ([-105, 88.8]: the ends round to 0 and inf as they must); a NaN passes
    the clamps (each returns x when the comparison is unordered) and the arithmetic keeps it NaN."""
    m = b.module
    ty = x.type
    hi, lo = _const(ty, 88.8), _const(ty, -105.0)
    x = b.select(b.fcmp_ordered(">", x, hi), hi, x)
    x = b.select(b.fcmp_ordered("<", x, lo), lo, x)
    n = b.call(_intrinsic(m, "roundeven", ty, 1), [_fast(b.fmul(x, _const(ty, 1.0 / math.log(2.0))))])
    r = _fast(b.fsub(x, _fast(b.fmul(n, _const(ty, 0.693359375)))))
    r = _fast(b.fsub(r, _fast(b.fmul(n, _const(ty, -2.12194440e-4)))))
    p = _poly(
        b,
        r,
        [1.0, 1.0, 0.5, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4],
    )
    it = _int_ty(ty)
    ni = b.fptosi(n, it)
    half = b.ashr(ni, _const_int(it, 1))
    rest = b.sub(ni, half)

    def two_to(k: ir.Value) -> ir.Value:
        return b.bitcast(b.shl(b.add(k, _const_int(it, 127)), _const_int(it, 23)), ty)

    return b.fmul(b.fmul(p, two_to(rest)), two_to(half))


# e^r on [-ln2/2, ln2/2] to about 1.4 ulp, fitted for relative error: enough for 1 / (1 + e^-x), whose
# relative error is at most e^-x's
_EXP_R_DEGREE5 = [1.0, 9.999997019767761e-1, 4.999915063381195e-1, 1.666763573884964e-1,
                  4.1897889226675034e-2, 8.290285244584084e-3]  # fmt: skip
# 1.5 * 2^23: adding it rounds a float below 2^22 in magnitude to an integer held in the low mantissa bits
_ROUNDING_MAGIC = 12582912.0


def emit_sigmoid(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """1 / (1 + e^-x) in about half the instructions of going through emit_exp: x is clamped to
    [-88.8, 87.3], where e^-x is a normal float or (past 88.7) inf, so 2^n is one factor made from the
    bits of the rounding sum itself (no round or convert instructions), and the polynomial is a degree
    lower. Below about -88.4 the result is 0 (the exact value is subnormal); NaN passes the clamps and
    stays NaN."""
    ty = x.type
    hi, lo = _const(ty, 87.3), _const(ty, -88.8)
    x = b.select(b.fcmp_ordered(">", x, hi), hi, x)
    x = b.select(b.fcmp_ordered("<", x, lo), lo, x)
    # t = -x = n ln2 + r; k holds n + 127 in its low mantissa bits (the magic's 127 is the exponent bias)
    magic = _const(ty, _ROUNDING_MAGIC + 127.0)
    k = _fast(b.fadd(_fast(b.fmul(x, _const(ty, -1.0 / math.log(2.0)))), magic))
    n = b.fsub(k, magic)
    # -r = x + n ln2 in one fused step: float32's ln2 is off by 2e-9, which adds up to 3 ulps where |n|
    # is largest (|x| near 88); the result stays within 7 ulps of the exact sigmoid everywhere it is normal
    neg_r = _fast(b.fadd(x, _fast(b.fmul(n, _const(ty, math.log(2.0))))))
    p = _poly(b, neg_r, [c if i % 2 == 0 else -c for i, c in enumerate(_EXP_R_DEGREE5)])  # e^r at -(-r)
    it = _int_ty(ty)
    scale = b.bitcast(b.shl(b.bitcast(k, it), _const_int(it, 23)), ty)  # 2^n: (n + 127) << 23
    e = b.fmul(p, scale)
    return b.fdiv(_const(ty, 1.0), b.fadd(_const(ty, 1.0), e))


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


def _layout(ty: ir.Type) -> tuple[int, int, float]:
    """(mantissa bits, bits of sqrt(1/2), smallest normal value) of float32 or float64 (lane type)."""
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    if isinstance(elem, ir.DoubleType):
        return 52, SQRT_HALF_BITS_F64, DBL_MIN
    return 23, SQRT_HALF_BITS, FLT_MIN


def _log_reduce(b: ir.IRBuilder, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(k, m) with x = 2^k * m, k an integer and m in [sqrt(1/2), sqrt(2)), for positive finite
    float32 or float64 x; subnormals are scaled by 2^(mantissa bits) first so that their bits hold a
    normal float."""
    ty = x.type
    it = _int_ty(ty)
    bits, sqrt_half, smallest = _layout(ty)
    tiny = b.fcmp_ordered("<", x, _const(ty, smallest))
    x = b.select(tiny, b.fmul(x, _const(ty, 2.0**bits)), x)
    # subtracting sqrt(1/2)'s bits moves the exponent boundary from 1 to sqrt(1/2)
    ix = b.sub(b.bitcast(x, it), _const_int(it, sqrt_half))
    k = b.add(b.ashr(ix, _const_int(it, bits)), b.select(tiny, _const_int(it, -bits), _const_int(it, 0)))
    m = b.bitcast(b.add(b.and_(ix, _const_int(it, (1 << bits) - 1)), _const_int(it, sqrt_half)), ty)
    return k, m


def emit_log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Natural log of float32: k*ln2 + log(m) (see _log_reduce), log(1 + f) as f - f^2/2 + f^3 P(f)
    (Cephes logf), ln2 in a short head whose product with k is exact plus a tail. f = m - 1 is
    exact, so log keeps its relative accuracy next to 1. log(0) = -inf, log(x < 0) = NaN."""
    ty = x.type
    k, m = _log_reduce(b, x)
    f = b.fsub(m, _const(ty, 1.0))
    z = _fast(b.fmul(f, f))
    p = _poly(
        b,
        f,
        [
            3.3333331174e-1,
            -2.4999993993e-1,
            2.0000714765e-1,
            -1.6668057665e-1,
            1.4249322787e-1,
            -1.2420140846e-1,
            1.1676998740e-1,
            -1.1514610310e-1,
            7.0376836292e-2,
        ],
    )
    kf = b.sitofp(k, ty)
    y = _fast(b.fmul(_fast(b.fmul(f, z)), p))
    y = _fast(b.fadd(y, _fast(b.fmul(kf, _const(ty, -2.12194440e-4)))))
    y = _fast(b.fsub(y, _fast(b.fmul(z, _const(ty, 0.5)))))
    r = _fast(b.fadd(_fast(b.fadd(f, y)), _fast(b.fmul(kf, _const(ty, 0.693359375)))))
    r = b.select(b.fcmp_ordered("==", x, _const(ty, math.inf)), _const(ty, math.inf), r)
    r = b.select(b.fcmp_ordered("==", x, _const(ty, 0.0)), _const(ty, -math.inf), r)
    return b.select(b.fcmp_unordered("<", x, _const(ty, 0.0)), _const(ty, math.nan), r)


def _log2_f64(b: ir.IRBuilder, ax: ir.Value) -> ir.Value:
    """log2 of a positive float32 `ax` in float64, relative error far below float32's: k plus
    2 atanh(s) / ln2 with s = f / (2 + f) by its series to s^13. A power of two gives k exactly (so
    exact powers stay exact); log2(0) = -inf, log2(inf) = inf."""
    ty = _with_element(ax.type, F64)
    k, m = _log_reduce(b, ax)
    f = b.fsub(b.fpext(m, ty), _const(ty, 1.0))
    s = b.fdiv(f, b.fadd(_const(ty, 2.0), f))
    z = _fast(b.fmul(s, s))
    series = _poly(b, z, [2.0 / ((2 * j + 1) * math.log(2.0)) for j in range(7)])
    r = _fast(b.fadd(_fast(b.fmul(s, series)), b.sitofp(k, ty)))
    r = b.select(b.fcmp_ordered("==", ax, _const(ax.type, math.inf)), _const(ty, math.inf), r)
    return b.select(b.fcmp_ordered("==", ax, _const(ax.type, 0.0)), _const(ty, -math.inf), r)


def _exp2_f64(b: ir.IRBuilder, t: ir.Value) -> ir.Value:
    """2^t of float64 t, relative error far below float32's: 2^n * e^(r ln2) with n = round(t),
    r = t - n exact; an integer t gives 2^t exactly. t is clamped to +-300, beyond which a float32
    result is 0 or inf anyway (so NaN is not kept: callers handle it)."""
    m = b.module
    ty = t.type
    t = b.call(_intrinsic(m, "minnum", ty, 2), [t, _const(ty, 300.0)])
    t = b.call(_intrinsic(m, "maxnum", ty, 2), [t, _const(ty, -300.0)])
    n = b.call(_intrinsic(m, "roundeven", ty, 1), [t])
    r = b.fsub(t, n)
    p = _poly(b, r, [math.log(2.0) ** j / math.factorial(j) for j in range(10)])
    it = _int_ty(ty)
    scale = b.bitcast(b.shl(b.add(b.fptosi(n, it), _const_int(it, 1023)), _const_int(it, 52)), ty)
    return _fast(b.fmul(p, scale))


def emit_pow(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x^y of float32 as 2^(y * log2|x|) with C's special cases (pow(x, 0) = pow(1, y) = 1, NaN for
    a negative x and a non-integer y, the sign of x for an odd integer y, 0 and inf for 0 and inf
    bases). Computed in float64: a relative error e in log|x| becomes a relative error |y log x| * e
    in the result, and |y log x| reaches ~100 before the result leaves float32's range, so float32
    would lose ~7 bits there. The one float32 rounding at the end also gives overflow to inf and
    gradual underflow through the subnormals."""
    m = b.module
    ty = x.type
    ax = b.call(_intrinsic(m, "fabs", ty, 1), [x])
    one = _const(ty, 1.0)
    t = b.fmul(b.fpext(y, _with_element(ty, F64)), _log2_f64(b, ax))
    # |x| = 1: |result| = 1 whatever y, the infinities too (inf * log 1 would be NaN)
    t = b.select(b.fcmp_ordered("==", ax, one), _const(t.type, 0.0), t)
    r = b.fptrunc(_exp2_f64(b, t), ty)
    trunc_y = b.call(_intrinsic(m, "trunc", ty, 1), [y])
    integer = b.fcmp_ordered("==", trunc_y, y)  # the infinities count as (even) integers
    half = b.fmul(y, _const(ty, 0.5))
    odd = b.and_(integer, b.fcmp_unordered("!=", b.call(_intrinsic(m, "trunc", ty, 1), [half]), half))
    negative = b.icmp_signed("<", b.bitcast(x, _int_ty(ty)), _const_int(_int_ty(ty), 0))  # -0 too
    r = b.select(b.and_(negative, odd), b.fneg(r), r)
    finite_negative = b.and_(
        b.fcmp_ordered("<", x, _const(ty, 0.0)), b.fcmp_ordered(">", x, _const(ty, -math.inf))
    )
    nan = _const(ty, math.nan)
    r = b.select(b.and_(finite_negative, b.not_(integer)), nan, r)
    r = b.select(b.fcmp_unordered("uno", x, y), nan, r)
    unit = b.or_(b.fcmp_ordered("==", y, _const(ty, 0.0)), b.fcmp_ordered("==", x, one))
    return b.select(unit, one, r)


# sin and cos of r in [-pi/4, pi/4] (Cephes' single-precision minimax polynomials, in z = r^2)
_SIN_R = [-1.6666654611e-1, 8.3321608736e-3, -1.9515295891e-4]
_COS_R = [4.166664568298827e-2, -1.388731625493765e-3, 2.443315711809948e-5]


def emit_sin_cos(b: ir.IRBuilder, x: ir.Value, cosine: bool) -> ir.Value:
    """sin x (or cos x) of float32 x: x = k pi/2 + r with |r| <= pi/4, reduced in float64 (exact
    enough for |x| up to about 1e9, where float32 spacing is already larger than pi: rotary position
    angles and timestep embeddings stay far below), then sin r or cos r by a polynomial and the
    quadrant k mod 4 choosing which and its sign (cos x = sin(x + pi/2): one more quadrant). inf and
    NaN give NaN."""
    m = b.module
    ty = x.type
    dty = _with_element(ty, F64)
    xd = b.fpext(x, dty)
    k = b.call(_intrinsic(m, "roundeven", dty, 1), [b.fmul(xd, _const(dty, 2.0 / math.pi))])
    r = b.fsub(xd, b.fmul(k, _const(dty, math.pi / 2.0)))
    z = b.fmul(r, r)
    sin_r = b.fadd(r, b.fmul(b.fmul(r, z), _poly(b, z, _SIN_R)))
    cos_r = b.fadd(
        b.fsub(_const(dty, 1.0), b.fmul(z, _const(dty, 0.5))), b.fmul(b.fmul(z, z), _poly(b, z, _COS_R))
    )
    # the quadrant k mod 4 taken in float64, where k is exact: no integer conversion can overflow
    quadrant = b.fsub(
        k, b.fmul(_const(dty, 4.0), b.call(_intrinsic(m, "floor", dty, 1), [b.fmul(k, _const(dty, 0.25))]))
    )
    it = _int_ty(dty)
    q = b.fptosi(quadrant, it)
    if cosine:
        q = b.add(q, _const_int(it, 1))
    zero = _const_int(it, 0)
    odd = b.icmp_signed("!=", b.and_(q, _const_int(it, 1)), zero)
    negative = b.icmp_signed("!=", b.and_(q, _const_int(it, 2)), zero)
    v = b.select(odd, cos_r, sin_r)
    v = b.select(negative, b.fneg(v), v)
    out = b.fptrunc(v, ty)
    finite = b.fcmp_ordered("<", b.call(_intrinsic(m, "fabs", ty, 1), [x]), _const(ty, math.inf))
    return b.select(finite, out, _const(ty, math.nan))


def emit_sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return emit_sin_cos(b, x, cosine=False)


def emit_cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return emit_sin_cos(b, x, cosine=True)


# ---- tan, the inverse trigonometric and the hyperbolic functions: float64 inside ----------------------
#
# Each works in float64 on the float32 argument (exact there) and rounds once at the end, so its
# error is that rounding: the polynomials and reductions below are accurate far beyond float32.


def _f64(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fpext(x, _with_element(x.type, F64))


def _fabs(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.call(_intrinsic(b.module, "fabs", x.type, 1), [x])


def _sqrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.call(_intrinsic(b.module, "sqrt", x.type, 1), [x])


def _with_sign_of(b: ir.IRBuilder, r: ir.Value, x: ir.Value) -> ir.Value:
    """|r| with the sign of x (odd functions computed on |x|; -0 stays -0)."""
    return b.call(_intrinsic(b.module, "copysign", r.type, 2), [r, x])


def _keep_nan(b: ir.IRBuilder, x: ir.Value, r: ir.Value) -> ir.Value:
    """r, or x where x is NaN (for results whose clamps lose the NaN)."""
    return b.select(b.fcmp_unordered("uno", x, x), x, r)


def _ln_f64(b: ir.IRBuilder, y: ir.Value) -> ir.Value:
    """Natural log of float64 y with an error near float64's own: k ln2 + log(m) (see _log_reduce),
    log(m) as 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172, by its series to s^19. log(0) =
    -inf, log(inf) = inf, NaN and negative y give NaN."""
    ty = y.type
    k, m = _log_reduce(b, y)
    f = b.fsub(m, _const(ty, 1.0))
    s = b.fdiv(f, b.fadd(_const(ty, 2.0), f))
    series = _poly(b, _fast(b.fmul(s, s)), [2.0 / (2 * j + 1) for j in range(10)])
    r = _fast(b.fadd(_fast(b.fmul(s, series)), b.fmul(b.sitofp(k, ty), _const(ty, math.log(2.0)))))
    r = b.select(b.fcmp_ordered("==", y, _const(ty, math.inf)), _const(ty, math.inf), r)
    r = b.select(b.fcmp_ordered("==", y, _const(ty, 0.0)), _const(ty, -math.inf), r)
    return b.select(b.fcmp_unordered("<", y, _const(ty, 0.0)), _const(ty, math.nan), r)


def _two_over_pi_chunks(count: int) -> list[float]:
    """2/pi as `count` doubles c_j * 2^(-24(j+1)), each c_j a 24-bit integer, so that a float32 times
    any of them is exact in float64. Computed from pi by Machin's formula in integers: no table of
    digits to mistype."""
    bits = 24 * count
    one = 1 << (bits + 32)  # 32 guard bits absorb the truncation of each series term

    def arctan_inv(n: int) -> int:
        total, power, k = 0, one // n, 0
        while power:
            term = power // (2 * k + 1)
            total += -term if k % 2 else term
            power //= n * n
            k += 1
        return total

    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)
    fixed = (2 * one << bits) // pi  # floor(2/pi * 2^bits)
    return [((fixed >> (bits - 24 * (j + 1))) & 0xFFFFFF) * 2.0 ** (-24 * (j + 1)) for j in range(count)]


# 240 bits: for the largest float32 (a 24-bit integer times 2^104) the bits of 2/pi above 2^-103 only
# add multiples of 4 quarter turns; the ones below must still fix f to float64 precision where f is
# smallest (a float32 comes within about 2^-30 quarter turns of a multiple of pi/2)
_TWO_OVER_PI = _two_over_pi_chunks(10)


def _mod4(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """v mod 4 of a non-negative double, exact (both terms are multiples of v's ulp, or of 4)."""
    ty = v.type
    whole = b.call(_intrinsic(b.module, "floor", ty, 1), [b.fmul(v, _const(ty, 0.25))])
    return b.fsub(v, b.fmul(whole, _const(ty, 4.0)))


def _quarter_turns(b: ir.IRBuilder, ax: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(f, q) in float64 with ax * 2/pi = 4n + q + f for non-negative float32 ax: q in {0, 1, 2, 3},
    f in [-1/2, 1/2], accurate to float64 relative to f itself for every float32 (a Payne-Hanek
    reduction without tables: ax times each chunk of 2/pi is exact, so is its remainder mod 4, and
    the remainders are summed with TwoSum keeping every rounding error). inf and NaN give NaN."""
    ty = _with_element(ax.type, F64)
    xd = b.fpext(ax, ty)
    hi, lo = _const(ty, 0.0), _const(ty, 0.0)
    for chunk in _TWO_OVER_PI:
        t = _mod4(b, b.fmul(xd, _const(ty, chunk)))
        s = b.fadd(hi, t)
        back = b.fsub(s, hi)
        lo = b.fadd(lo, b.fadd(b.fsub(hi, b.fsub(s, back)), b.fsub(t, back)))
        hi = _mod4(b, s)
    n = b.call(_intrinsic(b.module, "roundeven", ty, 1), [hi])
    return b.fadd(b.fsub(hi, n), lo), _mod4(b, n)


# Taylor coefficients of sin r / r and cos r in z = r^2: for |r| <= pi/4 the first term left out is
# below 1e-15 of the value
_SIN_TAYLOR = [(-1.0) ** j / math.factorial(2 * j + 1) for j in range(8)]
_COS_TAYLOR = [(-1.0) ** j / math.factorial(2 * j) for j in range(8)]


def emit_tan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """tan x of float32 x: |x| = (4n + q + f) pi/2 exactly (_quarter_turns), r = f pi/2 in
    [-pi/4, pi/4], sin r and cos r by their Taylor series, tan |x| = sin r / cos r, or -cos r / sin r
    in an odd quadrant; then the sign of x (tan is odd). Exact reduction matters more for tan than
    for sin: near a pole, an absolute error e in r becomes a relative error of about e / r in the
    result. inf and NaN give NaN."""
    ty = x.type
    f, q = _quarter_turns(b, _fabs(b, x))
    dty = f.type
    r = b.fmul(f, _const(dty, math.pi / 2.0))
    z = b.fmul(r, r)
    sin_r = _fast(b.fmul(r, _poly(b, z, _SIN_TAYLOR)))
    cos_r = _poly(b, z, _COS_TAYLOR)
    odd = b.or_(b.fcmp_ordered("==", q, _const(dty, 1.0)), b.fcmp_ordered("==", q, _const(dty, 3.0)))
    num = b.select(odd, b.fneg(cos_r), sin_r)
    den = b.select(odd, sin_r, cos_r)
    t = b.fptrunc(b.fdiv(num, den), ty)
    it = _int_ty(ty)
    negative = b.icmp_signed("<", b.bitcast(x, it), _const_int(it, 0))  # -0 too
    return b.select(negative, b.fneg(t), t)


# asin t = t + t z P(z), z = t^2, on |t| <= 1/2; atan t = t + t z Q(z) on |t| <= tan(pi/8): least
# squares fits of the relative error on Chebyshev nodes, of a degree that leaves it far below float32's
_ASIN_P = [0.16666666630946575, 0.07500004584614628, 0.04464085082774746, 0.030424117483453972,
           0.02188719970697075, 0.020541429296240744, 0.002244061947674101, 0.03264132311634203]  # fmt: skip
_ATAN_Q = [-0.333333332964673, 0.1999999443642039, -0.1428542832664333, 0.11104091645042322,
           -0.08997647834255848, 0.06994823555394171, -0.037986733082775836]  # fmt: skip
_TAN_PI_8 = math.tan(math.pi / 8)
_TAN_3PI_8 = math.tan(3 * math.pi / 8)


def _asin_parts(b: ir.IRBuilder, a: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(p, outer) for float64 a = |x|: p = asin a when a <= 1/2 (outer false), else p = asin of
    sqrt((1 - a) / 2), which is (pi/2 - asin a) / 2 (outer true): near |x| = 1 this keeps asin's and
    acos's accuracy, as 1 - a is exact. a > 1 makes the root, and so p, NaN."""
    ty = a.type
    outer = b.fcmp_ordered(">", a, _const(ty, 0.5))
    half_gap = b.fmul(b.fsub(_const(ty, 1.0), a), _const(ty, 0.5))
    t = b.select(outer, _sqrt(b, half_gap), a)
    z = b.select(outer, half_gap, b.fmul(a, a))
    p = _fast(b.fadd(t, _fast(b.fmul(_fast(b.fmul(t, z)), _poly(b, z, _ASIN_P)))))
    return p, outer


def emit_asin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """asin x: p or pi/2 - 2p (_asin_parts) with the sign of x; NaN outside [-1, 1]."""
    ty = x.type
    p, outer = _asin_parts(b, _f64(b, _fabs(b, x)))
    r = b.select(outer, b.fsub(_const(p.type, math.pi / 2.0), b.fmul(p, _const(p.type, 2.0))), p)
    return _with_sign_of(b, b.fptrunc(r, ty), x)


def emit_acos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """acos x = pi/2 - asin x for |x| <= 1/2; 2p, or pi - 2p for negative x, beyond (_asin_parts):
    near x = 1, where acos x goes to 0, no subtraction loses its digits. NaN outside [-1, 1]."""
    ty = x.type
    p, outer = _asin_parts(b, _f64(b, _fabs(b, x)))
    dty = p.type
    negative = b.fcmp_ordered("<", x, _const(ty, 0.0))
    twice = b.fmul(p, _const(dty, 2.0))
    beyond = b.select(negative, b.fsub(_const(dty, math.pi), twice), twice)
    within = b.fsub(_const(dty, math.pi / 2.0), _with_sign_of(b, p, _f64(b, x)))
    return b.fptrunc(b.select(outer, beyond, within), ty)


def emit_atan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """atan x: |x| reduced to |t| <= tan(pi/8) (Cephes' three ranges: t = |x|, (|x| - 1) / (|x| + 1)
    plus pi/4, or -1/|x| plus pi/2), the polynomial, then the sign of x. atan(+-inf) = +-pi/2."""
    ty = x.type
    a = _f64(b, _fabs(b, x))
    dty = a.type
    one = _const(dty, 1.0)
    far = b.fcmp_ordered(">", a, _const(dty, _TAN_3PI_8))
    mid = b.fcmp_ordered(">", a, _const(dty, _TAN_PI_8))
    t = b.select(far, b.fdiv(_const(dty, -1.0), a), b.select(mid, b.fdiv(b.fsub(a, one), b.fadd(a, one)), a))
    base = b.select(
        far, _const(dty, math.pi / 2.0), b.select(mid, _const(dty, math.pi / 4.0), _const(dty, 0.0))
    )
    z = b.fmul(t, t)
    p = _fast(b.fadd(t, _fast(b.fmul(_fast(b.fmul(t, z)), _poly(b, z, _ATAN_Q)))))
    return _with_sign_of(b, b.fptrunc(b.fadd(base, p), ty), x)


def _exp_pair(b: ir.IRBuilder, ax: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(e^ax, e^-ax) in float64 for float32 ax >= 0: float64's range holds e^ax well past the
    float32 overflow of cosh and sinh (e^ax alone overflows float32 from ax = 88.7, cosh only from
    89.4). NaN is lost (_exp2_f64's clamps): callers keep it."""
    ty = _with_element(ax.type, F64)
    e = _exp2_f64(b, b.fmul(b.fpext(ax, ty), _const(ty, 1.0 / math.log(2.0))))
    return e, b.fdiv(_const(ty, 1.0), e)


def emit_cosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """cosh x = (e^|x| + e^-|x|) / 2, inf past float32's range; NaN stays NaN."""
    e, inv = _exp_pair(b, _fabs(b, x))
    r = b.fmul(b.fadd(e, inv), _const(e.type, 0.5))
    return _keep_nan(b, x, b.fptrunc(r, x.type))


# below this |x|, e^|x| - e^-|x| would cancel: sinh takes its Taylor series to x^7 there instead
_SINH_SERIES_BELOW = 2.0**-5


def emit_sinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """sinh x = (e^|x| - e^-|x|) / 2 with the sign of x, by the series near 0 (a tiny x is its own
    sinh); +-inf past float32's range, NaN stays NaN."""
    ax = _fabs(b, x)
    e, inv = _exp_pair(b, ax)
    dty = e.type
    a = b.fpext(ax, dty)
    series = _fast(b.fmul(a, _poly(b, b.fmul(a, a), [1.0 / math.factorial(2 * j + 1) for j in range(4)])))
    near = b.fcmp_ordered("<", a, _const(dty, _SINH_SERIES_BELOW))
    r = b.select(near, series, b.fmul(b.fsub(e, inv), _const(dty, 0.5)))
    return _keep_nan(b, x, _with_sign_of(b, b.fptrunc(r, x.type), x))


# below this |x|, the logarithms of asinh and atanh would take 1 + |x| rounded: their series instead
# (asinh x = x - x^3/6 + ..., atanh x = x + x^3/3 + ...: the first term left out is below 2^-48 of x)
_LOG_SERIES_BELOW = 2.0**-12


def emit_asinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """asinh x = log(|x| + sqrt(x^2 + 1)) with the sign of x (x^2 cannot overflow in float64),
    |x| - |x|^3/6 near 0; +-inf at +-inf, NaN stays NaN."""
    a = _f64(b, _fabs(b, x))
    ty = a.type
    wide = _ln_f64(b, b.fadd(a, _sqrt(b, b.fadd(b.fmul(a, a), _const(ty, 1.0)))))
    series = b.fsub(a, b.fmul(b.fmul(a, b.fmul(a, a)), _const(ty, 1.0 / 6.0)))
    r = b.select(b.fcmp_ordered("<", a, _const(ty, _LOG_SERIES_BELOW)), series, wide)
    return _with_sign_of(b, b.fptrunc(r, x.type), x)


def emit_acosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """acosh x = log(x + sqrt(x^2 - 1)): in float64 x^2 - 1 is exact near x = 1 (where acosh goes to 0
    like sqrt(2 (x - 1))) and cannot overflow; NaN below 1 (where x^2 - 1 is no test: it is positive
    again below -1), inf at inf."""
    xd = _f64(b, x)
    root = _sqrt(b, b.fsub(b.fmul(xd, xd), _const(xd.type, 1.0)))
    r = b.fptrunc(_ln_f64(b, b.fadd(xd, root)), x.type)
    return b.select(b.fcmp_ordered("<", x, _const(x.type, 1.0)), _const(x.type, math.nan), r)


def emit_atanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """atanh x = log((1 + |x|) / (1 - |x|)) / 2 with the sign of x (both sums exact in float64),
    |x| + |x|^3/3 near 0; +-inf at +-1, NaN beyond."""
    a = _f64(b, _fabs(b, x))
    ty = a.type
    one = _const(ty, 1.0)
    wide = b.fmul(_ln_f64(b, b.fdiv(b.fadd(one, a), b.fsub(one, a))), _const(ty, 0.5))
    series = b.fadd(a, b.fmul(b.fmul(a, b.fmul(a, a)), _const(ty, 1.0 / 3.0)))
    r = b.select(b.fcmp_ordered("<", a, _const(ty, _LOG_SERIES_BELOW)), series, wide)
    return _with_sign_of(b, b.fptrunc(r, x.type), x)
