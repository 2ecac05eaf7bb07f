"""Hurwitz zeta, trigamma and polygamma: ports of torch's CPU kernels (ATen/native/Math.h,
from Cephes). jax's versions need q > 0 and differ for negative arguments, where torch
sums the series from q itself; ints and bool compute in the default float."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special as jsp

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, to_array, upcast
from torch_xla.lowering.registry import lookup, register

_MACHEP = 1.11022302462515654042e-16
# Euler-Maclaurin denominators (2k)! / B_2k of torch's zeta.
_EULER_MACLAURIN = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
                    7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
                    -4.5979787224074726105e15, 1.8152105401943546773e17,
                    -7.1661652561756670113e18)


def _neg_pow(a, x):
    """a ** -x, also for a < 0 when x is an integer (as C's pow)."""
    odd = jnp.mod(x, 2) == 1
    magnitude = jnp.abs(a) ** -x
    return jnp.where((a < 0) & odd, -magnitude, magnitude)


def _direct_sum(x, q):
    """torch's first loop: s = sum (q + i) ** -x until i >= 9 and q + i > 9, or until a
    term is below machine epsilon relative to s (then `done`)."""

    def active(state):
        i, a, _, _, done = state
        return ~done & ((i < 9) | (a <= 9))

    def step(state):
        i, a, b, s, done = state
        on = active(state)
        a2 = a + 1
        b2 = _neg_pow(a2, x)
        s2 = s + b2
        converged = (-_MACHEP * s2 < b2) & (b2 < _MACHEP * s2)
        a, b, s = (jnp.where(on, new, old) for new, old in ((a2, a), (b2, b), (s2, s)))
        return i + on, a, b, s, done | (on & converged)

    state = (jnp.zeros(q.shape, np.int32), q, jnp.zeros_like(q), _neg_pow(q, x),
             jnp.zeros(q.shape, bool))
    _, a, b, s, done = lax.while_loop(lambda st: jnp.any(active(st)), step, state)
    return a, b, s, done


def _zeta(x, q):
    x, q = jnp.broadcast_arrays(x, q)
    w, b, s, done = _direct_sum(x, q)
    s = jnp.where(done, s, s + b * w / (x - 1) - 0.5 * b)
    a, k = jnp.ones_like(x), jnp.zeros_like(x)
    for denominator in _EULER_MACLAURIN:
        a = a * (x + k)
        b = b / w
        t = a * b / denominator
        s = jnp.where(done, s, s + t)
        done = done | (jnp.abs(t / s) < _MACHEP)
        k = k + 1
        a = a * (x + k)
        b = b / w
        k = k + 1
    nan, inf = jnp.asarray(jnp.nan, x.dtype), jnp.asarray(jnp.inf, x.dtype)
    at_pole = (q <= 0) & (q == jnp.floor(q))
    s = jnp.where((q <= 0) & ~at_pole & (x != jnp.floor(x)), nan, s)
    s = jnp.where(at_pole, inf, s)
    return jnp.where(x == 1, inf, jnp.where(x < 1, nan, s))


def _trigamma(x):
    reflect = x < 0.5
    sin_pi_x = jnp.sin(np.pi * x)
    result = jnp.where(reflect, -(np.pi * np.pi) / (sin_pi_x * sin_pi_x), jnp.zeros_like(x))
    x = jnp.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return jnp.where(reflect, -result, result)


@register(aten.special_zeta.default)
def zeta(x, q):
    out = dtypes.float_type(x, q)
    return _zeta(to_array(x, upcast(out)), to_array(q, upcast(out))).astype(out)


@register(aten.polygamma.default)
def polygamma(n, x):
    out = dtypes.float_type(x)
    x = to_array(x, upcast(out))
    if n == 0:
        return lookup(aten.digamma.default).fn(x).astype(out)
    if n == 1:
        return _trigamma(x).astype(out)
    factorial = jnp.exp(jsp.gammaln(jnp.asarray(n + 1, x.dtype)))
    sign = 1 if n % 2 else -1
    return (sign * factorial * _zeta(jnp.asarray(n + 1, x.dtype), x)).astype(out)
