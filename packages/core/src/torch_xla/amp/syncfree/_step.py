"""The `step(closure, found_inf)` every sync-free optimizer shares."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from torch_xla.amp.syncfree import _functional as F


class SyncFreeStep:
    """`step(found_inf=t)` updates each param group on the device, skipping where `t != 0`
    (`_step_group`, per optimizer); without `found_inf` it is the torch optimizer's step."""

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None,
             found_inf: Tensor | None = None) -> float | None:
        if found_inf is None:
            return super().step(closure=closure)
        found_inf = F.check_found_inf(found_inf)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._step_group(group, found_inf)
        return loss

    def _step_group(self, group: dict, found_inf: Tensor) -> None:
        raise NotImplementedError
