"""Neural-network ops: convolution, normalisation, softmax, losses, pooling, padding,
resampling. Backward ops are the VJP of the forward formula unless torch's gradient is
defined differently (pooling indices, losses with ignore_index)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, canon_dim, expand_param, int_list, upcast
from torch_xla.lowering.registry import register

HIGHEST = lax.Precision.HIGHEST


# ---------------------------------------------------------------------------------------
# Convolution.


def _conv_dims(n: int) -> lax.ConvDimensionNumbers:
    spatial = "DHW"[-n:]
    specs = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    return lax.conv_dimension_numbers((1, 1) + (1,) * n, (1, 1) + (1,) * n, specs)


def _transposed_weight(weight, groups: int):
    """(Cin, Cout/g, *k) -> (Cout, Cin/g, *k), spatially flipped: a transposed convolution
    is a convolution of the dilated input with this kernel."""
    cin, cout_g, *k = weight.shape
    w = weight.reshape(groups, cin // groups, cout_g, *k)
    w = jnp.swapaxes(w, 1, 2).reshape(groups * cout_g, cin // groups, *k)
    return jnp.flip(w, axis=tuple(range(2, 2 + len(k))))


def _conv(x, weight, stride, padding, dilation, transposed, output_padding, groups):
    n = weight.ndim - 2
    stride, padding, dilation = (expand_param(p, n) for p in (stride, padding, dilation))
    if transposed:
        output_padding = expand_param(output_padding, n)
        k = weight.shape[2:]
        pads = [
            (d * (kk - 1) - p, d * (kk - 1) - p + op)
            for kk, p, d, op in zip(k, padding, dilation, output_padding, strict=False)
        ]
        return lax.conv_general_dilated(
            x, _transposed_weight(weight, groups), (1,) * n, pads, lhs_dilation=stride,
            rhs_dilation=dilation, dimension_numbers=_conv_dims(n),
            feature_group_count=groups, precision=HIGHEST,
        )
    return lax.conv_general_dilated(
        x, weight, stride, [(p, p) for p in padding], rhs_dilation=dilation,
        dimension_numbers=_conv_dims(n), feature_group_count=groups, precision=HIGHEST,
    )


def _unbatched(fn, x, *rest, spatial: int):
    if x.ndim == spatial + 1:
        return fn(x[None], *rest)[0]
    return fn(x, *rest)


@register(aten.convolution.default, aten._convolution.default)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
                *extra):
    out_dtype = dtypes.result_type(x, weight)
    compute = upcast(out_dtype)
    n = weight.ndim - 2
    out = _unbatched(
        lambda v: _conv(v, weight.astype(compute), stride, padding, dilation, transposed,
                        output_padding, groups),
        x.astype(compute), spatial=n,
    )
    if bias is not None:
        out = out + bias.astype(compute).reshape((-1,) + (1,) * n)
    return out.astype(out_dtype)


@register(aten.convolution_backward.default)
def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    compute = upcast(x.dtype)

    def forward(v, w):
        return _conv(v, w, stride, padding, dilation, transposed, output_padding, groups)

    _, pullback = jax.vjp(forward, x.astype(compute), weight.astype(compute))
    grad_input, grad_weight = pullback(grad.astype(compute))
    grad_bias = jnp.sum(grad.astype(compute), axis=(0, *range(2, grad.ndim)))
    results = (grad_input.astype(x.dtype), grad_weight.astype(weight.dtype),
               grad_bias.astype(grad.dtype))
    return tuple(r if wanted else None for r, wanted in zip(results, output_mask, strict=False))


# ---------------------------------------------------------------------------------------
# Normalisation.


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
    results = (grad_input.astype(x.dtype),
               None if weight is None else grad_weight.astype(weight.dtype),
               None if weight is None else grad_bias.astype(weight.dtype))
    return tuple(r if wanted else None for r, wanted in zip(results, output_mask, strict=False))


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


# ---------------------------------------------------------------------------------------
# Softmax.


@register(aten._softmax.default)
def softmax(x, dim, half_to_float):
    out = np.float32 if half_to_float else x.dtype
    if x.ndim == 0:
        return jnp.ones((), out)
    return jax.nn.softmax(x.astype(upcast(x.dtype)), axis=canon_dim(dim, x.ndim)).astype(out)


@register(aten._safe_softmax.default)
def safe_softmax(x, dim, dtype=None):
    if dtype is not None:
        x = x.astype(dtypes.to_jax(dtype))
    axis = canon_dim(dim, x.ndim)
    out = softmax(x, axis, False)
    # Rows that are all -inf give 0 instead of NaN.
    return jnp.where(jnp.all(x == -jnp.inf, axis=axis, keepdims=True), 0, out).astype(out.dtype)


@register(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float):
    out = np.float32 if half_to_float else x.dtype
    if x.ndim == 0:
        return jnp.zeros((), out)
    return jax.nn.log_softmax(x.astype(upcast(x.dtype)), axis=canon_dim(dim, x.ndim)).astype(out)


@register(aten._softmax_backward_data.default)
def softmax_backward_data(grad, output, dim, input_dtype):
    c = upcast(grad.dtype)
    g, y = grad.astype(c), output.astype(c)
    axis = canon_dim(dim, y.ndim)
    out = y * (g - jnp.sum(g * y, axis=axis, keepdims=True)) if y.ndim else g * 0
    return out.astype(dtypes.to_jax(input_dtype))


@register(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad, output, dim, input_dtype):
    c = upcast(grad.dtype)
    g, y = grad.astype(c), output.astype(c)
    axis = canon_dim(dim, y.ndim)
    out = g - jnp.exp(y) * jnp.sum(g, axis=axis, keepdims=True) if y.ndim else g * 0
    return out.astype(dtypes.to_jax(input_dtype))


# ---------------------------------------------------------------------------------------
# Losses.

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll(x, target, weight, reduction, ignore_index):
    """nll_loss over class dim 1 (or 0 for 1-D input): (loss, total_weight)."""
    class_axis = 0 if x.ndim == 1 else 1
    safe_target = jnp.where(target == ignore_index, 0, target)
    picked = jnp.take_along_axis(x, jnp.expand_dims(safe_target, class_axis), class_axis)
    picked = jnp.squeeze(picked, class_axis)
    w = jnp.ones((), x.dtype) if weight is None else weight[safe_target]
    w = jnp.where(target == ignore_index, jnp.zeros((), x.dtype), w)
    losses = -picked * w
    total_weight = jnp.sum(jnp.broadcast_to(w, losses.shape))
    mode = _REDUCTIONS[reduction]
    if mode == "none":
        # torch leaves total_weight at 0 for batched input.
        return losses, total_weight if x.ndim == 1 else jnp.zeros((), x.dtype)
    if mode == "sum":
        return jnp.sum(losses), total_weight
    return jnp.sum(losses) / total_weight, total_weight


@register(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    return _nll(x, target, weight, reduction, ignore_index)


@register(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(grad, x, target, weight, reduction, ignore_index, total_weight):
    class_axis = 0 if x.ndim == 1 else 1
    safe_target = jnp.where(target == ignore_index, 0, target)
    w = jnp.ones((), x.dtype) if weight is None else weight[safe_target]
    w = jnp.where(target == ignore_index, jnp.zeros((), x.dtype), w)
    mode = _REDUCTIONS[reduction]
    scale = -w * (grad if mode == "none" else grad.reshape(()))
    if mode == "mean":
        scale = scale / total_weight
    onehot = jax.nn.one_hot(safe_target, x.shape[class_axis], dtype=x.dtype, axis=class_axis)
    return onehot * jnp.expand_dims(scale, class_axis)


def _reduce_loss(losses, reduction):
    mode = _REDUCTIONS[reduction]
    if mode == "none":
        return losses
    return jnp.sum(losses) if mode == "sum" else jnp.mean(losses)


@register(aten.mse_loss.default)
def mse_loss(x, target, reduction=1):
    return _reduce_loss((x - target) ** 2, reduction)


@register(aten.mse_loss_backward.default)
def mse_loss_backward(grad, x, target, reduction):
    scale = 2 / x.size if _REDUCTIONS[reduction] == "mean" else 2
    return (scale * (x - target) * grad).astype(x.dtype)


def _smooth_l1(x, target, beta):
    diff = jnp.abs(x - target)
    if beta == 0:
        return diff
    return jnp.where(diff < beta, 0.5 * diff**2 / beta, diff - 0.5 * beta)


@register(aten.smooth_l1_loss.default)
def smooth_l1_loss(x, target, reduction=1, beta=1.0):
    return _reduce_loss(_smooth_l1(x, target, beta), reduction).astype(x.dtype)


@register(aten.smooth_l1_loss_backward.default)
def smooth_l1_loss_backward(grad, x, target, reduction, beta):
    _, pullback = jax.vjp(lambda v: _reduce_loss(_smooth_l1(v, target, beta), reduction), x)
    return pullback(grad)[0]


@register(aten.huber_loss.default)
def huber_loss(x, target, reduction=1, delta=1.0):
    diff = jnp.abs(x - target)
    losses = jnp.where(diff < delta, 0.5 * diff**2, delta * (diff - 0.5 * delta))
    return _reduce_loss(losses, reduction).astype(x.dtype)


def _bce(x, target, weight):
    log_x = jnp.maximum(jnp.log(x), -100)
    log_1mx = jnp.maximum(jnp.log1p(-x), -100)
    losses = -(target * log_x + (1 - target) * log_1mx)
    return losses if weight is None else losses * weight


@register(aten.binary_cross_entropy.default)
def binary_cross_entropy(x, target, weight=None, reduction=1):
    return _reduce_loss(_bce(x, target, weight), reduction)


@register(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(grad, x, target, weight=None, reduction=1):
    eps = 1e-12
    out = grad * (x - target) / jnp.maximum((1 - x) * x, eps)
    if weight is not None:
        out = out * weight
    if _REDUCTIONS[reduction] == "mean":
        out = out / x.size
    return out.astype(x.dtype)


@register(aten.binary_cross_entropy_with_logits.default)
def binary_cross_entropy_with_logits(x, target, weight=None, pos_weight=None, reduction=1):
    log_sig = jax.nn.log_sigmoid(x)
    log_sig_neg = jax.nn.log_sigmoid(-x)
    if pos_weight is not None:
        losses = -(pos_weight * target * log_sig + (1 - target) * log_sig_neg)
    else:
        losses = -(target * log_sig + (1 - target) * log_sig_neg)
    if weight is not None:
        losses = losses * weight
    return _reduce_loss(losses, reduction)


# ---------------------------------------------------------------------------------------
# Pooling.


def _pool_geometry(x, kernel, stride, padding, dilation, ceil_mode, n):
    kernel = expand_param(kernel, n)
    stride = expand_param(stride, n) if stride else kernel
    padding = expand_param(padding, n)
    dilation = expand_param(dilation, n)
    sizes = x.shape[-n:]
    outs = []
    for size, k, s, p, d in zip(sizes, kernel, stride, padding, dilation, strict=False):
        span = size + 2 * p - d * (k - 1) - 1
        out = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1  # the last window must start inside the input or left padding
        outs.append(out)
    return kernel, stride, padding, dilation, outs


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, n):
    kernel, stride, padding, dilation, outs = _pool_geometry(
        x, kernel_size, stride, padding, dilation, ceil_mode, n)
    batch = x.shape[:-n]
    sizes = x.shape[-n:]
    flat_index = jnp.arange(int(np.prod(sizes)), dtype=np.int64).reshape(sizes)
    flat_index = jnp.broadcast_to(flat_index, x.shape)
    pads = [(0, 0)] * len(batch)
    for size, k, s, p, d, o in zip(sizes, kernel, stride, padding, dilation, outs, strict=False):
        high = max((o - 1) * s + d * (k - 1) + 1 - size - p, 0)
        pads.append((p, high))
    low = jnp.asarray(-jnp.inf if dtypes.is_floating(x.dtype) else (
        jnp.iinfo(x.dtype).min if x.dtype != np.bool_ else False), x.dtype)
    xp = jnp.pad(x, pads, constant_values=low)
    ip = jnp.pad(flat_index, pads, constant_values=-1)
    best = best_index = None
    # Visit kernel offsets in order; a later element wins only if strictly greater or NaN,
    # which gives torch's first-max index.
    for offset in np.ndindex(*kernel):
        starts = [0] * len(batch) + [o * d for o, d in zip(offset, dilation, strict=False)]
        limits = list(batch) + [st + (o - 1) * s + 1 for st, o, s in
                                zip(starts[len(batch):], outs, stride, strict=False)]
        strides = [1] * len(batch) + list(stride)
        v = lax.slice(xp, starts, limits, strides)
        i = lax.slice(ip, starts, limits, strides)
        if best is None:
            best, best_index = v, i
            continue
        take = v > best
        if dtypes.is_floating(x.dtype):
            take = take | (jnp.isnan(v) & ~jnp.isnan(best))
        best = jnp.where(take, v, best)
        best_index = jnp.where(take, i, best_index)
    return best, best_index


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 2)


@register(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 3)


@register(aten.max_pool2d.default)
def max_pool2d(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 2)[0]


def _max_pool_backward(grad, x, indices, n):
    """Scatter-add each output gradient to the input element its index names."""
    batch = x.shape[:-n]
    spatial = int(np.prod(x.shape[-n:]))
    g = grad.reshape(-1, int(np.prod(grad.shape[-n:])))
    idx = indices.reshape(g.shape)
    rows = jnp.arange(g.shape[0])[:, None]
    out = jnp.zeros((g.shape[0], spatial), grad.dtype).at[rows, idx].add(g)
    return out.reshape(batch + x.shape[-n:])


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(grad, x, indices, 2)


@register(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    return _max_pool_backward(grad, x, indices, 3)


@register(aten.max_unpool2d.default, aten.max_unpool3d.default)
def max_unpool(x, indices, output_size, *args):
    n = len(output_size)
    batch = x.shape[:-n]
    g = x.reshape(-1, int(np.prod(x.shape[-n:])))
    rows = jnp.arange(g.shape[0])[:, None]
    out = jnp.zeros((g.shape[0], int(np.prod(output_size))), x.dtype)
    out = out.at[rows, indices.reshape(g.shape)].set(g)
    return out.reshape(batch + tuple(output_size))


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
              n):
    kernel, stride, padding, _, outs = _pool_geometry(
        x, kernel_size, stride, padding, 1, ceil_mode, n)
    c = upcast(x.dtype)
    batch = len(x.shape) - n
    sizes = x.shape[-n:]
    pads = [(0, 0)] * batch
    extra = []
    for size, k, s, p, o in zip(sizes, kernel, stride, padding, outs, strict=False):
        high = max((o - 1) * s + k - size - p, p)
        pads.append((p, high))
        extra.append(high - p)
    window = (1,) * batch + tuple(kernel)
    strides = (1,) * batch + tuple(stride)
    total = lax.reduce_window(jnp.pad(x.astype(c), pads), np.array(0, c), lax.add, window,
                              strides, "VALID")
    if divisor_override:
        return (total / divisor_override).astype(x.dtype)
    # Windows count padding cells (if count_include_pad) but never the ceil_mode overhang.
    ones = jnp.ones(sizes, c)
    inner = [(p, p) if count_include_pad else (0, 0) for p in padding]
    ones = jnp.pad(ones, inner, constant_values=1)
    outer = [(0, e) if count_include_pad else (p, p + e)
             for p, e in zip(padding, extra, strict=True)]
    ones = jnp.pad(ones, outer)
    count = lax.reduce_window(ones, np.array(0, c), lax.add, tuple(kernel), tuple(stride),
                              "VALID")
    return (total / count).astype(x.dtype)


@register(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 2)


@register(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 3)


@register(aten.avg_pool1d.default)
def avg_pool1d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def _avg_pool_backward(grad, x, n, *params):
    c = upcast(x.dtype)
    _, pullback = jax.vjp(lambda v: _avg_pool(v, *params, n), x.astype(c))
    return pullback(grad.astype(c))[0].astype(x.dtype)


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad, x, 2, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


@register(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    return _avg_pool_backward(grad, x, 3, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override)


def _adaptive_matrix(size: int, out: int, dtype) -> np.ndarray:
    """(out, size) averaging matrix: row i averages [floor(i*size/out), ceil((i+1)*size/out))."""
    m = np.zeros((out, size), dtype=np.float64)
    for i in range(out):
        start = (i * size) // out
        end = -((-(i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m.astype(dtype)


def _adaptive_avg_pool(x, output_size, n):
    c = upcast(x.dtype)
    out = x.astype(c)
    for axis, o in zip(range(x.ndim - n, x.ndim), int_list(output_size), strict=False):
        m = _adaptive_matrix(x.shape[axis], o, c)
        out = jnp.moveaxis(jnp.tensordot(out, m, axes=[[axis], [1]], precision=HIGHEST), -1,
                           axis)
    return out.astype(x.dtype)


@register(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    return _adaptive_avg_pool(x, output_size, 2)


@register(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    return _adaptive_avg_pool(x, output_size, 3)


@register(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    _, pullback = jax.vjp(lambda v: _adaptive_avg_pool(v, grad.shape[-2:], 2), x)
    return pullback(grad)[0]


@register(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad, x):
    _, pullback = jax.vjp(lambda v: _adaptive_avg_pool(v, grad.shape[-3:], 3), x)
    return pullback(grad)[0]


def _adaptive_max_pool(x, output_size, n):
    sizes, outs = x.shape[-n:], int_list(output_size)
    flat_index = jnp.arange(int(np.prod(sizes)), dtype=np.int64).reshape(sizes)
    values, indices = x, jnp.broadcast_to(flat_index, x.shape)
    # One axis at a time: gather each window (padded to the longest) and take its max.
    for axis, size, out in zip(range(x.ndim - n, x.ndim), sizes, outs, strict=False):
        starts = [(i * size) // out for i in range(out)]
        ends = [-((-(i + 1) * size) // out) for i in range(out)]
        width = max(e - s for s, e in zip(starts, ends, strict=False))
        window = np.array([[min(s + j, e - 1) for j in range(width)] for s, e in
                           zip(starts, ends, strict=False)])
        v = jnp.take(values, window, axis=axis)  # (..., out, width, ...)
        i = jnp.take(indices, window, axis=axis)
        pick = jnp.argmax(v, axis=axis + 1, keepdims=True)
        values = jnp.squeeze(jnp.take_along_axis(v, pick, axis=axis + 1), axis + 1)
        indices = jnp.squeeze(jnp.take_along_axis(i, pick, axis=axis + 1), axis + 1)
    return values, indices


@register(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    return _adaptive_max_pool(x, output_size, 2)


@register(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(x, output_size):
    return _adaptive_max_pool(x, output_size, 3)


@register(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad, x, indices):
    return _max_pool_backward(grad, x, indices, 2)


@register(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(grad, x, indices):
    return _max_pool_backward(grad, x, indices, 3)


# ---------------------------------------------------------------------------------------
# Padding.


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


# ---------------------------------------------------------------------------------------
# Resampling.


def _output_size(x, output_size, scale_factors, n):
    if output_size is not None:
        return int_list(output_size)
    return [int(math.floor(s * f)) for s, f in zip(x.shape[-n:], scale_factors, strict=False)]


def _source_scale(in_size, out_size, align_corners, scale):
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else in_size / out_size


def _nearest_index(in_size, out_size, scale, exact=False):
    s = np.float32(_source_scale(in_size, out_size, False, scale))
    dst = np.arange(out_size, dtype=np.float32)
    src = np.floor((dst + 0.5) * s) if exact else np.floor(dst * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _upsample_nearest(x, output_size, scales, n, exact=False):
    outs = int_list(output_size)
    scales = list(scales) if scales else [None] * n
    for axis, o, s in zip(range(x.ndim - n, x.ndim), outs, scales, strict=False):
        x = jnp.take(x, _nearest_index(x.shape[axis], o, s, exact), axis=axis)
    return x


def _linear_matrix(in_size, out_size, align_corners, scale, dtype):
    ratio = _source_scale(in_size, out_size, align_corners, scale)
    dst = np.arange(out_size, dtype=np.float64)
    if align_corners:
        src = dst * ratio
    else:
        src = np.maximum((dst + 0.5) * np.float32(ratio) - 0.5, 0)
    lo = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    hi = np.minimum(lo + 1, in_size - 1)
    frac = src - lo
    m = np.zeros((out_size, in_size))
    m[np.arange(out_size), lo] += 1 - frac
    m[np.arange(out_size), hi] += frac
    return m.astype(dtype)


def _upsample_linear(x, output_size, align_corners, scales, n):
    c = upcast(x.dtype)
    out = x.astype(c)
    scales = list(scales) if scales else [None] * n
    for axis, o, s in zip(range(x.ndim - n, x.ndim), int_list(output_size), scales, strict=False):
        m = _linear_matrix(x.shape[axis], o, align_corners, s, c)
        out = jnp.moveaxis(jnp.tensordot(out, m, axes=[[axis], [1]], precision=HIGHEST), -1,
                           axis)
    return out.astype(x.dtype)


@register(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec,
          aten.upsample_nearest3d.vec)
def upsample_nearest_vec(x, output_size, scale_factors):
    n = x.ndim - 2
    return _upsample_nearest(x, _output_size(x, output_size, scale_factors, n), scale_factors, n)


@register(aten._upsample_nearest_exact1d.vec, aten._upsample_nearest_exact2d.vec,
          aten._upsample_nearest_exact3d.vec)
def upsample_nearest_exact_vec(x, output_size, scale_factors):
    n = x.ndim - 2
    size = _output_size(x, output_size, scale_factors, n)
    return _upsample_nearest(x, size, scale_factors, n, exact=True)


@register(aten.upsample_nearest1d.default, aten.upsample_nearest2d.default,
          aten.upsample_nearest3d.default)
def upsample_nearest(x, output_size, *scales):
    return _upsample_nearest(x, output_size, _given_scales(scales), len(output_size))


def _given_scales(scales):
    scales = [s for s in scales]
    return scales if any(s is not None for s in scales) else None


@register(aten.upsample_bilinear2d.vec, aten.upsample_linear1d.vec,
          aten.upsample_trilinear3d.vec)
def upsample_linear_vec(x, output_size, align_corners, scale_factors):
    n = x.ndim - 2
    size = _output_size(x, output_size, scale_factors, n)
    return _upsample_linear(x, size, align_corners, scale_factors, n)


@register(aten.upsample_bilinear2d.default, aten.upsample_linear1d.default,
          aten.upsample_trilinear3d.default)
def upsample_linear(x, output_size, align_corners, *scales):
    return _upsample_linear(x, output_size, align_corners, _given_scales(scales),
                            len(output_size))


@register(aten.upsample_nearest2d_backward.default, aten.upsample_nearest1d_backward.default,
          aten.upsample_nearest3d_backward.default)
def upsample_nearest_backward(grad, output_size, input_size, *scales):
    x = jnp.zeros(tuple(input_size), grad.dtype)
    _, pullback = jax.vjp(
        lambda v: _upsample_nearest(v, output_size, _given_scales(scales), len(output_size)), x)
    return pullback(grad)[0]


@register(aten.upsample_bilinear2d_backward.default, aten.upsample_linear1d_backward.default,
          aten.upsample_trilinear3d_backward.default)
def upsample_linear_backward(grad, output_size, input_size, align_corners, *scales):
    x = jnp.zeros(tuple(input_size), grad.dtype)
    _, pullback = jax.vjp(lambda v: _upsample_linear(
        v, output_size, align_corners, _given_scales(scales), len(output_size)), x)
    return pullback(grad)[0]


def _cubic_matrix(in_size, out_size, align_corners, scale):
    """Bicubic (A = -0.75) taps as a matrix; torch clamps the taps at the borders."""
    ratio = np.float32(_source_scale(in_size, out_size, align_corners, scale))
    dst = np.arange(out_size, dtype=np.float32)
    src = dst * ratio if align_corners else (dst + np.float32(0.5)) * ratio - np.float32(0.5)
    low = np.floor(src)
    m = np.zeros((out_size, in_size))
    for k, w in enumerate(_cubic_weights((src - low).astype(np.float64))):
        taps = np.clip(low.astype(np.int64) - 1 + k, 0, in_size - 1)
        np.add.at(m, (np.arange(out_size), taps), w)
    return m


def _triangle(x):
    return np.maximum(1 - np.abs(x), 0)


def _keys_cubic(x):
    x = np.abs(x)
    near, far = _cubic_weights(x, a=-0.5)[1], _cubic_weights(x - 1, a=-0.5)[0]
    return np.where(x < 1, near, np.where(x < 2, far, 0))


def _antialias_matrix(filter_fn, interp_size):
    """torch's anti-aliased resampling: the filter widened by the downscale factor and each
    row normalised to sum to one (`_compute_weights_aa`)."""

    def matrix(in_size, out_size, align_corners, scale):
        ratio = _source_scale(in_size, out_size, align_corners, scale)
        support = interp_size * 0.5 * (ratio if ratio >= 1 else 1)
        inverse = 1 / ratio if ratio >= 1 else 1
        m = np.zeros((out_size, in_size))
        for i in range(out_size):
            center = ratio * (i + 0.5)
            first = max(int(center - support + 0.5), 0)
            taps = np.arange(first, min(int(center + support + 0.5), in_size))
            w = filter_fn((taps - center + 0.5) * inverse)
            m[i, taps] = w / w.sum() if w.sum() != 0 else w
        return m

    return matrix


def _resample(x, output_size, align_corners, scales, matrix):
    """Separable resampling of the trailing len(output_size) dims, one matrix per dim."""
    c = upcast(x.dtype)
    out = x.astype(c)
    n = len(output_size)
    scales = list(scales) if scales else [None] * n
    for axis, o, s in zip(range(x.ndim - n, x.ndim), int_list(output_size), scales, strict=True):
        m = jnp.asarray(matrix(x.shape[axis], o, align_corners, s), c)
        out = jnp.moveaxis(jnp.tensordot(out, m, axes=[[axis], [1]], precision=HIGHEST), -1,
                           axis)
    return out.astype(x.dtype)


_RESAMPLERS = {
    "bicubic": _cubic_matrix,
    "bilinear_aa": _antialias_matrix(_triangle, 2),
    "bicubic_aa": _antialias_matrix(_keys_cubic, 4),
}


def _resampling(kind):
    def lower(x, output_size, align_corners, *scales):
        return _resample(x, output_size, align_corners, _given_scales(scales), _RESAMPLERS[kind])

    def lower_vec(x, output_size, align_corners, scale_factors):
        size = _output_size(x, output_size, scale_factors, 2)
        return _resample(x, size, align_corners, scale_factors, _RESAMPLERS[kind])

    def backward(grad, output_size, input_size, align_corners, *scales):
        x = jnp.zeros(tuple(input_size), grad.dtype)
        _, pullback = jax.vjp(lambda v: lower(v, output_size, align_corners, *scales), x)
        return pullback(grad)[0]

    for fn, suffix in ((lower, ""), (lower_vec, "_vec"), (backward, "_backward")):
        fn.__qualname__ = f"upsample_{kind}{suffix}"
    return lower, lower_vec, backward


for _kind, _name in (("bicubic", "upsample_bicubic2d"), ("bilinear_aa", "_upsample_bilinear2d_aa"),
                     ("bicubic_aa", "_upsample_bicubic2d_aa")):
    _lower, _lower_vec, _backward = _resampling(_kind)
    register(getattr(aten, _name).default)(_lower)
    register(getattr(aten, _name).vec)(_lower_vec)
    register(getattr(aten, f"{_name}_backward").default)(_backward)


# ---------------------------------------------------------------------------------------
# Distances, patches, sampling.


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


@register(aten.im2col.default)
def im2col(x, kernel_size, dilation, padding, stride):
    batched = x.ndim == 4
    x = x if batched else x[None]
    k, d, p, s = (expand_param(v, 2) for v in (kernel_size, dilation, padding, stride))
    patches = lax.conv_general_dilated_patches(
        x, k, s, [(p[0], p[0]), (p[1], p[1])], rhs_dilation=d,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=HIGHEST)
    out = patches.reshape(patches.shape[0], patches.shape[1],
                          patches.shape[2] * patches.shape[3])
    return out if batched else out[0]


@register(aten.col2im.default)
def col2im(x, output_size, kernel_size, dilation, padding, stride):
    batched = x.ndim == 3
    x = x if batched else x[None]
    channels = x.shape[1] // int(np.prod(expand_param(kernel_size, 2)))
    zeros = jnp.zeros((x.shape[0], channels, *int_list(output_size)), x.dtype)
    _, pullback = jax.vjp(lambda v: im2col(v, kernel_size, dilation, padding, stride), zeros)
    out = pullback(x)[0]
    return out if batched else out[0]


def _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_2d/3d: grid[..., 0] indexes the last spatial dim (x), [..., 1] the one
    before (y), [..., 2] depth; modes 0 bilinear, 1 nearest; padding 0 zeros, 1 border,
    2 reflection."""
    n, _, *sizes = x.shape
    dims = len(sizes)
    if interpolation_mode == 2 and dims != 2:
        raise NotImplementedError("grid_sampler: bicubic is defined for 2-D only")

    def unnormalize(coord, size):
        if align_corners:
            return (coord + 1) / 2 * (size - 1)
        return ((coord + 1) * size - 1) / 2

    def reflect(coord, size):
        lo, span = (0.0, 2.0 * (size - 1)) if align_corners else (-0.5, 2.0 * size)
        if span <= 0:
            return jnp.zeros_like(coord)
        extra = jnp.fmod(jnp.abs(coord - lo), span)
        return jnp.where(extra > span / 2, span - extra, extra) + lo

    def source(coord, size):
        coord = unnormalize(coord, size)
        if padding_mode == 1:
            coord = jnp.clip(coord, 0, size - 1)
        elif padding_mode == 2:
            coord = jnp.clip(reflect(coord, size), 0, size - 1)
        return coord

    batch = jnp.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))

    def tap(points, pad=False):
        if pad:  # bicubic applies the padding mode to each tap, not to the centre
            points = [source_padding(p, size) for p, size in zip(points, sizes, strict=True)]
        valid = jnp.ones(points[0].shape, bool)
        for p, size in zip(points, sizes, strict=True):
            valid = valid & (p >= 0) & (p <= size - 1)
        index = [jnp.clip(p, 0, size - 1).astype(np.int32)
                 for p, size in zip(points, sizes, strict=True)]
        values = x[(batch, slice(None), *index)]  # (n, *out, c)
        return jnp.where(valid[..., None], values, 0)

    def source_padding(coord, size):
        if padding_mode == 1:
            return jnp.clip(coord, 0, size - 1)
        if padding_mode == 2:
            return jnp.clip(reflect(coord, size), 0, size - 1)
        return coord

    if interpolation_mode == 2:
        raw = [unnormalize(grid[..., dims - 1 - i], size) for i, size in enumerate(sizes)]
        return _bicubic_taps(raw, tap).astype(x.dtype)
    # coords[i] is the source position along spatial dim i (grid's last entry is dim 0).
    coords = [source(grid[..., dims - 1 - i], size) for i, size in enumerate(sizes)]
    if interpolation_mode == 1:
        out = tap([jnp.round(c) for c in coords])
    else:
        lows = [jnp.floor(c) for c in coords]
        out = 0
        for corner in np.ndindex(*(2,) * dims):
            weight = 1
            points = []
            for c, low, bit in zip(coords, lows, corner, strict=True):
                frac = c - low
                weight = weight * (frac if bit else 1 - frac)
                points.append(low + bit)
            out = out + tap(points) * weight[..., None]
    return jnp.moveaxis(out, -1, 1).astype(x.dtype)


