"""The active plugin's lowering policies, as plain values the op lowerings read.

Lowerings never ask the plugin registry: the runtime client calls
`apply_plugin_policy` when it starts (`pjrt.client.on_start`), before any graph
is lowered, and the values stay fixed for the life of the process (as the device
type does). Until then they are `DevicePlugin`'s defaults.

The same call makes the plugin's `autocast_dtype()` the default of
`torch.autocast('xla')` (whose kernels are in `backend/autocast.py`). This
module loads with the engine (`torch_xla.core.xla_model` imports it), so
normally before the client starts; if the client started first, `on_start`
applies the policies the moment this module loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jax import lax

from torch_xla.pjrt.client import on_start

# Gathers from tables of at most this many rows lower without an XLA gather.
dense_gather_factor: int = 0
# "default", "threefry" or "philox": the bit generator of every random op.
rng_algorithm: str = "default"
# The precision of matmuls and convolutions on 32-bit inputs (torch_xla.backends):
# full float32 unless the user asks for a faster one, so results match eager.
MATMUL_PRECISIONS = {"default": lax.Precision.DEFAULT, "high": lax.Precision.HIGH,
                     "highest": lax.Precision.HIGHEST}
matmul_precision: str = "highest"
_precision_listeners: list[Callable[[], None]] = []


def apply_plugin_policy(runtime: Any) -> None:
    """Read the started plugin's `dense_gather_factor()`, `rng_algorithm()` and
    `autocast_dtype()` (torch keeps that one per thread: it is set in this thread)."""
    global dense_gather_factor, rng_algorithm
    dense_gather_factor = int(runtime.plugin.dense_gather_factor())
    rng_algorithm = runtime.plugin.rng_algorithm()
    torch.set_autocast_dtype("xla", runtime.plugin.autocast_dtype())


def set_matmul_precision(name: str) -> None:
    """Lower later graphs' matmuls and convolutions at `name` ('default', 'high' or
    'highest'); the listeners (the in-memory program cache) drop programs built with
    another."""
    global matmul_precision
    if name not in MATMUL_PRECISIONS:
        raise ValueError(f"Invalid precision: {name!r}. Must be one of "
                         f"{', '.join(MATMUL_PRECISIONS)}.")
    if name != matmul_precision:
        matmul_precision = name
        for listener in _precision_listeners:
            listener()


def on_matmul_precision_change(listener: Callable[[], None]) -> None:
    _precision_listeners.append(listener)


def precision() -> lax.Precision:
    """The precision user-visible matmuls and convolutions lower with."""
    return MATMUL_PRECISIONS[matmul_precision]


def dense_gather(rows: int) -> bool:
    """Whether a gather from a table of `rows` rows lowers densely."""
    return 0 < rows <= dense_gather_factor


on_start(apply_plugin_policy)
