"""Pointwise ops: unary math, binary arithmetic, comparisons, logical and bitwise ops."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, promote, to_array, upcast
from torch_xla.lowering.registry import register


def _float_unary(fn):
    """A unary op whose result is floating: ints and bool become the default float."""

    def lower(x):
        out_dtype = dtypes.float_type(x)
        return fn(to_array(x, upcast(out_dtype))).astype(out_dtype)

    lower.__qualname__ = f"float_unary[{getattr(fn, '__name__', fn)}]"
    return lower


def _same_dtype_unary(fn):
    def lower(x):
        x = to_array(x)
        return fn(x.astype(upcast(x.dtype))).astype(x.dtype)

    lower.__qualname__ = f"unary[{getattr(fn, '__name__', fn)}]"
    return lower


def _rsqrt(x):
    return lax.rsqrt(x)


def _sinc(x):
    return jnp.sinc(x)


def _exp2(x):
    return jnp.exp2(x)


def _erfinv(x):
    return jsp.erfinv(x)


def _i0(x):
    return jnp.i0(x)


def _special_i0e(x):
    return jsp.i0e(x)


def _special_i1(x):
    return jsp.i1(x)


def _special_i1e(x):
    return jsp.i1e(x)


def _special_ndtri(x):
    return jsp.ndtri(x)


def _special_erfcx(x):
    return jsp.erfcx(x)


def _special_ndtr(x):
    return jsp.ndtr(x)


def _special_log_ndtr(x):
    return jsp.log_ndtr(x)


def _special_entr(x):
    return jsp.entr(x)


def _sigmoid(x):
    return jax.nn.sigmoid(x)


def _digamma(x):
    # torch: digamma(0) = -inf (jax gives nan), digamma(negative integer) = nan.
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), jsp.digamma(x))


FLOAT_UNARY = {
    aten.acos: jnp.arccos,
    aten.acosh: jnp.arccosh,
    aten.asin: jnp.arcsin,
    aten.asinh: jnp.arcsinh,
    aten.atan: jnp.arctan,
    aten.atanh: jnp.arctanh,
    aten.cos: jnp.cos,
    aten.cosh: jnp.cosh,
    aten.sin: jnp.sin,
    aten.sinh: jnp.sinh,
    aten.tan: jnp.tan,
    aten.tanh: jnp.tanh,
    aten.exp: jnp.exp,
    aten.exp2: _exp2,
    aten.expm1: jnp.expm1,
    aten.log: jnp.log,
    aten.log10: jnp.log10,
    aten.log1p: jnp.log1p,
    aten.log2: jnp.log2,
    aten.sqrt: jnp.sqrt,
    aten.rsqrt: _rsqrt,
    aten.sigmoid: _sigmoid,
    aten.erf: jsp.erf,
    aten.erfc: jsp.erfc,
    aten.erfinv: _erfinv,
    aten.lgamma: jsp.gammaln,
    aten.digamma: _digamma,
    aten.sinc: _sinc,
    aten.i0: _i0,
    aten.special_i0e: _special_i0e,
    aten.special_i1: _special_i1,
    aten.special_i1e: _special_i1e,
    aten.special_ndtri: _special_ndtri,
    aten.special_erfcx: _special_erfcx,
    aten.special_ndtr: _special_ndtr,
    aten.special_log_ndtr: _special_log_ndtr,
    aten.special_entr: _special_entr,
}
for _packet, _fn in FLOAT_UNARY.items():
    register(_packet.default)(_float_unary(_fn))


def _reciprocal(x):
    return 1 / x


register(aten.reciprocal.default)(_float_unary(_reciprocal))


@register(aten.abs.default)
def abs_(x):
    return jnp.abs(x)


@register(aten.neg.default)
def neg(x):
    return -x if x.dtype != np.bool_ else x


@register(aten.positive.default, aten.resolve_conj.default, aten.resolve_neg.default)
def positive(x):
    return x


@register(aten.conj_physical.default)
def conj_physical(x):
    return jnp.conj(x) if dtypes.is_complex(x.dtype) else x


@register(aten.sign.default)
def sign(x):
    if x.dtype == np.bool_:
        return x
    # torch computes (0 < x) - (x < 0): 0 for NaN (jnp.sign gives NaN) and +0 for -0.
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


@register(aten.sgn.default)
def sgn(x):
    if dtypes.is_complex(x.dtype):
        magnitude = jnp.abs(x)
        return jnp.where(magnitude == 0, 0, x / jnp.where(magnitude == 0, 1, magnitude))
    return sign(x)


@register(aten.signbit.default)
def signbit(x):
    return jnp.signbit(x)


def _integer_passthrough(fn):
    def lower(x):
        return x if dtypes.is_integral(x.dtype, include_bool=True) else fn(x)

    lower.__qualname__ = f"rounding[{fn.__name__}]"
    return lower


register(aten.ceil.default)(_integer_passthrough(jnp.ceil))
register(aten.floor.default)(_integer_passthrough(jnp.floor))
register(aten.trunc.default, aten.fix.default)(_integer_passthrough(jnp.trunc))
register(aten.round.default)(_integer_passthrough(jnp.round))


@register(aten.frac.default)
def frac(x):
    return x - jnp.trunc(x)


@register(aten.round.decimals)
def round_decimals(x, *, decimals=0):
    if dtypes.is_integral(x.dtype, include_bool=True):
        return x
    if decimals >= 0:
        scale = np.asarray(10.0**decimals, dtype=x.dtype)
        return jnp.round(x * scale) / scale
    scale = np.asarray(10.0 ** (-decimals), dtype=x.dtype)
    return jnp.round(x / scale) * scale


@register(aten.isnan.default)
def isnan(x):
    return jnp.isnan(x)


@register(aten.isinf.default)
def isinf(x):
    return jnp.isinf(x)


@register(aten.isfinite.default)
def isfinite(x):
    return jnp.isfinite(x)


@register(aten.isposinf.default)
def isposinf(x):
    return jnp.isposinf(x) if not dtypes.is_integral(x.dtype, True) else jnp.zeros_like(x, bool)


@register(aten.isneginf.default)
def isneginf(x):
    return jnp.isneginf(x) if not dtypes.is_integral(x.dtype, True) else jnp.zeros_like(x, bool)


@register(aten.nan_to_num.default)
def nan_to_num(x, nan=None, posinf=None, neginf=None):
    if not (dtypes.is_floating(x.dtype) or dtypes.is_complex(x.dtype)):
        return x
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)


@register(aten.bitwise_not.default)
def bitwise_not(x):
    return jnp.invert(x)


@register(aten.logical_not.default)
def logical_not(x):
    return jnp.logical_not(x.astype(bool) if x.dtype != np.bool_ else x)


@register(aten.angle.default)
def angle(x):
    if dtypes.is_complex(x.dtype):
        return jnp.angle(x)
    out = dtypes.float_type(x)
    x = x.astype(out)
    pi, zero = jnp.asarray(math.pi, out), jnp.zeros((), out)
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, pi, zero))


@register(aten.real.default)
def real(x):
    return jnp.real(x)


@register(aten.imag.default)
def imag(x):
    return jnp.imag(x)


@register(aten.conj.default, aten._conj.default, aten._conj_copy.default,
          aten._conj_physical.default)
def conj(x):
    return jnp.conj(x) if dtypes.is_complex(x.dtype) else x


# ---------------------------------------------------------------------------------------
# Binary arithmetic.  Operands are promoted with torch's rules, half types are computed
# in float32 and rounded once, as torch's CPU kernels do.


def _binary(fn, a, b):
    a, b = promote(a, b)
    out = a.dtype
    return fn(a.astype(upcast(out)), b.astype(upcast(out))).astype(out)


@register(aten.add.Tensor, aten.add.Scalar)
def add(a, b, alpha=1):
    if isinstance(alpha, (int, float)) and alpha == 1:  # a lifted alpha is an array
        return _binary(jnp.add, a, b)
    return _binary(lambda x, y: x + y * alpha, a, b)


@register(aten.sub.Tensor, aten.sub.Scalar)
def sub(a, b, alpha=1):
    return _binary(lambda x, y: x - y * alpha, a, b)


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(a, b, alpha=1):
    return _binary(lambda x, y: y - x * alpha, a, b)


@register(aten.mul.Tensor, aten.mul.Scalar)
def mul(a, b):
    a, b = promote(a, b)
    if a.dtype == np.bool_:
        return jnp.logical_and(a, b)
    return _binary(jnp.multiply, a, b)


def _true_divide(a, b):
    out = dtypes.float_type(a, b)
    compute = upcast(out)
    return (to_array(a, compute) / to_array(b, compute)).astype(out)


def _trunc_divide(a, b):
    a, b = jnp.broadcast_arrays(*promote(a, b))
    if dtypes.is_integral(a.dtype, include_bool=True):
        return lax.div(a, b)
    compute = upcast(a.dtype)
    # The quotient is rounded to the result dtype before truncation, as torch does.
    quotient = (a.astype(compute) / b.astype(compute)).astype(a.dtype)
    return jnp.trunc(quotient)


def _floor_divide(a, b):
    a, b = promote(a, b)
    compute = upcast(a.dtype)
    return jnp.floor_divide(a.astype(compute), b.astype(compute)).astype(a.dtype)


_DIVIDE_MODES = {None: _true_divide, "trunc": _trunc_divide, "floor": _floor_divide}


@register(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor)
def div(a, b):
    return _true_divide(a, b)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a, b, *, rounding_mode=None):
    return _DIVIDE_MODES[rounding_mode](a, b)


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(a, b):
    return _floor_divide(a, b)


@register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(a, b):
    return _binary(jnp.remainder, a, b)


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(a, b):
    return _binary(jnp.fmod, a, b)


def _pow(x, y):
    if dtypes.is_integral(x.dtype):
        # Negative integer exponents: torch gives 0 except for bases 1 and -1.
        return jnp.where(y < 0, jnp.where(jnp.abs(x) == 1, jnp.where(y % 2 == 0, 1, x), 0),
                         jnp.power(x, jnp.maximum(y, 0)))
    return jnp.power(x, y)


@register(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(a, b):
    if isinstance(b, int) and not isinstance(b, bool) and not dtypes.is_complex(
        dtypes.result_type(a, b)
    ):
        a = to_array(a, dtypes.result_type(a, b))
        return lax.integer_pow(a.astype(upcast(a.dtype)), b).astype(a.dtype) if b >= 0 else (
            _binary(_pow, a, b)
        )
    return _binary(_pow, a, b)


@register(aten.float_power.Tensor_Tensor, aten.float_power.Tensor_Scalar,
          aten.float_power.Scalar)
def float_power(a, b):
    complex_ = any(dtypes.is_complex(dtypes.result_type(v)) for v in (a, b))
    dtype = np.complex128 if complex_ else np.float64
    return jnp.power(to_array(a, dtype), to_array(b, dtype))


def _float_binary(fn):
    def lower(a, b):
        out = dtypes.float_type(a, b)
        return fn(to_array(a, upcast(out)), to_array(b, upcast(out))).astype(out)

    lower.__qualname__ = f"float_binary[{fn.__name__}]"
    return lower


def _xlogy(x, y):
    return jnp.where(jnp.isnan(y), jnp.nan, jsp.xlogy(x, y))


def _xlog1py(x, y):
    return jnp.where(jnp.isnan(y), jnp.nan, jsp.xlog1py(x, y))


def _logaddexp2(x, y):
    return jnp.logaddexp2(x, y)


register(aten.atan2.default)(_float_binary(jnp.arctan2))
register(aten.hypot.default)(_float_binary(jnp.hypot))
def _logaddexp(x, y):
    if dtypes.is_complex(x.dtype):
        # torch's formula: the term with the larger real part keeps its imaginary part.
        big = jnp.where(x.real >= y.real, x, y)
        small = jnp.where(x.real >= y.real, y, x)
        return big + jnp.log1p(jnp.exp(small - big))
    return jnp.logaddexp(x, y)


register(aten.logaddexp.default)(_float_binary(_logaddexp))
register(aten.logaddexp2.default)(_float_binary(_logaddexp2))
register(aten.xlogy.Tensor, aten.xlogy.Scalar_Self, aten.xlogy.Scalar_Other)(
    _float_binary(_xlogy)
)
register(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar,
         aten.special_xlog1py.other_scalar)(_float_binary(_xlog1py))
register(aten.copysign.Tensor, aten.copysign.Scalar)(_float_binary(jnp.copysign))
register(aten.igamma.default)(_float_binary(jsp.gammainc))
register(aten.igammac.default)(_float_binary(jsp.gammaincc))


@register(aten.nextafter.default)
def nextafter(a, b):
    return _binary(jnp.nextafter, a, b)


@register(aten.maximum.default, aten.max.other)
def maximum(a, b):
    return _binary(jnp.maximum, a, b)


@register(aten.minimum.default, aten.min.other)
def minimum(a, b):
    return _binary(jnp.minimum, a, b)


@register(aten.fmax.default)
def fmax(a, b):
    return _binary(jnp.fmax, a, b)


@register(aten.fmin.default)
def fmin(a, b):
    return _binary(jnp.fmin, a, b)


@register(aten.heaviside.default)
def heaviside(a, b):
    a, b = promote(a, b)
    return jnp.where(a == 0, b, (a > 0).astype(a.dtype))


@register(aten.gcd.default)
def gcd(a, b):
    return _binary(jnp.gcd, a, b)


@register(aten.lcm.default)
def lcm(a, b):
    return _binary(jnp.lcm, a, b)


@register(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start, end, weight):
    start, end, weight = promote(start, end, weight)
    out = start.dtype
    s, e, w = (v.astype(upcast(out)) for v in (start, end, weight))
    # torch's formula: exact at both ends, weight < 0.5 measured from start.
    return jnp.where(jnp.abs(w) < 0.5, s + w * (e - s), e - (e - s) * (1 - w)).astype(out)


@register(aten.addcmul.default)
def addcmul(x, t1, t2, *, value=1):
    x, t1, t2 = promote(x, t1, t2)
    out = x.dtype
    c = upcast(out)
    return (x.astype(c) + value * t1.astype(c) * t2.astype(c)).astype(out)


@register(aten.addcdiv.default)
def addcdiv(x, t1, t2, *, value=1):
    x, t1, t2 = promote(x, t1, t2)
    out = x.dtype
    c = upcast(out)
    return (x.astype(c) + value * (t1.astype(c) / t2.astype(c))).astype(out)


# ---------------------------------------------------------------------------------------
# Comparisons (computed in the promoted dtype, result bool).


def _promoted(kind, fn):
    """`fn(a, b)` after torch's type promotion of `a` and `b`."""

    def lower(a, b):
        a, b = promote(a, b)
        return fn(a, b)

    lower.__qualname__ = f"{kind}[{fn.__name__}]"
    return lower