def _cubic_weights(t, a=-0.75):
    """Keys' cubic convolution weights for the 4 taps around a point (torch's A = -0.75)."""
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic_taps(coords, tap):
    (iy, ix) = coords
    y0, x0 = jnp.floor(iy), jnp.floor(ix)
    wy, wx = _cubic_weights(iy - y0), _cubic_weights(ix - x0)
    out = 0
    for i in range(4):
        for j in range(4):
            weight = (wy[i] * wx[j])[..., None]
            out = out + tap([y0 - 1 + i, x0 - 1 + j], pad=True) * weight
    return jnp.moveaxis(out, -1, 1)


@register(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def grid_sampler(x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """(output, offset2bag, bag_size, max_indices) shaped as torch's meta kernel, which the
    engine trusts: offset2bag has one bag id per index, bag_size one count per offset,
    max_indices is empty unless mode is max. (The CPU kernel leaves some of them empty;
    only `output` reaches the user, the rest feed the backward.)"""
    n_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    positions = jnp.arange(indices.shape[0])
    bag = jnp.sum(positions[:, None] >= offsets[None, :n_bags], axis=1) - 1
    keep = indices != padding_idx
    out_dtype = weight.dtype
    weight = weight.astype(upcast(weight.dtype))
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None].astype(rows.dtype)
    counts = jnp.zeros((offsets.shape[0],), np.int64).at[bag].add(keep.astype(np.int64))
    offset2bag = bag.astype(np.int64)
    width = weight.shape[1]
    if mode == 2:  # max, with the index of the winning row per column
        low = jnp.asarray(-jnp.inf, weight.dtype)
        masked = jnp.where(keep[:, None], rows, low)
        out = jnp.full((n_bags, width), low).at[bag].max(masked)
        is_best = (masked == out[bag]) & keep[:, None]
        candidates = jnp.where(is_best, indices[:, None], jnp.iinfo(np.int64).max)
        argmax = jnp.full((n_bags, width), jnp.iinfo(np.int64).max).at[bag].min(candidates)
        empty = counts[:n_bags, None] == 0
        out = jnp.where(empty, jnp.zeros((), weight.dtype), out)
        max_indices = jnp.where(empty, 0, argmax)  # torch leaves 0 for empty bags
        return out.astype(out_dtype), offset2bag, counts, max_indices.astype(np.int64)
    out = jnp.zeros((n_bags, width), weight.dtype).at[bag].add(
        jnp.where(keep[:, None], rows, jnp.zeros((), weight.dtype)))
    no_max_indices = jnp.zeros((0,), np.int64)
    if mode == 1:  # mean
        out = out / jnp.maximum(counts[:n_bags], 1)[:, None].astype(weight.dtype)
        return out.astype(out_dtype), offset2bag, counts, no_max_indices
    return out.astype(out_dtype), offset2bag, jnp.zeros_like(counts), no_max_indices


@register(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                 padding_idx=-1):
    """The weight's gradient from the bookkeeping outputs of `embedding_bag` above."""
    c = upcast(grad.dtype)
    grad = grad.astype(c)
    width = grad.shape[1]
    if mode == 2:  # max: each column's gradient goes to that column's winning row
        filled = (bag_size[: grad.shape[0]] > 0)[:, None]
        columns = jnp.broadcast_to(jnp.arange(width), maximum_indices.shape)
        out = jnp.zeros((num_weights, width), c).at[maximum_indices, columns].add(
            jnp.where(filled, grad, jnp.zeros((), c)))
        return out.astype(grad.dtype)
    rows = grad[offset2bag]
    if mode == 1:
        rows = rows / bag_size[offset2bag][:, None].astype(c)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None].astype(c)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), c).at[indices].add(1)
        rows = rows / counts[indices][:, None]
    rows = jnp.where((indices != padding_idx)[:, None], rows, jnp.zeros((), c))
    return jnp.zeros((num_weights, width), c).at[indices].add(rows)


