"""Callbacks on device buffers (PyTorch/XLA's `torch_xla.experimental.callback`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

import torch_xla


def on_ready_callback(tensor: torch.Tensor, callback: Callable[[torch.Tensor], Any]) -> None:
    """Call `callback(tensor)` once the device buffer of `tensor` holds its value, on a
    thread of its own (so the caller does not wait). `tensor` must already have a buffer:
    the result of a `torch_xla.sync()`, of `torch_xla.compile`, or data moved to the
    device; a still-pending tensor is refused with what to do."""
    torch_xla._XLAC._on_ready_callback(tensor, lambda: callback(tensor))


def on_ready_event(tensor: torch.Tensor) -> threading.Event:
    """A `threading.Event` set once the device buffer of `tensor` holds its value (the
    same rules as `on_ready_callback`): `on_ready_event(t).wait(timeout)`."""
    ready = threading.Event()
    on_ready_callback(tensor, lambda _: ready.set())
    return ready
