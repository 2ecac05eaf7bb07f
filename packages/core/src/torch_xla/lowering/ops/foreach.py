"""`_foreach_*` ops (optimizers with foreach=True): the per-tensor lowering mapped over lists.

Functionalization turns `_foreach_add_.List` into `_foreach_add.List`, which returns the
new list. Each entry below names the per-tensor function; list arguments are zipped,
everything else is shared by every element.
"""

from __future__ import annotations

import jax.numpy as jnp

from torch_xla.lowering.ops import elementwise as ew
from torch_xla.lowering.ops import factories, linalg, reductions
from torch_xla.lowering.ops._common import aten
from torch_xla.lowering.registry import lookup, register


def _for_each(fn, name):
    def lower(*args, **kwargs):
        n = next(len(a) for a in args if isinstance(a, (list, tuple)))

        def pick(a, i):
            return a[i] if isinstance(a, (list, tuple)) else a

        return [fn(*(pick(a, i) for a in args), **kwargs) for i in range(n)]

    lower.__qualname__ = f"foreach[{name}]"
    return lower


def _scalars_tensor(fn):
    """addcmul/addcdiv `.Tensor`: a 1-D tensor holds one scalar per list element."""

    def lower(x, t1, t2, scalars):
        rows = zip(x, t1, t2, strict=True)
        return [fn(a, b, c, value=scalars[i]) for i, (a, b, c) in enumerate(rows)]

    return lower


def _addc(fn):
    def per_element(x, t1, t2, value=1):
        return fn(x, t1, t2, value=value)

    return per_element


def _clone(x):
    return x


def _zero(x):
    return jnp.zeros_like(x)


def _max(x):
    return jnp.max(x)


def _norm(x, ord=2, dtype=None):
    return reductions.linalg_vector_norm(x, ord, dtype=dtype)


def _powsum(x, ord=2, dtype=None):
    return reductions.sum_(jnp.abs(x) ** ord, dtype=dtype)


def _pow_scalar_base(base, exponent):
    return ew.pow_(base, exponent)


def ew_lookup(op):
    """The per-tensor function already registered for `op` (elementwise is imported)."""
    return lookup(op).fn


_UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
          "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
          "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]
_BINARY = {"add": ew.add, "sub": ew.sub, "mul": ew.mul, "div": ew.div,
           "maximum": ew.maximum, "minimum": ew.minimum, "clamp_min": ew.clamp_min,
           "clamp_max": ew.clamp_max, "pow": ew.pow_}
_BINARY_OVERLOADS = ("List", "Scalar", "ScalarList", "Tensor")


def _register_all():
    for name in _UNARY:
        packet = getattr(aten, f"_foreach_{name}")
        register(packet.default)(_for_each(ew_lookup(getattr(aten, name).default), name))
    for name, fn in _BINARY.items():
        packet = getattr(aten, f"_foreach_{name}")
        overloads = [getattr(packet, o) for o in _BINARY_OVERLOADS if o in packet.overloads()]
        register(*overloads)(_for_each(fn, name))
    register(aten._foreach_pow.ScalarAndTensor)(_for_each(_pow_scalar_base, "pow"))
    for name, fn in {"addcmul": ew.addcmul, "addcdiv": ew.addcdiv}.items():
        packet = getattr(aten, f"_foreach_{name}")
        register(packet.Scalar, packet.ScalarList)(_for_each(_addc(fn), name))
        register(packet.Tensor)(_scalars_tensor(fn))
    lerp = aten._foreach_lerp
    register(*[getattr(lerp, o) for o in ("List", "Scalar", "ScalarList")
               if o in lerp.overloads()])(_for_each(ew.lerp, "lerp"))
    register(aten._foreach_copy.default)(_for_each(factories.copy, "copy"))
    register(aten._foreach_clone.default)(_for_each(_clone, "clone"))
    register(aten._foreach_zero.default)(_for_each(_zero, "zero"))
    register(aten._foreach_max.default)(_for_each(_max, "max"))
    register(aten._foreach_norm.Scalar)(_for_each(_norm, "norm"))
    register(getattr(getattr(aten, "_foreach_powsum", None), "Scalar", None))(
        _for_each(_powsum, "powsum"))
    register(aten._foreach_mm.default)(_for_each(linalg.mm, "mm"))


_register_all()