@register(aten._embedding_bag_backward.default)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           padding_idx=-1):
    if sparse:
        raise NotImplementedError("embedding_bag(sparse=True) gives a sparse gradient; XLA "
                                  "tensors are dense: pass sparse=False")
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                        num_weights, scale_grad_by_freq, mode,
                                        per_sample_weights, padding_idx)


@register(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
                                              mode, padding_idx=-1):
    c = upcast(grad.dtype)
    dots = jnp.sum(grad.astype(c)[offset2bag] * weight.astype(c)[indices], axis=1)
    return jnp.where(indices == padding_idx, jnp.zeros((), c), dots).astype(grad.dtype)


@register(aten.adaptive_avg_pool1d.default)
def adaptive_avg_pool1d(x, output_size):
    return _adaptive_avg_pool(x, output_size, 1)


# ---------------------------------------------------------------------------------------
# Attention (the fused CPU kernels; on the xla device SDPA decomposes to the math path).


def _attention(q, k, v, is_causal, attn_mask, scale):
    """(output, logsumexp over keys) with torch's default scale 1/sqrt(head_dim)."""
    c = upcast(q.dtype)
    q, k, v = q.astype(c), k.astype(c), v.astype(c)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = jnp.einsum("...qd,...kd->...qk", q, k, precision=HIGHEST) * scale
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
    return jnp.einsum("...qk,...kd->...qd", weights, v, precision=HIGHEST), lse


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


