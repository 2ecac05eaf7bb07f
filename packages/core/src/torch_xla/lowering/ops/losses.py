"""Loss functions with their backward ops: nll, mse, smooth L1, Huber, binary cross
entropy; and CTC's recursions, which the engine calls with its lengths as arrays.
Backward ops follow torch's formulas where its gradient is defined differently from the
VJP (ignore_index, binary cross entropy's clamped denominator, CTC)."""

from __future__ import annotations

import functools

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


# --- CTC ---------------------------------------------------------------------------------
# Not lowerings of `_ctc_loss`/`_ctc_loss_backward` themselves: those take the lengths as
# int lists, which would make every batch of new lengths a new program. The engine's rule
# (`lazy/special.py`) feeds the lengths as int arrays and calls these through `call_jax`.
# `width` is the extended target's length 2 * max(target_lengths) + 1 (the CPU's
# log_alpha width). Recursions as in Graves et al. (2006), in log space, over time with
# `lax.scan`; a sequence past its input length keeps its last alpha.


def _logsumexp(*xs):
    top = functools.reduce(jnp.maximum, xs)
    safe = jnp.where(jnp.isfinite(top), top, jnp.zeros((), top.dtype))
    total = functools.reduce(jnp.add, [jnp.exp(x - safe) for x in xs])
    return jnp.where(jnp.isfinite(top), jnp.log(total) + safe, top)


def _ctc_labels(targets, target_lengths, width: int, blank: int):
    """The extended targets (B, width): blank, l1, blank, l2, ..., blank; whether each
    position exists for its sequence; whether it may be reached from two positions back."""
    batch, longest = target_lengths.shape[0], (width - 1) // 2
    if targets.ndim == 1:  # every target, one after the other
        starts = jnp.cumsum(target_lengths) - target_lengths
        at = jnp.clip(starts[:, None] + jnp.arange(longest)[None, :], 0,
                      max(targets.shape[0] - 1, 0))
        labels = targets[at] if targets.shape[0] else jnp.zeros((batch, longest), targets.dtype)
    else:
        labels = targets[:, :longest]
    extended = jnp.full((batch, width), blank, targets.dtype).at[:, 1::2].set(labels)
    position = jnp.arange(width)[None, :]
    exists = position < 2 * target_lengths[:, None] + 1
    before = jnp.pad(extended, ((0, 0), (2, 0)), constant_values=blank)[:, :width]
    skips = (position >= 2) & (extended != blank) & (extended != before)
    return extended, exists, skips


def _emitted(log_probs, extended):
    """log_probs (T, B, C) of each extended label: (T, B, width)."""
    index = jnp.broadcast_to(extended[None], (log_probs.shape[0], *extended.shape))
    return jnp.take_along_axis(log_probs, index.astype(jnp.int32), axis=2)


def _shifted(x, by: int):
    """x[..., s - by] at position s (-inf before the start)."""
    return jnp.pad(x, ((0, 0), (by, 0)), constant_values=-jnp.inf)[:, :x.shape[1]]


def ctc_loss_forward(log_probs, targets, input_lengths, target_lengths, *, width: int,
                     blank: int):
    """(neg_log_likelihood (B,), log_alpha (B, T, width)) of log_probs (T, B, C)."""
    extended, exists, skips = _ctc_labels(targets, target_lengths, width, blank)
    emit = _emitted(log_probs, extended)
    position = jnp.arange(width)[None, :]
    first = (position == 0) | ((position == 1) & (target_lengths[:, None] > 0))
    alpha0 = jnp.where(first & exists, emit[0], -jnp.inf)

    def step(alpha, t):
        two_back = jnp.where(skips, _shifted(alpha, 2), -jnp.inf)
        new = jnp.where(exists, _logsumexp(alpha, _shifted(alpha, 1), two_back) + emit[t],
                        -jnp.inf)
        active = (t < input_lengths)[:, None]
        return jnp.where(active, new, alpha), jnp.where(active, new, -jnp.inf)

    last, rest = jax.lax.scan(step, alpha0, jnp.arange(1, log_probs.shape[0]))
    log_alpha = jnp.concatenate([alpha0[None], rest]).transpose(1, 0, 2)
    end = 2 * target_lengths
    final = jnp.take_along_axis(last, end[:, None], axis=1)[:, 0]
    before_end = jnp.where(target_lengths > 0, jnp.take_along_axis(
        last, jnp.maximum(end - 1, 0)[:, None], axis=1)[:, 0], -jnp.inf)
    # an impossible alignment stays infinite under zero_infinity too: torch's `ctc_loss`
    # zeroes it after this op, and the backward reads the infinity
    return -_logsumexp(final, before_end), log_alpha


def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths, nll, log_alpha,
                      *, blank: int, zero_infinity: bool):
    """The gradient for log_probs, by the CPU kernel's formula: exp(lp) minus the
    posterior of each label at each step, times the sequence's grad (zero past each
    input length, and for an infinite loss under zero_infinity)."""
    width = log_alpha.shape[2]
    steps, batch, classes = log_probs.shape
    extended, exists, skips = _ctc_labels(targets, target_lengths, width, blank)
    emit = _emitted(log_probs, extended)
    position = jnp.arange(width)[None, :]
    end = 2 * target_lengths[:, None]
    last = (position == end) | ((position == end - 1) & (target_lengths[:, None] > 0))
    skips_ahead = jnp.pad(skips, ((0, 0), (0, 2)))[:, 2:]  # may s reach s + 2

    def ahead(x, by: int):
        return jnp.pad(x, ((0, 0), (0, by)), constant_values=-jnp.inf)[:, by:]

    def step(beta, t):
        two_ahead = jnp.where(skips_ahead, ahead(beta, 2), -jnp.inf)
        recursed = _logsumexp(beta, ahead(beta, 1), two_ahead) + emit[t]
        length = input_lengths[:, None]
        new = jnp.where(t == length - 1, jnp.where(last, emit[t], -jnp.inf),
                        jnp.where(t < length - 1, recursed, -jnp.inf))
        new = jnp.where(exists, new, -jnp.inf)
        return new, new

    start = jnp.full((batch, width), -jnp.inf, log_probs.dtype)
    _, log_beta = jax.lax.scan(step, start, jnp.arange(steps), reverse=True)
    both = log_alpha.transpose(1, 0, 2) + log_beta  # (T, B, width)
    top = jnp.max(both, axis=2, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros((), top.dtype))
    per_label = jnp.zeros((steps, batch, classes), log_probs.dtype).at[
        :, jnp.arange(batch)[:, None], extended].add(jnp.exp(both - top))
    occupancy = jnp.log(per_label) + top
    out = (jnp.exp(log_probs) - jnp.exp(occupancy + nll[None, :, None] - log_probs)) * grad[
        None, :, None]
    keep = jnp.arange(steps)[:, None] < input_lengths[None, :]
    if zero_infinity:
        keep = keep & ~jnp.isinf(nll)[None, :]
    return jnp.where(keep[:, :, None], out, jnp.zeros((), out.dtype))
