"""Optimizers whose step a grad scaler can cancel on the device, without a host sync.

`opt.step(found_inf=t)` (a 0-d tensor) records the update and selects, on the
device, between the new and the old values: the step is skipped where `t != 0`.
`torch_xla.amp.GradScaler` passes `found_inf` to any optimizer whose `step` takes
it. Without `found_inf` each is its torch.optim counterpart.
"""

from torch_xla.amp.syncfree.adam import Adam
from torch_xla.amp.syncfree.adamw import AdamW
from torch_xla.amp.syncfree.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW"]
