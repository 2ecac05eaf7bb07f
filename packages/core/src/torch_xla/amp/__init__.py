"""`torch_xla.amp`: automatic mixed precision on XLA devices.

- `autocast(device, enabled=True, dtype=None, cache_enabled=True)`: `torch.autocast`
  for an XLA device; the default dtype is the active plugin's `autocast_dtype()`.
- `GradScaler`: gradient scaling whose checks stay on the device.
- `syncfree.SGD`, `syncfree.Adam`, `syncfree.AdamW`: optimizers whose step the
  scaler cancels on the device.
- `custom_fwd`, `custom_bwd`: `torch.amp`'s decorators, for the xla device by default.

See docs/guide/amp.md.
"""

from torch_xla.amp import syncfree
from torch_xla.amp.autocast_mode import autocast, custom_bwd, custom_fwd
from torch_xla.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd", "syncfree"]
