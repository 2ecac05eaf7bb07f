"""Marking the inputs and outputs of a pattern, which StableHLO shows as one composite
(PyTorch/XLA's `torch_xla.experimental.xla_marker`).

    y = torch.ops.xla.mark_tensor(x, "my.gelu", pos=0, id="0", is_input=True)
    ...                                                   # the pattern's ops
    z = torch.ops.xla.mark_tensor(out, "my.gelu", pos=0, id="0", is_input=False,
                                  attr=serialize_composite_attr({"approximate": "tanh"}))

The op returns its input unchanged. On XLA tensors it records a mark; when the graph is
lowered (`xm.get_stablehlo`, `torch_xla.stablehlo.exported_program_to_stablehlo`, and
every program run), the ops between the input marks and the output marks of one name
and id become `stablehlo.composite "my.gelu" %args {composite_attributes = {...},
decomposition = @my.gelu.impl}` (`lazy/composite.py` says how regions are grouped).
`torch.export` keeps the op in its graph, so exported programs carry the marks too.
Gradients pass through it unmarked. `mark_pattern_utils.StableHLOCompositeBuilder`
makes the calls for you.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import torch
import torch._dynamo as torchdynamo

from torch_xla.core.xla_model import XLA_LIB
from torch_xla.lazy import composite, dispatch
from torch_xla.lowering.composite import attribute_kind

__all__ = ["BoundaryMetadata", "BoundaryMetadataSerializer", "assert_valid_composite_attr",
           "deserialize_composite_attr", "mark_tensor", "mark_tensor_meta", "mark_tensor_xla",
           "serialize_composite_attr"]

XLA_LIB.define("mark_tensor(Tensor x, str name, int pos, str id, bool is_input, "
               "Any? attr=None) -> Tensor")


@dataclasses.dataclass
class BoundaryMetadata:
    """One mark: the pattern's name, the marked tensor's position among its inputs (or
    outputs), the id of the pattern instance, which side it is on, and the attributes."""

    name: str
    pos: int
    id: str
    is_input: bool = True
    attr: dict | None = None


class BoundaryMetadataSerializer(json.JSONEncoder):
    """JSON of `BoundaryMetadata` (`json.dumps(meta, cls=BoundaryMetadataSerializer)`)."""

    def default(self, obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        return super().default(obj)

_ARGUMENTS = ("x", "name", "pos", "id", "is_input", "attr")


def assert_valid_composite_attr(attr: dict | None) -> None:
    """Raise ValueError unless `attr` is None or a dict from str to what a composite can
    carry: a bool, int, float or str, or a flat, non-empty list of bools, ints or floats
    of one kind."""
    if attr is None:
        return
    if not isinstance(attr, dict):
        raise ValueError(f"composite attributes must be a dict, got {type(attr).__name__}")
    for key, value in attr.items():
        if not isinstance(key, str):
            raise ValueError(f"composite attribute names must be str, got {key!r}")
        if attribute_kind(value) is None:
            raise ValueError(
                f"composite attribute {key!r}: {value!r} cannot be carried by a "
                "composite; use a bool, int, float or str, or a flat, non-empty list of "
                "bools, ints or floats of one kind.")


@torchdynamo.assume_constant_result
def serialize_composite_attr(attr: dict | None) -> tuple | None:
    """`attr` as `mark_tensor` takes it (`((key, value), ...)`), checked."""
    if attr is None:
        return None
    assert_valid_composite_attr(attr)
    return tuple(attr.items())


@torchdynamo.assume_constant_result
def deserialize_composite_attr(attr: Any) -> dict | None:
    """What `serialize_composite_attr` made, as a dict again."""
    return None if attr is None else dict(attr)


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _boundary(name: str, pos: int, id: str, is_input: bool, attr: Any
              ) -> composite.Boundary:
    found = dict(attr.items() if isinstance(attr, dict) else attr or ())
    assert_valid_composite_attr(found)
    return composite.Boundary(name, int(pos), str(id), bool(is_input),
                              tuple((k, _frozen(v)) for k, v in found.items()))


@torch.library.impl(XLA_LIB, "mark_tensor", "CompositeExplicitAutograd")
def mark_tensor(x: torch.Tensor, name: str, pos: int, id: str, is_input: bool,
                attr: Any = None) -> torch.Tensor:
    _boundary(name, pos, id, is_input, attr)  # checked on every device alike
    return x.clone()  # not an XLA tensor: nothing to mark (a copy: the op aliases nothing)


@torch.library.impl(XLA_LIB, "mark_tensor", "Meta")
def mark_tensor_meta(x: torch.Tensor, name: str, pos: int, id: str, is_input: bool,
                     attr: Any = None) -> torch.Tensor:
    return torch.empty_like(x)


def _setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
    pass


def _backward(ctx: Any, grad: torch.Tensor) -> tuple:
    return grad, None, None, None, None, None


torch.library.register_autograd("xla::mark_tensor", _backward, setup_context=_setup_context)


def mark_tensor_xla(x: torch.Tensor, name: str, pos: int, id: str, is_input: bool,
                    attr: Any = None) -> torch.Tensor:
    """The op on an XLA tensor (the engine calls it with its tensor `x`): `x` with the mark
    recorded in its graph."""
    return composite.mark(x, _boundary(name, pos, id, is_input, attr))


@dispatch.special(torch.ops.xla.mark_tensor.default)
def _mark_tensor_rule(func, args, kwargs):
    given = {**dict(zip(_ARGUMENTS, args, strict=False)), **kwargs}  # trailing defaults
    return mark_tensor_xla(**given)
