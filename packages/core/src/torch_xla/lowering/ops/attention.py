"""Scaled dot-product attention: the fused CPU kernels (on the xla device SDPA decomposes
to the math path; these serve programs that name the fused op)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from torch_xla.lowering import policy
from torch_xla.lowering.ops._common import aten, upcast
from torch_xla.lowering.registry import register


def _attention(q, k, v, is_causal, attn_mask, scale):
    """(output, logsumexp over keys) with torch's default scale 1/sqrt(head_dim)."""
    c = upcast(q.dtype)
    q, k, v = q.astype(c), k.astype(c), v.astype(c)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = jnp.einsum("...qd,...kd->...qk", q, k, precision=policy.precision()) * scale
    if is_causal:
        causal = jnp.tril(jnp.ones((q.shape[-2], k.shape[-2]), bool))
        scores = jnp.where(causal, scores, -jnp.inf)
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            scores = jnp.where(attn_mask, scores, -jnp.inf)
        else:
            scores = scores + attn_mask.astype(c)
    lse = jax.nn.logsumexp(scores, axis=-1)
    weights = jnp.exp(scores - lse[..., None])
    return jnp.einsum("...qk,...kd->...qd", weights, v, precision=policy.precision()), lse


@register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    out, lse = _attention(q, k, v, is_causal, attn_mask, scale)
    return out.astype(q.dtype), lse.astype(np.float32 if q.dtype in (
        np.dtype(jnp.bfloat16), np.dtype(np.float16)) else q.dtype)


@register(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def sdpa_flash_cpu_backward(grad, q, k, v, out, logsumexp, dropout_p, is_causal, *,
                            attn_mask=None, scale=None):
    _, pullback = jax.vjp(lambda a, b, c: _attention(a, b, c, is_causal, attn_mask, scale)[0],
                          q, k, v)
    grads = pullback(grad.astype(q.dtype))
    return tuple(g.astype(t.dtype) for g, t in zip(grads, (q, k, v), strict=True))
