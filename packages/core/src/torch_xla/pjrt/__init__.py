"""Layer 5, the runtime: one PJRT client over jax/jaxlib, and the compilation cache."""

from torch_xla.pjrt.client import Client, XlaRuntimeError, client, started

__all__ = ["Client", "XlaRuntimeError", "client", "started"]
