"""exp, tanh and erf for float32 (and float16) as inline arithmetic, so vector code stays vector code.

Without a vector math library LLVM turns ``llvm.exp.v16f32`` into sixteen calls to ``expf``, and the C
library's ``tanhf``/``erff`` are scalar calls too; softmax, sigmoid, GELU and tanh would then run one
lane at a time. These versions are plain floating-point arithmetic (vectorized with everything else)
and give the same result whether a loop is vectorized or not. Accuracy, measured against float64 over
the whole float32 range: exp within 1 ulp (denormal results included), tanh within 6 ulp, erf within 8
ulp (relative error below 5e-7). float64 keeps the LLVM intrinsics and the C library.

- exp: Cephes' ``expf`` (range reduction by ln 2 in two parts, degree-5 polynomial), scaled by 2**n
  in two halves so both overflow to inf and gradual underflow to denormals come out right.
- exp_bounded (an argument known to lie in ``EXP_BOUNDED_RANGE``, where exp is a normal float32): exp's
  range reduction with n = round(x / ln 2) read from the bits of x / ln 2 + 1.5 * 2**23 + 127 (the float's
  low mantissa bits hold n + 127, shifted into an exponent as they are), a polynomial one degree lower
  (``EXP_BOUNDED_POLY``), no clamps, no selects, one scaling: 12 instructions and 10 constants against
  exp's ~35 and 16 (softmax's loop spilled them).
- tanh, erf: the rational approximations of Eigen (``generic_fast_tanh_float``, ``generic_fast_erf_float``),
  odd polynomial over even polynomial on an input clamped so that a NaN passes through.
"""

from __future__ import annotations

from llvmlite import ir

from nnvm.tir.expr import EXP_BOUNDED_RANGE

EXP_HI = 88.72283  # exp overflows float32 above this
EXP_LO = -103.972  # and is 0 below this
LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
            5.0000001201e-1)

# x / ln 2 + this, rounded to float32, has n + 127 in its low mantissa bits (n = round(x / ln 2), |n| < 2**22)
EXP_ROUND_BIAS = 1.5 * 2 ** 23 + 127
# exp_bounded's polynomial: exp(r) = 1 + r + r**2 * P(r) on [-ln 2 / 2, ln 2 / 2], one degree under Cephes'
# (one FMA and one constant less) and still 3e-9 from exp (fit for relative error, Lawson's iteration)
EXP_BOUNDED_POLY = (1.381461276e-3, 8.368710056e-3, 4.166838899e-2, 1.666652113e-1, 4.999999404e-1)
assert -126 <= round(EXP_BOUNDED_RANGE[0] * LOG2E) and round(EXP_BOUNDED_RANGE[1] * LOG2E) <= 127

TANH_CLAMP = 7.90531110763549805
TANH_TINY = 0.0004
TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
          1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)

ERF_CLAMP = 4.0
ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
         -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
         -1.42647390514189e-02)

_FLAGS = ("contract",)


def _int_like(ty: ir.Type) -> ir.Type:
    i32 = ir.IntType(32)
    return ir.VectorType(i32, ty.count) if isinstance(ty, ir.VectorType) else i32


def _is_f32(ty: ir.Type) -> bool:
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    return isinstance(elem, ir.FloatType)


def _is_f16(ty: ir.Type) -> bool:
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    return isinstance(elem, ir.HalfType)


