"""The sync-free update rules: a step that `found_inf` cancels, recorded in the graph.

`found_inf` is a one-element tensor on the parameters' device (the grad
scaler's). Nothing here reads it on the host: each new value is selected
on the device between the updated and the old one, so a step costs no
device-to-host transfer and compiles to the same graph whether it is
skipped or not. Per-parameter `step` counters advance only on taken steps.
"""

from __future__ import annotations

import torch
from torch import Tensor


def taken(found_inf: Tensor, dtype: torch.dtype) -> Tensor:
    """1 where the step is taken (found_inf == 0), else 0, in `dtype`."""
    return (found_inf == 0).to(dtype)


def _keep_unless_taken(found_inf: Tensor, old: Tensor, new: Tensor) -> None:
    old.copy_(torch.where(found_inf != 0, old, new))


def sgd_step(found_inf: Tensor, state_steps: list[Tensor], params: list[Tensor],
             d_p_list: list[Tensor], momentum_buffer_list: list[Tensor | None], *,
             weight_decay: float, momentum: float, lr: float | Tensor, dampening: float,
             nesterov: bool, maximize: bool) -> None:
    """torch.optim.SGD's update, skipped where `found_inf` is not 0.

    A momentum buffer starts as the first taken step's gradient (the per-parameter
    `step` counter says which step that is); `momentum_buffer_list` gets the new
    buffers of parameters that had none.
    """
    for i, param in enumerate(params):
        grad = -d_p_list[i] if maximize else d_p_list[i]
        if weight_decay != 0:
            grad = grad.add(param, alpha=weight_decay)
        if momentum != 0:
            grad = _momentum(found_inf, state_steps[i], momentum_buffer_list, i, grad,
                             momentum=momentum, dampening=dampening, nesterov=nesterov)
        _keep_unless_taken(found_inf, param, param - grad * lr)
        state_steps[i].add_(taken(found_inf, state_steps[i].dtype))


def _momentum(found_inf: Tensor, step: Tensor, buffers: list[Tensor | None], i: int,
              grad: Tensor, *, momentum: float, dampening: float, nesterov: bool) -> Tensor:
    if buffers[i] is None:
        buffers[i] = grad.detach().clone()
    buf = buffers[i]
    updated = torch.where(step != 0, buf * momentum + grad * (1 - dampening), grad)
    _keep_unless_taken(found_inf, buf, updated)
    return grad + updated * momentum if nesterov else updated


def adam_step(found_inf: Tensor, state_steps: list[Tensor], params: list[Tensor],
              grads: list[Tensor], exp_avgs: list[Tensor], exp_avg_sqs: list[Tensor],
              max_exp_avg_sqs: list[Tensor], *, amsgrad: bool, beta1: float, beta2: float,
              lr: float | Tensor, weight_decay: float, eps: float, maximize: bool,
              use_adamw: bool) -> None:
    """torch.optim.Adam's (`use_adamw`: AdamW's) update, skipped where `found_inf` is not 0.

    `max_exp_avg_sqs` is used only with `amsgrad`. (torch's `_fused_adam_` is not
    used: functionalization rejects its empty max list when amsgrad is off.)
    """
    for i, param in enumerate(params):
        step = state_steps[i]
        step.add_(taken(found_inf, step.dtype))
        grad = -grads[i] if maximize else grads[i]
        base = param
        if weight_decay != 0:
            if use_adamw:
                base = param * (1 - lr * weight_decay)
            else:
                grad = grad.add(param, alpha=weight_decay)
        exp_avg = exp_avgs[i].lerp(grad, 1 - beta1)
        exp_avg_sq = exp_avg_sqs[i] * beta2 + grad * grad * (1 - beta2)
        if amsgrad:
            exp_avg_sq_max = torch.maximum(max_exp_avg_sqs[i], exp_avg_sq)
            _keep_unless_taken(found_inf, max_exp_avg_sqs[i], exp_avg_sq_max)
        denom = ((exp_avg_sq_max if amsgrad else exp_avg_sq).sqrt()
                 / (1 - beta2**step).sqrt() + eps)
        _keep_unless_taken(found_inf, param, base - lr / (1 - beta1**step) * exp_avg / denom)
        _keep_unless_taken(found_inf, exp_avgs[i], exp_avg)
        _keep_unless_taken(found_inf, exp_avg_sqs[i], exp_avg_sq)


def check_found_inf(found_inf: Tensor) -> Tensor:
    """The `found_inf` a sync-free `step()` was given, checked to be a 0-d tensor."""
    if not isinstance(found_inf, Tensor) or found_inf.dim() != 0:
        shape = tuple(found_inf.shape) if isinstance(found_inf, Tensor) else None
        raise ValueError(
            "The found_inf tensor has to be scalar type: step(found_inf=...) takes a 0-d "
            f"tensor, got {type(found_inf).__name__} of shape {shape}. Pass e.g. "
            "torch.stack(list_of_flags).sum(), as torch_xla.amp.GradScaler does.")
    return found_inf


def state_step(state: dict, device: torch.device) -> Tensor:
    """The parameter's step counter on its device, created (0) on first use.

    A counter that torch.optim's own `step()` made on the CPU is moved once."""
    step = state.get("step")
    if step is None:
        step = torch.zeros((), dtype=torch.float32, device=device)
    elif not isinstance(step, Tensor) or step.device != device:
        step = torch.as_tensor(step, dtype=torch.float32).to(device)
    state["step"] = step
    return step
