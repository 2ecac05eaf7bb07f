"""The nested tensors of torch's transformer fast path, held in padded form.

In eval mode, `nn.TransformerEncoder` given a `src_key_padding_mask` turns its input
into a nested tensor (`torch._nested_tensor_from_mask`: each sequence cut to its
length), runs every layer's fused kernel (`torch._transformer_encoder_layer_fwd`) on it
and pads the result back (`to_padded_tensor`), so padded positions come out as zeros.
It does so on any PrivateUse1 device, ours included. The engine has no general nested
tensors; it holds such a tensor as the padded tensor it came from plus the mask of the
positions the nested tensor keeps (`NestedTensor`). Those three ops are the only ones
that take it: the encoder layer's kernel applies the mask as a key padding mask (the
positions a nested tensor drops take part in no valid position's result), and
`to_padded_tensor` writes the padding value over the dropped positions. Any other op
refuses it with an error that says what happened, rather than reading the padded
positions as data."""

from __future__ import annotations

import torch

from torch_xla.lazy import functional
from torch_xla.lazy.dispatch import special
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering.decompositions import decomposition_for

aten = torch.ops.aten


class NestedTensor(XLATensor):
    """A nested tensor of the encoder's fast path: the padded tensor's value, and `kept`,
    the (B, T) mask of the positions the nested tensor keeps. Only the three rules below
    take it; any other op refuses it (`refused`), since it would read the padded positions
    as data."""

    __slots__ = ("kept",)

    def refused(self) -> RuntimeError:
        return RuntimeError(
            "nn.TransformerEncoder's fast path made a nested tensor (it was given a "
            "src_key_padding_mask in eval mode), which the xla device holds only between "
            "the encoder's layers, and an op outside that path received it: a layer after "
            "the first took torch's unfused path (a forward hook on it does that). Remove "
            "the hook, or build the encoder with enable_nested_tensor=False.")


def _kept(t: XLATensor) -> XLATensor | None:
    """The mask of the positions nested tensor `t` keeps; None for a dense tensor."""
    return t.kept if type(t) is NestedTensor else None


def _nested(padded: XLATensor, kept: XLATensor) -> NestedTensor:
    out = NestedTensor(*padded.value)
    out.kept = kept
    return out


def _dense(t: XLATensor) -> XLATensor:
    return XLATensor(*t.value)


@special(aten._nested_tensor_from_mask.default)
def _from_mask(func, args, kwargs):
    t, mask = args[0], args[1]
    mask_check = args[2] if len(args) > 2 else kwargs.get("mask_check", True)
    if mask.dtype != torch.bool:
        raise RuntimeError("Expected mask to be of type Bool")
    if t.dim() != 3 or tuple(mask.shape) != tuple(t.shape[:2]):
        raise RuntimeError(f"_nested_tensor_from_mask expects a 3-D tensor and a mask of its "
                           f"first two dimensions, got {tuple(t.shape)} and {tuple(mask.shape)}")
    if mask_check and not aten._nested_tensor_from_mask_left_aligned.default(t, mask):
        raise RuntimeError("Mask must be left-aligned without gaps")
    return _nested(t, mask)


@special(aten._nested_tensor_from_mask_left_aligned.default)
def _left_aligned(func, args, kwargs):
    """Whether each row of the mask is a run of True then a run of False (a host read)."""
    mask = args[1]
    if mask.dtype != torch.bool:
        raise RuntimeError("Expected mask to be of type Bool")
    if mask.shape[1] < 2:
        return True
    gaps = aten.logical_and.default(aten.logical_not.default(mask[:, :-1]), mask[:, 1:])
    return not bool(aten.any.default(gaps).item())


@special(aten._transformer_encoder_layer_fwd.default)
def _encoder_layer(func, args, kwargs):
    layer = decomposition_for(func)
    kept = _kept(args[0])
    if kept is None:
        return functional.decomposed(layer, args, kwargs)
    given = args[18] if len(args) > 18 else kwargs.get("mask")
    if given is not None:
        raise RuntimeError("NestedTensor with mask is not supported yet")
    args = (_dense(args[0]), *args[1:18], aten.logical_not.default(kept), 1)
    kwargs = {k: v for k, v in kwargs.items() if k not in ("mask", "mask_type")}
    return _nested(functional.decomposed(layer, args, kwargs), kept)


@special(aten.to_padded_tensor.default)
def _to_padded(func, args, kwargs):
    t, padding = args[0], args[1]
    size = args[2] if len(args) > 2 else kwargs.get("output_size")
    kept = _kept(t)
    t = _dense(t)
    if kept is None:
        raise NotImplementedError(
            "to_padded_tensor takes a nested tensor; the xla device makes them only in "
            "nn.TransformerEncoder's fast path (torch._nested_tensor_from_mask)")
    out = aten.where.ScalarOther(aten.unsqueeze.default(kept, -1), t, padding)
    if size is None:  # as long as the longest sequence: its length is read from the device
        return aten.slice.Tensor(out, 1, 0, int(aten.sum.dim_IntList(kept, [1]).max().item()))
    if len(size) != out.dim() or any(s < n for s, n in zip(size, out.shape, strict=True)):
        raise RuntimeError(f"to_padded_tensor: output_size {list(size)} is smaller than the "
                           f"padded tensor {list(out.shape)}")
    widths = [w for s, n in zip(reversed(size), reversed(out.shape), strict=True)
              for w in (0, s - n)]
    return aten.constant_pad_nd.default(out, widths, padding)
