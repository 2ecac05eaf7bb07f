"""Fused optimizer steps (`_fused_adam`, `_fused_adamw`, `_fused_sgd`, `_fused_adagrad`):
functionalization
turns the in-place `_fused_adam_` of `torch.optim.Adam(fused=True)` into these, which
return the updated lists. The formulas follow torch's CPU fused kernels."""

from __future__ import annotations

import jax.numpy as jnp

from torch_xla.lowering.ops._common import aten, upcast
from torch_xla.lowering.registry import register


def _unscale(grad, grad_scale):
    return grad if grad_scale is None else grad / grad_scale.astype(grad.dtype)


def _skip_if_inf(found_inf, old, new):
    """found_inf (a 1-element tensor from the grad scaler) cancels the whole step."""
    if found_inf is None:
        return new
    return jnp.where(found_inf.reshape(()) != 0, old, new)


def _adam_one(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step, *, lr, beta1, beta2,
              weight_decay, eps, amsgrad, maximize, decoupled):
    c = upcast(param.dtype)
    p, g = param.astype(c), grad.astype(c)
    m, v = exp_avg.astype(c), exp_avg_sq.astype(c)
    if maximize:
        g = -g
    if weight_decay != 0:
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
    m = m + (g - m) * (1 - beta1)
    v = v * beta2 + g * g * (1 - beta2)
    step = step.astype(c).reshape(())
    bias1 = 1 - beta1**step
    bias2_sqrt = jnp.sqrt(1 - beta2**step)
    if amsgrad:
        max_v = jnp.maximum(max_exp_avg_sq.astype(c), v)
        denom = jnp.sqrt(max_v) / bias2_sqrt + eps
    else:
        max_v = max_exp_avg_sq
        denom = jnp.sqrt(v) / bias2_sqrt + eps
    p = p - (lr / bias1) * m / denom
    return (p.astype(param.dtype), m.astype(exp_avg.dtype), v.astype(exp_avg_sq.dtype),
            max_v if not amsgrad else max_v.astype(max_exp_avg_sq.dtype))


def _adam(decoupled):
    def lower(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr,
              beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
              found_inf=None):
        new_params, new_grads, new_avgs, new_sqs = [], [], [], []
        new_maxes = list(max_exp_avg_sqs)
        for i, param in enumerate(params):
            grad = _unscale(grads[i], grad_scale)
            max_sq = max_exp_avg_sqs[i] if amsgrad else None
            p, m, v, max_v = _adam_one(
                param, grad, exp_avgs[i], exp_avg_sqs[i], max_sq, state_steps[i], lr=lr,
                beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad,
                maximize=maximize, decoupled=decoupled)
            new_params.append(_skip_if_inf(found_inf, param, p))
            new_grads.append(_skip_if_inf(found_inf, grads[i], grad))
            new_avgs.append(_skip_if_inf(found_inf, exp_avgs[i], m))
            new_sqs.append(_skip_if_inf(found_inf, exp_avg_sqs[i], v))
            if amsgrad:
                new_maxes[i] = _skip_if_inf(found_inf, max_sq, max_v)
        return new_params, new_grads, new_avgs, new_sqs, new_maxes

    lower.__qualname__ = "fused_adamw" if decoupled else "fused_adam"
    return lower


register(aten._fused_adam.default, aten._fused_adam.tensor_lr)(_adam(decoupled=False))
register(aten._fused_adamw.default, aten._fused_adamw.tensor_lr)(_adam(decoupled=True))


@register(aten._fused_sgd.default, aten._fused_sgd.tensor_lr)
def fused_sgd(params, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
              nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    new_params, new_grads, new_buffers = [], [], []
    for i, param in enumerate(params):
        grad = _unscale(grads[i], grad_scale)
        g = -grad if maximize else grad
        if weight_decay != 0:
            g = g + weight_decay * param
        if momentum != 0:
            old = momentum_buffer_list[i]
            buf = g if is_first_step else momentum * old + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
            new_buffers.append(_skip_if_inf(found_inf, old, buf.astype(old.dtype)))
        new_params.append(_skip_if_inf(found_inf, param, (param - lr * g).astype(param.dtype)))
        new_grads.append(_skip_if_inf(found_inf, grads[i], grad))
    return new_params, new_grads, new_buffers


def _adagrad(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
             maximize, grad_scale=None, found_inf=None):
    """The updated params, grads and state sums of one Adagrad step (the step counts were
    incremented before it, as torch's Python side does)."""
    new_params, new_grads, new_sums = [], [], []
    for param, grad, state_sum, step in zip(params, grads, state_sums, state_steps,
                                            strict=True):
        c = upcast(param.dtype)
        unscaled = _unscale(grad, grad_scale)
        g = unscaled.astype(c)
        if maximize:
            g = -g
        p = param.astype(c)
        if weight_decay != 0:
            g = g + p * weight_decay
        total = state_sum.astype(c) + g * g
        clr = lr / (1 + (step.astype(c).reshape(()) - 1) * lr_decay)
        p = p - clr * g / (jnp.sqrt(total) + eps)
        new_params.append(_skip_if_inf(found_inf, param, p.astype(param.dtype)))
        new_grads.append(_skip_if_inf(found_inf, grad, unscaled))
        new_sums.append(_skip_if_inf(found_inf, state_sum, total.astype(state_sum.dtype)))
    return new_params, new_grads, new_sums


@register(aten._fused_adagrad.default)
def fused_adagrad(params, grads, state_sums, state_steps, **kwargs):
    """This overload also returns the step counts (its schema marks them written); the
    step leaves them as they are."""
    return (*_adagrad(params, grads, state_sums, state_steps, **kwargs), list(state_steps))


@register(aten._fused_adagrad.tensor_lr)
def fused_adagrad_tensor_lr(params, grads, state_sums, state_steps, **kwargs):
    return _adagrad(params, grads, state_sums, state_steps, **kwargs)


@register(aten._amp_foreach_non_finite_check_and_unscale.default)
def amp_foreach_non_finite_check_and_unscale(grads, found_inf, inv_scale):
    """GradScaler.unscale_: grads * inv_scale, and found_inf = 1 if any grad is not finite."""
    scale = inv_scale.reshape(())
    unscaled = [(g.astype(upcast(g.dtype)) * scale).astype(g.dtype) for g in grads]
    bad = jnp.zeros((), bool)
    for g in grads:
        bad = bad | ~jnp.all(jnp.isfinite(g))
    return unscaled, jnp.where(bad, jnp.ones_like(found_inf), found_inf)


@register(aten._amp_update_scale.default)
def amp_update_scale(scale, growth_tracker, found_inf, scale_growth_factor,
                     scale_backoff_factor, growth_interval):
    """GradScaler.update: back off after an overflow, grow after `growth_interval` good
    steps (keeping the old scale if growing would overflow)."""
    overflow = found_inf.reshape(()) != 0
    successful = growth_tracker + 1
    grow = successful >= growth_interval
    grown = scale * scale_growth_factor
    grown = jnp.where(jnp.isfinite(grown), grown, scale)
    new_scale = jnp.where(overflow, scale * scale_backoff_factor, jnp.where(grow, grown, scale))
    new_tracker = jnp.where(overflow | grow, jnp.zeros_like(growth_tracker), successful)
    return new_scale.astype(scale.dtype), new_tracker.astype(growth_tracker.dtype)
