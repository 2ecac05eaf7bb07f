"""Transformer modules in eval mode on the xla device give eager CPU's outputs, on the device.

With no gradient wanted, nn.MultiheadAttention (self-attention) and
nn.TransformerEncoderLayer call torch's fused kernels (`_native_multi_head_attention`,
`_transformer_encoder_layer_fwd`) on every PrivateUse1 device, and nn.TransformerEncoder
given a key padding mask runs them on a nested tensor. The engine decomposes the kernels
(`lowering/decompositions.py`) and holds the nested tensor in padded form
(`lazy/nested.py`); before, the kernels ran on the CPU and the nested path crashed. Each
test checks that torch took the fused path on both devices, so it tests what it names.
"""

from __future__ import annotations

import copy
from unittest import mock

import pytest
import torch
from torch import nn

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

from .helpers import assert_close

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
E, HEADS, FFN = 16, 4, 32


def _layer(**kw) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(E, HEADS, FFN, dropout=0.0, batch_first=True, **kw)


def _padding(lengths: list[int], length: int) -> torch.Tensor:
    """A key padding mask (True = padding) of sequences of the given lengths."""
    return torch.arange(length)[None, :] >= torch.tensor(lengths)[:, None]


def _in_eval(module, inputs: list, kwargs: dict, device) -> tuple[object, dict]:
    """The module's outputs on `device`, and how often each fused kernel was called."""
    module = copy.deepcopy(module).to(device).eval()
    once = {id(x): x.to(device) for x in inputs}  # self-attention: one tensor, moved once
    moved = [once[id(x)] for x in inputs]
    moved_kw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    calls = {}
    spies = [mock.patch.object(torch, name, wraps=getattr(torch, name))
             for name in ("_native_multi_head_attention", "_transformer_encoder_layer_fwd",
                          "_nested_tensor_from_mask")]
    with torch.no_grad(), spies[0] as mha, spies[1] as layer, spies[2] as nested:
        out = module(*moved, **moved_kw)
        calls = {"mha": mha.call_count, "layer": layer.call_count, "nested": nested.call_count}
    if device.type != "cpu":
        xm.mark_step()
    return out, calls


def _outputs(out) -> list:
    return [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]


