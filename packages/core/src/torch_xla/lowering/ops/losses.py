"""Loss functions with their backward ops: nll, mse, smooth L1, Huber, binary cross
entropy. Backward ops follow torch's formulas where its gradient is defined differently
from the VJP (ignore_index, binary cross entropy's clamped denominator)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from torch_xla.lowering.ops._common import aten
from torch_xla.lowering.registry import register

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
