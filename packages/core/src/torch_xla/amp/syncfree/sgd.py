"""`torch_xla.amp.syncfree.SGD`: torch.optim.SGD whose `step(found_inf=...)` needs no sync."""

from __future__ import annotations

import torch
from torch import Tensor

from torch_xla.amp.syncfree import _functional as F
from torch_xla.amp.syncfree._step import SyncFreeStep


class SGD(SyncFreeStep, torch.optim.SGD):
    """torch.optim.SGD; `step(found_inf=t)` skips the update on the device where `t != 0`.

    Without `found_inf` it is torch.optim.SGD's step. `torch_xla.amp.GradScaler`
    passes `found_inf` itself, so `scaler.step(optimizer)` never waits for the device.
    """

    def _step_group(self, group: dict, found_inf: Tensor) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        found_inf = found_inf.to(params[0].device)
        states = [self.state[p] for p in params]
        steps = [F.state_step(self.state[p], p.device) for p in params]
        buffers = [state.get("momentum_buffer") for state in states]
        F.sgd_step(
            found_inf, steps, params, [p.grad for p in params], buffers,
            weight_decay=group["weight_decay"], momentum=group["momentum"], lr=group["lr"],
            dampening=group["dampening"], nesterov=group["nesterov"], maximize=group["maximize"])
        for state, buffer in zip(states, buffers, strict=True):
            state["momentum_buffer"] = buffer
