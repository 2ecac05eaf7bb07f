"""PyTorch/XLA's `torch_xla.experimental.fori_loop`: a counted loop run as one XLA While.

    from torch_xla.experimental.fori_loop import fori_loop

    _, total = fori_loop(0, 10, lambda x: x + w, x0)     # x0 + 10 * w

`body_fun(*values)` returns the new values (one tensor for one value); it runs
`upper - lower` times inside one compiled loop, however many that is, and the values
keep their shapes and dtypes. It is `torch._higher_order_ops.while_loop` with a counter
(which works on XLA tensors too: `torch_xla.lazy.loop.while_loop`); tensors the body
reads from outside (a module's weights) enter the loop as invariants.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._higher_order_ops.while_loop import while_loop

__all__ = ["fori_loop"]


def fori_loop(lower: Any, upper: Any, body_fun: Callable, *input_value: torch.Tensor
              ) -> tuple[torch.Tensor, ...]:
    """Run `input_value = body_fun(*input_value)` for each counter value from `lower` up to
    `upper` (exclusive) in one XLA While loop. `lower` and `upper` are Python ints or
    one-element integer tensors. Returns the final counter (a tensor equal to
    `max(lower, upper)`) followed by the final values."""
    if not input_value:
        raise ValueError("fori_loop needs at least one value to carry through the loop")
    device = input_value[0].device
    if device.type != "xla":
        raise ValueError(f"fori_loop runs on XLA tensors; the first value is on {device}")
    start, stop = (_counter(b, name, device) for b, name in ((lower, "lower"),
                                                             (upper, "upper")))

    def cond_fn(i, stop, *values):
        return i < stop

    def body_fn(i, stop, *values):
        out = body_fun(*values)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return (i + 1, stop.clone(), *out)

    counter, _, *values = while_loop(cond_fn, body_fn, (start, stop, *input_value))
    return (torch.maximum(counter, stop), *values)


def _counter(bound: Any, name: str, device: torch.device) -> torch.Tensor:
    if isinstance(bound, torch.Tensor):
        if bound.numel() != 1 or bound.is_floating_point() or bound.dtype == torch.bool:
            raise ValueError(f"fori_loop: {name} must be an integer or a one-element integer "
                             f"tensor, got a tensor of shape {tuple(bound.shape)} and dtype "
                             f"{bound.dtype}")
        return bound.reshape(()).to(device=device, dtype=torch.int64)
    if isinstance(bound, bool) or not isinstance(bound, int):
        raise ValueError(f"fori_loop: {name} must be an integer or a one-element integer "
                         f"tensor, got {type(bound).__name__} {bound!r}")
    return torch.tensor(bound, dtype=torch.int64, device=device)