for _packet, _fn in {
    aten.eq: jnp.equal,
    aten.ne: jnp.not_equal,
    aten.lt: jnp.less,
    aten.le: jnp.less_equal,
    aten.gt: jnp.greater,
    aten.ge: jnp.greater_equal,
}.items():
    register(_packet.Tensor, _packet.Scalar)(_promoted("compare", _fn))


def _logical(fn):
    def lower(a, b):
        return fn(to_array(a).astype(bool), to_array(b).astype(bool))

    lower.__qualname__ = f"logical[{fn.__name__}]"
    return lower


register(aten.logical_and.default)(_logical(jnp.logical_and))
register(aten.logical_or.default)(_logical(jnp.logical_or))
register(aten.logical_xor.default)(_logical(jnp.logical_xor))


for _packet, _fn in {
    aten.bitwise_and: jnp.bitwise_and,
    aten.bitwise_or: jnp.bitwise_or,
    aten.bitwise_xor: jnp.bitwise_xor,
}.items():
    register(_packet.Tensor, _packet.Scalar, _packet.Scalar_Tensor)(_promoted("bitwise", _fn))


def _shift_left(a, b):
    bits = a.dtype.itemsize * 8
    return jnp.where((b < 0) | (b >= bits), 0, jnp.left_shift(a, jnp.clip(b, 0, bits - 1)))