CASES = {
    # name: (module, inputs, kwargs, the fused kernels torch calls)
    "encoder-layer": (lambda: _layer(), [(3, 7, E)], {}, {"layer"}),
    "encoder-layer-norm-first-gelu": (lambda: _layer(norm_first=True, activation="gelu"),
                                      [(3, 7, E)], {}, {"layer"}),
    "encoder-layer-key-padding": (lambda: _layer(), [(3, 7, E)],
                                  {"src_key_padding_mask": _padding([7, 5, 2], 7)}, {"layer"}),
    "encoder-layer-causal": (lambda: _layer(), [(3, 7, E)],
                             {"src_mask": nn.Transformer.generate_square_subsequent_mask(7),
                              "is_causal": True}, {"layer"}),
    "encoder": (lambda: nn.TransformerEncoder(_layer(), 2, enable_nested_tensor=False),
                [(3, 7, E)], {}, {"layer"}),
    "encoder-nested": (lambda: nn.TransformerEncoder(_layer(), 2, norm=nn.LayerNorm(E)),
                       [(3, 7, E)], {"src_key_padding_mask": _padding([7, 5, 2], 7)},
                       {"layer", "nested"}),
    "mha-self-attention-weights": (lambda: nn.MultiheadAttention(E, HEADS, batch_first=True),
                                   ["x", "x", "x"], {}, {"mha"}),
    "mha-weights-per-head-key-padding": (
        lambda: nn.MultiheadAttention(E, HEADS, batch_first=True), ["x", "x", "x"],
        {"key_padding_mask": _padding([7, 4, 1], 7), "average_attn_weights": False}, {"mha"}),
    "mha-attn-mask-and-key-padding": (
        lambda: nn.MultiheadAttention(E, HEADS, batch_first=True), ["x", "x", "x"],
        {"attn_mask": torch.ones(7, 7, dtype=torch.bool).triu(1),  # a float mask: no fast path
         "key_padding_mask": _padding([7, 4, 1], 7), "need_weights": False}, {"mha"}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_transformer_kernels_run_on_the_device_and_match_eager(device, name):
    make, shapes, kwargs, fused = CASES[name]
    torch.manual_seed(0)
    module = make()
    x = torch.randn(3, 7, E)
    inputs = [x if s == "x" else torch.randn(s) for s in shapes]
    expected, cpu_calls = _in_eval(module, inputs, kwargs, torch.device("cpu"))
    met.clear_all()
    actual, xla_calls = _in_eval(module, inputs, kwargs, device)
    # the nested path's check that the padding mask is left-aligned is a host read, which
    # PyTorch/XLA counts as the fallback `aten::_local_scalar_dense`
    reads = ["aten::_local_scalar_dense"] if "nested" in fused else []
    assert met.executed_fallback_ops() == reads
    assert {k for k, n in cpu_calls.items() if n} == fused, cpu_calls
    assert {k for k, n in xla_calls.items() if n} == fused, xla_calls
    expected, actual = _outputs(expected), _outputs(actual)
    for a, e in zip(actual, expected, strict=True):
        assert_close(a.cpu(), e, **TOLERANCE)


def test_nested_encoder_zeroes_the_padding_as_on_the_cpu(device):
    """The nested path's padded positions come out as zeros (before the final norm)."""
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(_layer(), 2)
    x, mask = torch.randn(3, 7, E), _padding([7, 5, 2], 7)
    out, _ = _in_eval(encoder, [x], {"src_key_padding_mask": mask}, device)
    assert (out.cpu()[mask] == 0).all()
    assert (out.cpu()[~mask] != 0).all()


def test_a_padding_mask_not_left_aligned_takes_the_dense_path(device):
    """Left padding (padding first) is not a nested tensor's layout: torch checks on the
    device (a host read) and runs the layers densely, as on the CPU."""
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(_layer(), 2)
    x, mask = torch.randn(3, 7, E), _padding([7, 5, 2], 7).flip(1)
    expected, cpu_calls = _in_eval(encoder, [x], {"src_key_padding_mask": mask},
                                   torch.device("cpu"))
    actual, xla_calls = _in_eval(encoder, [x], {"src_key_padding_mask": mask}, device)
    assert cpu_calls["nested"] == xla_calls["nested"] == 0
    assert_close(actual.cpu(), expected, **TOLERANCE)


@pytest.mark.parametrize("output_size", [None, (2, 6, 5)])
def test_to_padded_tensor_of_a_nested_tensor_matches_the_cpu(device, output_size):
    """Without output_size the result is as long as the longest sequence (read from the
    device); with one, padded up to it."""
    t = torch.randn(2, 4, 5)
    kept = ~_padding([3, 1], 4)
    expected = torch._nested_tensor_from_mask(t, kept).to_padded_tensor(9.0, output_size)
    nested = torch._nested_tensor_from_mask(t.to(device), kept.to(device))
    actual = nested.to_padded_tensor(9.0, output_size)
    assert actual.shape == expected.shape
    assert_close(actual.cpu(), expected)


def test_nested_tensor_errors_are_torchs(device):
    t = torch.randn(2, 4, 5, device=device)
    with pytest.raises(RuntimeError, match="left-aligned"):
        torch._nested_tensor_from_mask(t, torch.tensor([[1, 0, 1, 0], [1, 1, 0, 0]],
                                                       dtype=torch.bool, device=device))
    with pytest.raises(NotImplementedError, match="to_padded_tensor takes a nested tensor"):
        t.to_padded_tensor(0.0)
    assert torch._nested_tensor_from_mask_left_aligned(t, ~_padding([4, 2], 4).to(device))
    assert not torch._nested_tensor_from_mask_left_aligned(t, _padding([4, 2], 4).to(device))


@pytest.mark.parametrize("mask_type,mask_shape,dim", [
    (None, (2, 3, 5, 5), 3), (None, (2, 3, 5, 5), 1), (1, (2, 5), 3), (0, (5, 5), 3)])
def test_masked_softmax_matches_the_cpu(device, mask_type, mask_shape, dim):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 5)
    mask = torch.rand(mask_shape) < 0.3
    expected = torch._masked_softmax(x, mask, dim, mask_type)
    met.clear_all()
    actual = torch._masked_softmax(x.to(device), mask.to(device), dim, mask_type)
    xm.mark_step()
    assert met.executed_fallback_ops() == []
    assert_close(actual.cpu(), expected, equal_nan=True)


def test_masked_softmax_gradient_matches_the_cpu(device):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 5)
    mask = torch.rand(2, 3, 5, 5) < 0.3
    grads = []
    for dev in (torch.device("cpu"), device):
        met.clear_all()
        leaf = x.detach().to(dev).requires_grad_()
        torch._masked_softmax(leaf, mask.to(dev), 2).square().nansum().backward()
        grads.append(leaf.grad.cpu())
    assert met.executed_fallback_ops() == []
    assert_close(grads[1], grads[0], equal_nan=True)


def test_masked_softmax_refuses_what_the_cpu_refuses(device):
    x = torch.randn(2, 3, 5, 5, device=device)
    with pytest.raises(RuntimeError, match="Mask should be a boolean tensor"):
        torch._masked_softmax(x, torch.zeros(2, 3, 5, 5, device=device), 3)
    with pytest.raises(RuntimeError, match="mask shape should be \\(B, L\\)"):
        torch._masked_softmax(x, torch.zeros(3, 5, dtype=torch.bool, device=device), 3, 1)


def test_an_encoder_without_mask_check_reads_nothing_on_the_host(device):
    """`mask_check=False` skips torch's left-alignment check, the nested path's one read."""
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(_layer(), 2, mask_check=False)
    x, mask = torch.randn(3, 7, E), _padding([7, 5, 2], 7)
    expected, _ = _in_eval(encoder, [x], {"src_key_padding_mask": mask}, torch.device("cpu"))
    met.clear_all()
    actual, calls = _in_eval(encoder, [x], {"src_key_padding_mask": mask}, device)
    assert calls["nested"] == 1
    assert met.executed_fallback_ops() == []
    assert_close(actual.cpu(), expected, **TOLERANCE)


def test_a_nested_tensor_reaching_an_unfused_layer_is_refused_with_the_reason(device):
    """A forward hook on a later layer sends the nested tensor through torch's unfused
    path, which would read the padded positions as data: the op refuses it instead."""
    encoder = nn.TransformerEncoder(_layer(), 2).to(device).eval()
    encoder.layers[1].register_forward_hook(lambda module, inputs, output: None)
    x, mask = torch.randn(3, 7, E).to(device), _padding([7, 5, 2], 7).to(device)
    with torch.no_grad(), pytest.raises(RuntimeError, match="enable_nested_tensor=False"):
        encoder(x, src_key_padding_mask=mask)
    encoder.enable_nested_tensor = encoder.use_nested_tensor = False
    with torch.no_grad():
        encoder(x, src_key_padding_mask=mask)  # the advice works
