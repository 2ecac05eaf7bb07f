"""Padding: constant, reflection, replication and circular, with the backward ops of
the non-constant modes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from torch_xla.lowering.ops._common import aten, int_list
from torch_xla.lowering.registry import register


@register(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    pad = int_list(pad)
    config = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        config[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value, x.dtype), config)


def _pad_mode(x, pad, mode):
    pad = int_list(pad)
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    # Negative widths crop (after padding the other side, as torch does).
    padded = jnp.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi in widths], mode=mode)
    crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in
                 zip(widths, padded.shape, strict=False))
    return padded[crop]


for _ops, _mode in [
    ((aten.reflection_pad1d.default, aten.reflection_pad2d.default,
      aten.reflection_pad3d.default), "reflect"),
    ((aten.replication_pad1d.default, aten.replication_pad2d.default,
      aten.replication_pad3d.default), "edge"),
    ((aten._pad_circular.default,), "wrap"),
]:
    def _lower(x, padding, _mode=_mode):
        return _pad_mode(x, padding, _mode)

    _lower.__qualname__ = f"pad[{_mode}]"
    register(*_ops)(_lower)


def _pad_backward(mode):
    def lower(grad, x, padding):
        _, pullback = jax.vjp(lambda v: _pad_mode(v, padding, mode), x)
        return pullback(grad)[0]

    lower.__qualname__ = f"pad_backward[{mode}]"
    return lower


register(aten.reflection_pad1d_backward.default, aten.reflection_pad2d_backward.default,
         aten.reflection_pad3d_backward.default)(_pad_backward("reflect"))
register(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
         aten.replication_pad3d_backward.default)(_pad_backward("edge"))