def _shift_right(a, b):
    bits = a.dtype.itemsize * 8
    return jnp.right_shift(a, jnp.clip(b, 0, bits - 1))


register(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
         aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar)(
    _promoted("bitwise", _shift_left)
)
register(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
         aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor,
         aten.__rshift__.Scalar)(_promoted("bitwise", _shift_right))


# ---------------------------------------------------------------------------------------
# Selection.


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(condition, a, b):
    a, b = promote(a, b)
    return jnp.where(condition, a, b)


@register(aten.clamp.default, aten.clamp.Tensor)
def clamp(x, min=None, max=None):
    x, lo, hi = promote(x, min, max)
    if lo is not None:
        x = jnp.where(jnp.isnan(lo), lo, jnp.maximum(x, lo)) if dtypes.is_floating(
            x.dtype) else jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.where(jnp.isnan(hi), hi, jnp.minimum(x, hi)) if dtypes.is_floating(
            x.dtype) else jnp.minimum(x, hi)
    return x


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(x, min):
    return clamp(x, min=min)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(x, max):
    return clamp(x, max=max)


@register(aten.polar.default)
def polar(magnitude, angle):
    magnitude, angle = jnp.broadcast_arrays(magnitude, angle)
    return lax.complex(magnitude * jnp.cos(angle), magnitude * jnp.sin(angle))


@register(aten.complex.default)
def complex_(real, imag):
    return lax.complex(*jnp.broadcast_arrays(real, imag))


@register(aten.logit.default)
def logit(x, eps=None):
    out = dtypes.float_type(x)
    x = x.astype(upcast(out))
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps)
    return jnp.log(x / (1 - x)).astype(out)


register(aten.special_modified_bessel_i0.default)(_float_unary(jsp.i0))
register(aten.special_modified_bessel_i1.default)(_float_unary(jsp.i1))
