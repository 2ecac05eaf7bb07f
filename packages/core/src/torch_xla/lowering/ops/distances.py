"""Pairwise distances: cdist and pdist with their backward ops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from torch_xla.lowering.ops._common import aten
from torch_xla.lowering.registry import register


@register(aten._cdist_forward.default)
def cdist_forward(x1, x2, p, compute_mode):
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    return _pnorm(diff, p)


def _pnorm(diff, p):
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum(a != 0, axis=-1).astype(diff.dtype)
    if p == float("inf"):
        return jnp.max(a, axis=-1)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    return jnp.sum(a**p, axis=-1) ** (1.0 / p)


@register(aten._pdist_forward.default)
def pdist_forward(x, p=2):
    n = x.shape[0]
    i, j = np.triu_indices(n, k=1)
    return _pnorm(x[i] - x[j], p)


@register(aten._pdist_backward.default)
def pdist_backward(grad, x, p, pdist):
    _, pullback = jax.vjp(lambda v: pdist_forward(v, p), x)
    return pullback(grad)[0]


@register(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, cdist):
    _, pullback = jax.vjp(lambda v: cdist_forward(v, x2, p, None), x1)
    return pullback(grad)[0]
