"""Layer 4, lowering: ATen overloads to pure-JAX functions.

    entry = lookup(torch.ops.aten.add.Tensor)      # a Lowering, or None
    out = entry.fn(x, y, alpha=2)                   # x, y: jax arrays (tracers under jit)

Calling convention (what the engine relies on):
- `fn` takes the op's original args/kwargs, tensors replaced by jax arrays (lists of
  tensors by lists of arrays); arguments left at their schema default may be omitted.
- It returns an array, or a tuple/list shaped like the schema's returns (None where a
  backward op's output_mask says the gradient is not wanted).
- Values follow torch's type promotion; dtypes are torch's except where the engine's cast
  to the meta-predicted dtype fixes them; no float64 where torch computes in float32.
- `entry.needs_rng`: pass `rng=<raw uint32[2] key, jax.random.PRNGKey(seed)>`.
- An op whose output shape depends on values (`x[mask]`) raises DataDependentShapeError
  while tracing: run it on the CPU.
- `decompositions()`: torch._decomp rules for overloads without a lowering.

Importing this package registers every op module; it has no other side effect (it
neither changes JAX configuration nor touches torch's dispatcher).
"""

from __future__ import annotations

from torch_xla.lowering import dtypes
from torch_xla.lowering.decompositions import decompositions
from torch_xla.lowering.ops import (  # noqa: F401  (imported to register their lowerings)
    activations,
    attention,
    bessel,
    conv,
    distances,
    elementwise,
    embedding,
    factories,
    fft,
    foreach,
    gamma,
    indexing,
    linalg,
    losses,
    norm,
    optim,
    padding,
    pooling,
    random,
    reductions,
    resampling,
    shape,
    softmax,
    special,
)
from torch_xla.lowering.registry import (
    DataDependentShapeError,
    DuplicateLoweringError,
    Lowering,
    core_aten_ops,
    lookup,
    register,
    registered,
)

__all__ = [
    "DataDependentShapeError",
    "DuplicateLoweringError",
    "Lowering",
    "core_aten_ops",
    "decompositions",
    "dtypes",
    "lookup",
    "register",
    "registered",
]
