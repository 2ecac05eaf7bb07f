"""Buffer donation from inside compiled functions, with PyTorch/XLA's names.

- `torch.ops.xla.dynamo_set_buffer_donor_(t, should_donoate)` (the argument is spelled
  so in PyTorch/XLA's schema): on an XLA tensor it calls
  `torch_xla._XLAC._set_buffer_donation`, so the compiled graph takes that argument's
  buffer over for an output of its shape and dtype, on this call and every later one
  (dynamo does not guard on the mark, as in PyTorch/XLA); on any other tensor, and on
  dynamo's fake tensors while it traces, it does nothing. Either way it returns `t`.
- `alias_with_buffer_donor_config(should_alias=True)`: a context in which the buffer-donor
  config (`_xla_set_enable_alias_with_buffer_donor_config`) has the given value: syncs
  that are not a step's donate marked buffers too, and graph hashes name the marks.

Registered when the dynamo bridge is imported, so the op exists wherever
`torch.compile(backend="openxla")` can run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from torch_xla import _XLAC

_LIB = torch.library.Library("xla", "FRAGMENT")  # the namespace is PyTorch/XLA's XLA_LIB
_LIB.define("dynamo_set_buffer_donor_(Tensor t, bool should_donoate) -> Tensor")


@torch.library.impl(_LIB, "dynamo_set_buffer_donor_", "XLA")
def dynamo_set_buffer_donor_xla_(t: torch.Tensor, should_donoate: bool) -> torch.Tensor:
    _XLAC._set_buffer_donation(t, should_donoate)
    return t


@torch.library.impl(_LIB, "dynamo_set_buffer_donor_", "CompositeExplicitAutograd")
def dynamo_set_buffer_donor_(t: torch.Tensor, should_donoate: bool) -> torch.Tensor:
    return t  # not an XLA tensor (or dynamo's fake one): nothing to mark


@contextlib.contextmanager
def alias_with_buffer_donor_config(should_alias: bool = True) -> Iterator[bool]:
    """Set the buffer-donor config inside the block; yields the value it had before."""
    saved = _XLAC._xla_get_enable_alias_with_buffer_donor_config()
    _XLAC._xla_set_enable_alias_with_buffer_donor_config(should_alias)
    try:
        yield saved
    finally:
        _XLAC._xla_set_enable_alias_with_buffer_donor_config(saved)