@register(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_backward(grad, x, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    _, pullback = jax.vjp(
        lambda v, g: _grid_sample(v, g, interpolation_mode, padding_mode, align_corners),
        x, grid)
    grad_input, grad_grid = pullback(grad)
    return (grad_input if output_mask[0] else None), grad_grid


@register(aten._upsample_nearest_exact1d_backward.default,
          aten._upsample_nearest_exact2d_backward.default,
          aten._upsample_nearest_exact3d_backward.default)
def upsample_nearest_exact_backward(grad, output_size, input_size, *scales):
    x = jnp.zeros(tuple(input_size), grad.dtype)
    _, pullback = jax.vjp(lambda v: _upsample_nearest(
        v, output_size, _given_scales(scales), len(output_size), exact=True), x)
    return pullback(grad)[0]


@register(aten._pdist_backward.default)
def pdist_backward(grad, x, p, pdist):
    _, pullback = jax.vjp(lambda v: pdist_forward(v, p), x)
    return pullback(grad)[0]


@register(aten._cdist_backward.default)
def cdist_backward(grad, x1, x2, p, cdist):
    _, pullback = jax.vjp(lambda v: cdist_forward(v, x2, p, None), x1)
    return pullback(grad)[0]


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


@register(aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact2d.default,
          aten._upsample_nearest_exact3d.default)
def upsample_nearest_exact(x, output_size, *scales):
    return _upsample_nearest(x, output_size, _given_scales(scales), len(output_size), exact=True)
