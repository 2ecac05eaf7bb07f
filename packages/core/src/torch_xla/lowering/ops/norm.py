"""Batch, layer and group normalisation with their backward ops (batch norm's running
statistics included)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering.ops._common import aten, upcast
from torch_xla.lowering.registry import register


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


def _batch_stats(x, eps):
    axes = (0, *range(2, x.ndim))
    mean = jnp.mean(x, axis=axes)
    var = jnp.var(x, axis=axes)
    return mean, var, lax.rsqrt(var + eps)


def _normalize(x, mean, invstd, weight, bias):
    shape = _channel_shape(x)
    out = (x - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """(out, save_mean, save_invstd, new_running_mean, new_running_var)."""
    out_dtype = x.dtype
    c = upcast(x.dtype)
    xc = x.astype(c)
    if training:
        mean, var, invstd = _batch_stats(xc, eps)
        n = x.size // x.shape[1]
        unbiased = var * (n / max(n - 1, 1))
        new_mean = running_mean if running_mean is None else (
            (1 - momentum) * running_mean + momentum * mean).astype(running_mean.dtype)
        new_var = running_var if running_var is None else (
            (1 - momentum) * running_var + momentum * unbiased).astype(running_var.dtype)
    else:
        mean = running_mean.astype(c)
        invstd = lax.rsqrt(running_var.astype(c) + eps)
        new_mean, new_var = running_mean, running_var
    w = None if weight is None else weight.astype(c)
    b = None if bias is None else bias.astype(c)
    out = _normalize(xc, mean, invstd, w, b).astype(out_dtype)
    # In inference mode torch's CPU kernel returns empty save_mean/save_invstd but
    # its meta kernel (which the engine trusts for shapes) returns (C,) ones; the
    # values are unused either way, so follow the meta kernel.
    return out, mean, invstd, new_mean, new_var


@register(aten.native_batch_norm.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)[:3]


@register(aten._native_batch_norm_legit.default)
def native_batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum,
                            eps):
    return native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum,
                             eps)


@register(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(x, weight, bias, training, momentum, eps):
    return _batch_norm(x, weight, bias, None, None, True, momentum, eps)[:3]


@register(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var, momentum,
                                        eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@register(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(x, weight, bias, running_mean, running_var, training,
                                       momentum, eps):
    return _batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


@register(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(x, weight, bias, running_mean, running_var, momentum,
                                      eps):
    out, mean, invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, mean, invstd, jnp.zeros((0,), np.uint8), new_mean, new_var


@register(aten._batch_norm_no_update.default)
def batch_norm_no_update(x, weight, bias, running_mean, running_var, momentum, eps):
    training = running_mean is None
    out, mean, invstd, _, _ = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps)
    return out, mean, invstd, jnp.zeros((0,), np.uint8)


def _batch_norm_grads(grad, x, weight, mean, invstd):
    c = upcast(x.dtype)
    g, xc = grad.astype(c), x.astype(c)
    shape = _channel_shape(x)
    axes = (0, *range(2, x.ndim))
    n = x.size // x.shape[1]
    w = jnp.ones(x.shape[1], c) if weight is None else weight.astype(c)
    xhat = (xc - mean.reshape(shape)) * invstd.reshape(shape)
    grad_bias = jnp.sum(g, axis=axes)
    grad_weight = jnp.sum(g * xhat, axis=axes)
    return g, xhat, grad_weight, grad_bias, w, n, shape


@register(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean,
                               save_invstd, train, eps, output_mask):
    c = upcast(x.dtype)
    if train:
        mean, invstd = save_mean.astype(c), save_invstd.astype(c)
    else:
        mean, invstd = running_mean.astype(c), lax.rsqrt(running_var.astype(c) + eps)
    g, xhat, grad_weight, grad_bias, w, n, shape = _batch_norm_grads(
        grad, x, weight, mean, invstd)
    scale = (w * invstd).reshape(shape)
    if train:
        grad_input = scale * (g - (grad_bias.reshape(shape) + xhat * grad_weight.reshape(
            shape)) / n)
    else:
        grad_input = scale * g
    # torch's meta kernel, which gives the node its outputs, always makes the input's
    # gradient (the CPU kernel leaves it undefined when the mask says so: autograd then
    # drops it, and XLA drops its computation), and the weight's and bias's as the mask asks
    dtype = x.dtype if weight is None else weight.dtype
    grads = (grad_weight.astype(dtype), grad_bias.astype(dtype))
    return (grad_input.astype(x.dtype),
            *(r if wanted else None for r, wanted in zip(grads, output_mask[1:], strict=True)))


@register(aten.batch_norm_backward.default)
def batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean, save_var,
                        update, eps, output_mask, reserve):
    return native_batch_norm_backward(grad, x, weight, running_mean, running_var, save_mean,
                                      save_var, update, eps, output_mask)


def _layer_norm(x, normalized_shape, weight, bias, eps):
    c = upcast(x.dtype)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xc = x.astype(c)
    mean = jnp.mean(xc, axis=axes, keepdims=True)
    rstd = lax.rsqrt(jnp.var(xc, axis=axes, keepdims=True) + eps)
    out = (xc - mean) * rstd
    if weight is not None:
        out = out * weight.astype(c)
    if bias is not None:
        out = out + bias.astype(c)
    return out, mean, rstd


@register(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    out, mean, rstd = _layer_norm(x, normalized_shape, weight, bias, eps)
    return out.astype(x.dtype), mean, rstd


@register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    c = upcast(x.dtype)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    outer = tuple(range(x.ndim - len(normalized_shape)))
    g, xc = grad.astype(c), x.astype(c)
    xhat = (xc - mean.astype(c)) * rstd.astype(c)
    gw = g if weight is None else g * weight.astype(c)
    n = int(np.prod(normalized_shape))
    grad_input = rstd * (gw - jnp.mean(gw, axis=axes, keepdims=True)
                         - xhat * jnp.sum(gw * xhat, axis=axes, keepdims=True) / n)
    grad_weight = None if weight is None else jnp.sum(g * xhat, axis=outer).astype(weight.dtype)
    grad_bias = None if bias is None else jnp.sum(g, axis=outer).astype(bias.dtype)
    results = (grad_input.astype(x.dtype), grad_weight, grad_bias)
    return tuple(r if wanted else None for r, wanted in zip(results, output_mask, strict=False))


def _group_norm(x, weight, bias, n, channels, hw, groups, eps):
    c = upcast(x.dtype)
    grouped = x.astype(c).reshape(n, groups, -1)
    mean = jnp.mean(grouped, axis=-1)
    rstd = lax.rsqrt(jnp.var(grouped, axis=-1) + eps)
    out = ((grouped - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    shape = _channel_shape(x)
    if weight is not None:
        out = out * weight.astype(c).reshape(shape)
    if bias is not None:
        out = out + bias.astype(c).reshape(shape)
    return out, mean, rstd


@register(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group, eps):
    out, mean, rstd = _group_norm(x, weight, bias, N, C, HxW, group, eps)
    return out.astype(x.dtype), mean, rstd


@register(aten.native_group_norm_backward.default)
def native_group_norm_backward(grad, x, mean, rstd, weight, N, C, HxW, group, output_mask):
    c = upcast(x.dtype)
    shape = (N, group, C // group, -1)
    g, xc = grad.astype(c).reshape(shape), x.astype(c).reshape(shape)
    m, r = mean.astype(c)[..., None, None], rstd.astype(c)[..., None, None]
    xhat = (xc - m) * r
    w = jnp.ones((C,), c) if weight is None else weight.astype(c)
    gy = g * w.reshape(1, group, C // group, 1)
    axes = (2, 3)
    grad_input = r * (gy - jnp.mean(gy, axis=axes, keepdims=True)
                      - xhat * jnp.mean(gy * xhat, axis=axes, keepdims=True))
    grad_weight = jnp.sum(g * xhat, axis=(0, 3)).reshape(C)
    grad_bias = jnp.sum(g, axis=(0, 3)).reshape(C)
    results = (grad_input.reshape(x.shape).astype(x.dtype),
               grad_weight.astype(x.dtype if weight is None else weight.dtype),
               grad_bias.astype(x.dtype if weight is None else weight.dtype))
    return tuple(r_ if wanted else None for r_, wanted in zip(results, output_mask, strict=False))


@register(aten.batch_norm_update_stats.default)
def batch_norm_update_stats(x, running_mean, running_var, momentum):
    mean, var, _ = _batch_stats(x.astype(upcast(x.dtype)), 0.0)
    n = x.size // x.shape[1]
    unbiased = var * (n / max(n - 1, 1))
    new_mean = None if running_mean is None else (
        (1 - momentum) * running_mean + momentum * mean).astype(running_mean.dtype)
    new_var = None if running_var is None else (
        (1 - momentum) * running_var + momentum * unbiased).astype(running_var.dtype)
    return new_mean, new_var
