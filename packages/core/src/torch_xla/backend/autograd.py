"""Backward passes on xla devices run on the calling thread.

The autograd engine gives each non-CPU device index a ready queue served by a
worker thread, and sizes that list once, at the first `backward()` of the
process, from each device guard's `deviceCount()`. The Python device guard
that torch 2.13 lets a PrivateUse1 backend register (`torch._C._acc`) always
reports one device, so a backward pass on `xla:1` finds no queue (an internal
assert in `engine.cpp`), and a process whose first backward ran before
`import torch_xla` has no queue even for `xla:0`. With autograd's
multithreading disabled (`torch.autograd.set_multithreading_enabled(False)`)
the engine uses no device queue at all: the calling thread runs every node,
as it always does for CPU tensors. torch has no hook for that per backward
pass, so we install an engine object that turns it off around each one.
"""

from __future__ import annotations

import torch
from torch.autograd.variable import Variable


class CallingThreadEngine(torch._C._ImperativeEngine):
    """Autograd's Python engine, with every backward pass run on the calling thread."""

    def run_backward(self, *args, **kwargs):
        enabled = torch._C._is_multithreading_enabled()
        torch._C._set_multithreading_enabled(False)
        try:
            return super().run_backward(*args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(enabled)


def register() -> None:
    if not isinstance(Variable._execution_engine, CallingThreadEngine):
        Variable._execution_engine = CallingThreadEngine()
