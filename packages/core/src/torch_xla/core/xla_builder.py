"""JAX functions inside PyTorch/XLA programs (`torch_xla.core.xla_builder`, PyTorch/XLA's `xb`).

`call_jax(jax_func, args, kwargs=None, name=None, override_hash=None)` calls a JAX
function on XLA tensors while the step is recorded: one node of the lazy graph
whose lowering is the JAX function itself, compiled into the step's program.

    import jax.numpy as jnp
    import torch_xla.core.xla_builder as xb

    def gelu_tanh(x, w):
        y = x @ w
        return 0.5 * y * (1 + jnp.tanh(0.79788456 * (y + 0.044715 * y**3)))

    out = xb.call_jax(gelu_tanh, (x, w))     # x, w: XLA tensors; out: an XLA tensor

- `args` is a tuple (and `kwargs` a dict) holding any pytree of tensors and other
  values; tensors arrive as jax arrays of their stored dtype, other leaves as
  themselves, baked into the computation (so hashable: a new value traces again).
- The function returns arrays in any pytree; they come back as XLA tensors in it.
- Each signature is traced once (`jax.eval_shape`); repeated calls record the kept
  trace, and equal computations share one compiled program.
- `name` labels the computation; `override_hash` replaces its fingerprint (by
  default the hash of its StableHLO) when the caller knows the identity of the
  computation better, and skips lowering it once to compute that hash.
- Not differentiable by itself: wrap it in a `torch.autograd.Function`, or use
  `torch_xla.experimental.assume_pure`, whose backward is JAX's `vjp`.

PyTorch/XLA's XLA-builder API (`Op`, `create_computation`, ...) builds XLA
computations with its C++ `XlaBuilder`; this project has no such builder (its
programs are JAX functions), so JAX code is the way to write a computation by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch_xla.lazy import jax_call

# PyTorch/XLA's names: the traced computations, one per signature, and their count.
_JAX_TO_XLA_COMPUTATION_CACHE = jax_call.COMPUTATIONS


def _jax_to_xla_computation_cache_elements() -> int:
    return len(_JAX_TO_XLA_COMPUTATION_CACHE)


def call_jax(jax_func: Callable, args: tuple | list, kwargs: dict | None = None,
             name: str | None = None, override_hash: Any = None) -> Any:
    """Call `jax_func(*args, **kwargs)` on the XLA tensors in `args` and `kwargs`, recorded
    into the current step's graph; returns its arrays as XLA tensors (see the module)."""
    return jax_call.call(jax_func, args, kwargs, name, override_hash)