class FastMath:
    """Mixed into the expression emitter (needs ``self.builder`` and ``self.const_of``)."""

    builder: ir.IRBuilder

    def inline_math(self, name: str, x):
        """``name`` of ``x`` computed inline, or None where the intrinsic or libm is used instead."""
        fn = {"exp": self.fast_exp, "exp_bounded": self.bounded_exp, "tanh": self.fast_tanh,
              "erf": self.fast_erf}.get(name)
        if fn is None:
            return None
        if _is_f32(x.type):
            return fn(x)
        if _is_f16(x.type):  # compute in float32, like the C library would
            f32 = ir.FloatType()
            wide = ir.VectorType(f32, x.type.count) if isinstance(x.type, ir.VectorType) else f32
            return self.builder.fptrunc(fn(self.builder.fpext(x, wide)), x.type)
        return None

    def _clamp(self, x, lo: float, hi: float):
        """min(max(x, lo), hi); a NaN comes out as ``lo`` (callers restore it where it matters)."""
        b = self.builder
        lo_c, hi_c = self.const_of(x.type, lo), self.const_of(x.type, hi)
        x = b.select(b.fcmp_ordered(">", x, lo_c), x, lo_c)
        return b.select(b.fcmp_ordered("<", x, hi_c), x, hi_c)

    def _clamp_passing_nan(self, x, lo: float, hi: float):
        """min(max(x, lo), hi) with a NaN passed through, as cheap as ``_clamp`` (one maxps and one minps on
        x86: they return their second operand when either is NaN), so a NaN needs no select at the end."""
        b = self.builder
        lo_c, hi_c = self.const_of(x.type, lo), self.const_of(x.type, hi)
        x = b.select(b.fcmp_ordered("<", x, lo_c), lo_c, x)
        return b.select(b.fcmp_ordered(">", x, hi_c), hi_c, x)

    def _horner(self, x, coefs):
        b = self.builder
        acc = self.const_of(x.type, coefs[0])
        for c in coefs[1:]:
            acc = b.fadd(b.fmul(acc, x, flags=_FLAGS), self.const_of(x.type, c), flags=_FLAGS)
        return acc

    def _pow2(self, n):
        """2**n for an i32 n in [-126, 127], built from the exponent bits."""
        b = self.builder
        bits = b.shl(b.add(n, self.const_of(n.type, 127)), self.const_of(n.type, 23))
        f32 = ir.FloatType()
        return b.bitcast(bits, ir.VectorType(f32, n.type.count) if isinstance(n.type, ir.VectorType) else f32)

    def fast_exp(self, x):
        b, ty = self.builder, x.type
        c = self.const_of
        xc = self._clamp(x, EXP_LO, EXP_HI)
        fx = self._floor(b.fadd(b.fmul(xc, c(ty, LOG2E)), c(ty, 0.5)))
        r = b.fsub(xc, b.fmul(fx, c(ty, LN2_HI)))
        r = b.fsub(r, b.fmul(fx, c(ty, LN2_LO)))
        y = self._horner(r, EXP_POLY)
        y = b.fadd(b.fadd(b.fmul(y, b.fmul(r, r), flags=_FLAGS), r), c(ty, 1.0))
        n = b.fptosi(fx, _int_like(ty))  # in [-150, 128]: no overflow
        half = b.ashr(n, self.const_of(n.type, 1))
        y = b.fmul(b.fmul(y, self._pow2(half)), self._pow2(b.sub(n, half)))
        y = b.select(b.fcmp_ordered(">", x, c(ty, EXP_HI)), c(ty, float("inf")), y)
        y = b.select(b.fcmp_ordered("<", x, c(ty, EXP_LO)), c(ty, 0.0), y)
        return b.select(b.fcmp_unordered("uno", x, x), x, y)

    def bounded_exp(self, x):
        """exp(x) for x in ``EXP_BOUNDED_RANGE`` or NaN (NaN in, NaN out through the arithmetic)."""
        b, ty = self.builder, x.type
        c = self.const_of
        biased = b.fadd(b.fmul(x, c(ty, LOG2E), flags=_FLAGS), c(ty, EXP_ROUND_BIAS), flags=_FLAGS)
        n = b.fsub(biased, c(ty, EXP_ROUND_BIAS))  # round(x / ln 2), exactly
        r = b.fsub(x, b.fmul(n, c(ty, LN2_HI), flags=_FLAGS), flags=_FLAGS)  # n * LN2_HI is exact
        r = b.fsub(r, b.fmul(n, c(ty, LN2_LO), flags=_FLAGS), flags=_FLAGS)
        y = self._horner(r, EXP_BOUNDED_POLY + (1.0, 1.0))  # 1 + r + r**2 * EXP_BOUNDED_POLY(r)
        scale = b.shl(b.bitcast(biased, _int_like(ty)), c(_int_like(ty), 23))
        return b.fmul(y, b.bitcast(scale, ty))

    def fast_tanh(self, x):
        b, ty = self.builder, x.type
        xc = self._clamp_passing_nan(x, -TANH_CLAMP, TANH_CLAMP)
        x2 = b.fmul(xc, xc)
        p = b.fmul(xc, self._horner(x2, TANH_P))
        q = self._horner(x2, TANH_Q)
        y = b.fdiv(p, q)  # NaN for a NaN x
        tiny = b.fcmp_ordered("<", self.call_intrinsic("fabs", x), self.const_of(ty, TANH_TINY))
        return b.select(tiny, x, y)

    def fast_erf(self, x):
        b = self.builder
        xc = self._clamp_passing_nan(x, -ERF_CLAMP, ERF_CLAMP)
        x2 = b.fmul(xc, xc)
        return b.fdiv(b.fmul(xc, self._horner(x2, ERF_P)), self._horner(x2, ERF_Q))  # NaN for a NaN x

    def _floor(self, x):
        return self.call_intrinsic("floor", x)
