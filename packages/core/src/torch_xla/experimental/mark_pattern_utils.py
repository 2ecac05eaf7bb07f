"""`StableHLOCompositeBuilder`: mark a pattern's inputs and outputs in one place, so that
StableHLO shows the ops between them as one composite (PyTorch/XLA's
`torch_xla.experimental.mark_pattern_utils`).

    builder = StableHLOCompositeBuilder("my.sdpa", {"scale": 0.25})
    q, k, v = builder.mark_inputs(q, k, v)
    out = F.scaled_dot_product_attention(q, k, v, scale=0.25)
    out = builder.mark_outputs(out)     # use the returned tensors from here on
"""

from __future__ import annotations

import uuid

import torch
import torch._dynamo as torchdynamo

from torch_xla.experimental import xla_marker

__all__ = ["StableHLOCompositeBuilder"]


@torchdynamo.assume_constant_result
def _new_id() -> str:
    return uuid.uuid4().hex


class StableHLOCompositeBuilder:
    """Marks the inputs and outputs of one instance of the composite `name`, whose
    attributes are `attr` (str keys; bool, int, float or str values, or flat lists of
    bools, ints or floats). Each builder is one instance (its own id); call
    `mark_inputs` and `mark_outputs` once each."""

    def __init__(self, name: str, attr: dict | None = None) -> None:
        xla_marker.assert_valid_composite_attr(attr)
        self.name = name
        self.attr = attr
        self.id = _new_id()

    def _mark(self, tensors: tuple, is_input: bool) -> torch.Tensor | tuple:
        attr = None if is_input else xla_marker.serialize_composite_attr(self.attr)
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"{self.name}: only tensors can be marked, got "
                                 f"{type(t).__name__}")
        marked = tuple(torch.ops.xla.mark_tensor(t, name=self.name, pos=pos, id=self.id,
                                                 is_input=is_input, attr=attr)
                       for pos, t in enumerate(tensors))
        return marked[0] if len(marked) == 1 else marked

    def mark_inputs(self, *tensors: torch.Tensor) -> torch.Tensor | tuple:
        """The composite's inputs, marked (one tensor, or a tuple in order): use these
        instead of the tensors given."""
        return self._mark(tensors, is_input=True)

    def mark_outputs(self, *tensors: torch.Tensor) -> torch.Tensor | tuple:
        """The composite's outputs, marked (one tensor, or a tuple in order): use these
        instead of the tensors given."""
        return self._mark(tensors, is_input=False)
