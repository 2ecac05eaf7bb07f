"""torch-xla plugin for NVIDIA GPUs (jax's CUDA PJRT C API library).

The library comes from `jax-cuda12-pjrt` or `jax-cuda13-pjrt` (the extras
`torch-xla-cuda[cuda12]` / `[cuda13]`); it is located, never imported, until
the client is created.
"""

from torch_xla_cuda.plugin import CudaPlugin

__version__ = "0.1.0"

__all__ = ["CudaPlugin", "__version__"]
