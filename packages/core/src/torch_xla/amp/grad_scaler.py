"""`torch_xla.amp.GradScaler`: torch's GradScaler for XLA devices, without host syncs.

The scale, the unscaling and the inf check (`_amp_foreach_non_finite_check_and_unscale_`)
and the scale update (`_amp_update_scale_`) are device ops, lowered like any
other. What torch's scaler does on the host is deciding whether to step: it
reads `found_inf` (`.item()`), which waits for the whole step to run. This
scaler avoids that wait in the two ways PyTorch/XLA offers:

- an optimizer whose `step` takes `found_inf` (`torch_xla.amp.syncfree`) gets it
  and skips the update on the device;
- `use_zero_grad=True`: any optimizer steps with its gradients multiplied by 0
  when an inf was found (its state still advances, as with zero gradients).

Otherwise it runs the pending graph (`torch_xla.sync()`) and reads `found_inf`,
as torch's scaler does. Optimizers that handle scaling themselves (torch's
`fused=True` ones) are passed `grad_scale` and `found_inf` by torch's own code.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.amp.syncfree._functional import taken

DEVICE_TYPE = "xla"


def accepts_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer.step` takes `found_inf` (a sync-free optimizer)."""
    return "found_inf" in inspect.signature(optimizer.step).parameters


def _combined_found_inf(optimizer_state: dict[str, Any]) -> torch.Tensor:
    return torch.stack(tuple(optimizer_state["found_inf_per_device"].values())).sum()


def _agree_on_found_inf(optimizer: torch.optim.Optimizer,
                        optimizer_state: dict[str, Any]) -> None:
    """FSDP shards (parameters marked `_is_sharded`) are different parts on each replica,
    so one replica's part may hold an inf that the others' do not: the replicas take the
    largest `found_inf` of all, so that all skip the step (and back off the scale)
    together instead of drifting apart. (Replicated parameters see the same averaged
    gradients everywhere and need no such agreement.)"""
    if xr.world_size() < 2 or not any(getattr(p, "_is_sharded", False)
                                      for group in optimizer.param_groups
                                      for p in group["params"]):
        return
    found = optimizer_state["found_inf_per_device"]
    for device, value in found.items():
        found[device] = xm.all_reduce(xm.REDUCE_MAX, value)


def _gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p.grad for group in optimizer.param_groups for p in group["params"]
            if p.grad is not None]


class GradScaler(torch.amp.GradScaler):
    """Gradient scaling for XLA devices (torch.amp.GradScaler's arguments, minus `device`).

    `use_zero_grad=True` steps every optimizer with zeroed gradients instead of
    skipping the step when an inf/NaN was found, so no step waits for the device.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, use_zero_grad: bool = False) -> None:
        super().__init__(DEVICE_TYPE, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
        self.use_zero_grad = use_zero_grad

    def _maybe_opt_step(self, optimizer: torch.optim.Optimizer,
                        optimizer_state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        _agree_on_found_inf(optimizer, optimizer_state)
        if accepts_found_inf(optimizer):
            return optimizer.step(*args, found_inf=_combined_found_inf(optimizer_state),
                                  **kwargs)
        if self.use_zero_grad:
            found_inf = _combined_found_inf(optimizer_state)
            for grad in _gradients(optimizer):
                grad.nan_to_num_().mul_(taken(found_inf, grad.dtype))
            return optimizer.step(*args, **kwargs)
        torch_xla.sync()  # run the step once, then read found_inf (as torch does)
        return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
