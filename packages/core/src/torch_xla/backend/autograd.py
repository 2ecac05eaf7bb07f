"""Backward passes on xla devices run on the calling thread, and raise the errors
raised in them.

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

Errors: when Python code the engine calls for an xla node raises (an XLA op, a
tensor or module hook), the Python error is still set while C++ unwinds, and the
engine restores the node's stream on the way, through the Python device guard, from
a function that may not throw. Calling Python with an error set fails there, and the
process aborted ("terminate called without an active exception"). So the guard's
`type_`, the one method of it that runs Python, first takes any pending error
(`take_pending_error`), and the engine object raises it when the pass ends with torch's
"returned NULL without setting an exception".
"""

from __future__ import annotations

import functools
import threading

import torch
from torch.autograd.variable import Variable

_taken = threading.local()  # error: the pending error `take_pending_error` took

# A call CPython checks on return: made while an error is set, it raises SystemError
# with that error as its cause. (Calls the interpreter specializes, such as a direct
# call of a builtin, are not checked; a functools.partial's call of one is.)
_check_no_error_pending = functools.partial(id, None)


def take_pending_error() -> None:
    """Clear the calling thread's pending Python error, if any, and keep it for
    `CallingThreadEngine.run_backward` to raise. Costs one C call when none is set."""
    try:
        _check_no_error_pending()
    except SystemError as error:
        _taken.error = error.__cause__


class CallingThreadEngine(torch._C._ImperativeEngine):
    """Autograd's Python engine: every backward pass runs on the calling thread, and an
    error raised in it reaches the caller."""

    def run_backward(self, *args, **kwargs):
        enabled = torch._C._is_multithreading_enabled()
        torch._C._set_multithreading_enabled(False)
        _taken.error = None
        try:
            return super().run_backward(*args, **kwargs)
        except SystemError:  # "returned NULL without setting an exception"
            error = _taken.error
            if error is None:
                raise
        finally:
            _taken.error = None
            torch._C._set_multithreading_enabled(enabled)
        raise error  # outside the handler: the error itself, not chained to torch's


def register() -> None:
    if not isinstance(Variable._execution_engine, CallingThreadEngine):
        Variable._execution_engine = CallingThreadEngine()
