"""`torch_xla.experimental`: PyTorch/XLA's experimental API (plugins, eager mode)."""

from torch_xla.experimental.eager import eager_mode, eager_mode_context, is_eager_mode

__all__ = ["eager_mode", "eager_mode_context", "is_eager_mode"]
