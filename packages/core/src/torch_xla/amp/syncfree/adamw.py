"""`torch_xla.amp.syncfree.AdamW`: torch.optim.AdamW whose `step(found_inf=...)` needs no sync."""

from __future__ import annotations

import torch

from torch_xla.amp.syncfree.adam import SyncFreeAdamMixin


class AdamW(SyncFreeAdamMixin, torch.optim.AdamW):
    """torch.optim.AdamW; `step(found_inf=t)` skips the update on the device where `t != 0`.

    Without `found_inf` it is torch.optim.AdamW's step. `torch_xla.amp.GradScaler`
    passes `found_inf` itself, so `scaler.step(optimizer)` never waits for the device.
    """
