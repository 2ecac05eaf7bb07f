"""`torch_xla.amp.syncfree.Adam`: torch.optim.Adam whose `step(found_inf=...)` needs no sync."""

from __future__ import annotations

import torch
from torch import Tensor

from torch_xla.amp.syncfree import _functional as F
from torch_xla.amp.syncfree._step import SyncFreeStep


class SyncFreeAdamMixin(SyncFreeStep):
    """`step(found_inf=t)` for Adam and AdamW (the group's `decoupled_weight_decay`)."""

    def _step_group(self, group: dict, found_inf: Tensor) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        if any(p.grad.is_sparse for p in params):
            raise RuntimeError(f"{type(self).__name__} does not support sparse gradients, "
                               "please consider SparseAdam instead")
        found_inf = found_inf.to(params[0].device)
        states = [self._state(p, group["amsgrad"]) for p in params]
        steps = [F.state_step(self.state[p], p.device) for p in params]
        beta1, beta2 = group["betas"]
        F.adam_step(
            found_inf, steps, params, [p.grad for p in params], [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [s["max_exp_avg_sq"] for s in states] if group["amsgrad"] else [],
            amsgrad=group["amsgrad"], beta1=beta1, beta2=beta2, lr=group["lr"],
            weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"],
            use_adamw=group.get("decoupled_weight_decay", False))

    def _state(self, param: Tensor, amsgrad: bool) -> dict:
        state = self.state[param]
        for name in ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ()):
            if name not in state:
                state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state


class Adam(SyncFreeAdamMixin, torch.optim.Adam):
    """torch.optim.Adam; `step(found_inf=t)` skips the update on the device where `t != 0`.

    Without `found_inf` it is torch.optim.Adam's step. `torch_xla.amp.GradScaler`
    passes `found_inf` itself, so `scaler.step(optimizer)` never waits for the device.
    """
