"""Orthogonal polynomials `special_*_polynomial_*(x, n)`: torch's three-term recurrences,
with its special cases at |x| = 1 and its trigonometric forms for large n, elementwise
over a tensor `n` (the loop runs to the largest n)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, to_array, upcast
from torch_xla.lowering.registry import register


def _recur(x, n, p0, p1, step, first_k):
    """p_k by `r = step(k, p_{k-1}, p_k)`, looping k from first_k while k < the largest n's
    stopping point; returns the value where each element's n is reached."""
    out = jnp.where(n == 0, p0, p1)

    def body(state):
        k, p, q, out = state
        r = step(k.astype(x.dtype), p, q)
        done_at = k - first_k + 2  # the polynomial degree r corresponds to
        return k + 1, q, r, jnp.where(n == done_at, r, out)

    def more(state):
        k = state[0]
        return k - first_k + 2 <= jnp.max(n, initial=0)

    state = (jnp.asarray(first_k, np.int64), p0, p1, out)
    return lax.while_loop(more, body, state)[3]


def _inputs(x, n):
    out = dtypes.float_type(x, n)
    c = upcast(out)
    x = to_array(x, c)
    n = to_array(n, c)
    x, n = jnp.broadcast_arrays(x, n)
    return x, n.astype(np.int64), out


def _ones(x):
    return jnp.ones_like(x)


def _const(value, like):
    """A constant of `like`'s dtype (a bare Python float would be float64 under x64)."""
    return jnp.asarray(value, like.dtype)


def _chebyshev(kind):
    def lower(x, n):
        x, n, out = _inputs(x, n)
        two_x = x + x
        first = {"t": x, "u": two_x, "v": two_x - 1, "w": two_x + 1}[kind]
        value = _recur(x, n, _ones(x), first, lambda k, p, q: two_x * q - p, 2)
        nf = n.astype(x.dtype)
        odd = n % 2 == 1
        theta = jnp.arccos(jnp.clip(x, -1, 1))
        if kind == "t":
            at_one = jnp.where((x > 0) | ~odd, _const(1, x), _const(-1, x))
            trig = jnp.cos(nf * theta)
            big = 6
        elif kind == "u":
            at_one = jnp.where((x > 0) | ~odd, nf + 1, -(nf + 1))
            trig = jnp.where(jnp.sin(theta) != 0, jnp.sin((nf + 1) * theta) / jnp.sin(theta),
                             (nf + 1) * jnp.cos((nf + 1) * theta) / x)
            big = 8
        elif kind == "v":
            at_one = jnp.where(x > 0, _const(1, x), jnp.where(odd, -(nf + nf + 1), nf + nf + 1))
            trig = jnp.where(jnp.sin(theta / 2) != 1,
                             jnp.cos((nf + 0.5) * theta) / jnp.cos(theta / 2), at_one)
            big = 8
        else:
            at_one = jnp.where(x > 0, nf + nf + 1, jnp.where(odd, _const(-1, x), _const(1, x)))
            trig = jnp.where(jnp.cos(theta / 2) != 1,
                             jnp.sin((nf + 0.5) * theta) / jnp.sin(theta / 2), at_one)
            big = 8
        value = jnp.where((n > big) & (jnp.abs(x) < 1), trig, value)
        value = jnp.where(jnp.abs(x) == 1, at_one, value)
        return jnp.where(n < 0, 0, value).astype(out)

    lower.__qualname__ = f"chebyshev_{kind}"
    return lower


def _shifted(kind):
    base = _chebyshev(kind)

    def lower(x, n):
        x, n_int, out = _inputs(x, n)
        return base(x + x - 1, n_int).astype(out)

    lower.__qualname__ = f"shifted_chebyshev_{kind}"
    return lower


def _hermite_h(x, n):
    x, n, out = _inputs(x, n)
    two_x = x + x
    # k runs 2, 4, ... in torch's loop; degree d uses k = 2 (d - 1).
    value = _recur(x, n, _ones(x), two_x, lambda d, p, q: two_x * q - 2 * (d - 1) * p, 2)
    return jnp.where(n < 0, 0, value).astype(out)


def _hermite_he(x, n):
    x, n, out = _inputs(x, n)
    value = _recur(x, n, _ones(x), x, lambda d, p, q: x * q - (d - 1) * p, 2)
    return jnp.where(n < 0, 0, value).astype(out)


def _laguerre_l(x, n):
    x, n, out = _inputs(x, n)
    value = _recur(x, n, _ones(x), 1 - x,
                   lambda d, p, q: ((2 * (d - 1) + (1 - x)) * q - (d - 1) * p) / d, 2)
    value = jnp.where(x == 0, _const(1, x), value)
    return jnp.where(n < 0, 0, value).astype(out)


def _legendre_p(x, n):
    x, n, out = _inputs(x, n)
    value = _recur(x, n, _ones(x), x,
                   lambda d, p, q: ((2 * (d - 1) + 1) * x * q - (d - 1) * p) / d, 2)
    at_one = jnp.where((x > 0) | (n % 2 == 0), _const(1, x), _const(-1, x))
    value = jnp.where(jnp.abs(x) == 1, at_one, value)
    return jnp.where(n < 0, 0, value).astype(out)


def _overloads(name):
    packet = getattr(aten, f"special_{name}")
    return [getattr(packet, o) for o in ("default", "x_scalar", "n_scalar")
            if o in packet.overloads()]


for _kind in "tuvw":
    register(*_overloads(f"chebyshev_polynomial_{_kind}"))(_chebyshev(_kind))
    register(*_overloads(f"shifted_chebyshev_polynomial_{_kind}"))(_shifted(_kind))
register(*_overloads("hermite_polynomial_h"))(_hermite_h)
register(*_overloads("hermite_polynomial_he"))(_hermite_he)
register(*_overloads("laguerre_polynomial_l"))(_laguerre_l)
register(*_overloads("legendre_polynomial_p"))(_legendre_p)
