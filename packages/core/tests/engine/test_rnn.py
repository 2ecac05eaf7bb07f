"""Recurrent layers on the xla device give eager CPU's outputs and gradients.

On a PrivateUse1 device torch computes each LSTM/GRU step with its fused CUDA cell ops
(`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell` and their backwards), which have no
CPU kernel: the engine decomposes them (`lowering/decompositions.py`). The CPU takes
torch's unfused path, so these compare two different formulations of each cell.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torch_xla.core.xla_model as xm

from .helpers import assert_close

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}

MODULES = {
    "lstm-2-layers-bidirectional": (
        lambda: nn.LSTM(5, 7, num_layers=2, batch_first=True, bidirectional=True), (3, 4, 5)),
    "lstm-projection": (lambda: nn.LSTM(5, 7, proj_size=3), (4, 3, 5)),
    "lstm-no-bias": (lambda: nn.LSTM(5, 7, bias=False), (4, 3, 5)),
    "gru-2-layers": (lambda: nn.GRU(5, 7, num_layers=2, batch_first=True), (3, 4, 5)),
    "gru-no-bias-bidirectional": (lambda: nn.GRU(5, 7, bias=False, bidirectional=True),
                                  (4, 3, 5)),
    "lstm-cell": (lambda: nn.LSTMCell(5, 7), (3, 5)),
    "gru-cell": (lambda: nn.GRUCell(5, 7), (3, 5)),
}


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _tensors(o)]


def _run(module: nn.Module, x: torch.Tensor, device) -> tuple[list, torch.Tensor, list]:
    """Outputs, the input's gradient and the parameters' gradients of sum(out**2)."""
    x = x.detach().to(device).requires_grad_()
    outputs = _tensors(module(x))
    sum(o.square().sum() for o in outputs).backward()
    if device.type != "cpu":
        xm.mark_step()
    return outputs, x.grad, [p.grad for p in module.parameters()]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_recurrent_module_forward_and_backward_match_eager(device, name):
    make, shape = MODULES[name]
    torch.manual_seed(0)
    cpu = make()
    xla = copy.deepcopy(cpu).to(device)
    x = torch.randn(shape)
    (outs, x_grad, grads), (xouts, xx_grad, xgrads) = _run(cpu, x, torch.device("cpu")), \
        _run(xla, x, device)
    assert len(outs) == len(xouts)
    for got, expected in zip(xouts + [xx_grad] + xgrads, outs + [x_grad] + grads, strict=True):
        assert_close(got, expected, **TOLERANCE)


@pytest.mark.parametrize("lengths", [[5, 3, 2], [2, 5, 3]], ids=["sorted", "unsorted"])
def test_lstm_over_a_packed_batch_matches_eager(device, lengths):
    """`_pack_padded_sequence` takes CPU lengths and gives CPU step sizes
    (`backend/host_arguments.py`); unsorted lengths go through torch's enforce_sorted=False."""
    torch.manual_seed(0)
    cpu = nn.LSTM(4, 6, batch_first=True)
    xla = copy.deepcopy(cpu).to(device)
    x, lengths = torch.randn(3, 5, 4), torch.tensor(lengths)

    def run(module, dev):
        inputs = x.to(dev).requires_grad_()
        packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True,
                                                   enforce_sorted=False)
        assert packed.batch_sizes.device.type == "cpu"
        out, (h, c) = module(packed)
        padded, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        (padded.square().sum() + h.sum() + c.sum()).backward()
        return [padded, h, c, inputs.grad, *[p.grad for p in module.parameters()]]

    for got, expected in zip(run(xla, device), run(cpu, "cpu"), strict=True):
        assert_close(got, expected, **TOLERANCE)


def test_gru_cell_double_backward_matches_eager(device):
    """create_graph=True: autograd differentiates torch's differentiable cell backward."""
    torch.manual_seed(0)
    cpu = nn.GRUCell(3, 4)
    xla = copy.deepcopy(cpu).to(device)
    x = torch.randn(2, 3)

    def run(module, dev):
        inputs = x.to(dev).requires_grad_()
        (g,) = torch.autograd.grad(module(inputs).tanh().sum(), inputs, create_graph=True)
        (gg,) = torch.autograd.grad(g.square().sum(), inputs)
        return g, gg

    for got, expected in zip(run(xla, device), run(cpu, "cpu"), strict=True):
        assert_close(got, expected, **TOLERANCE)


@pytest.mark.parametrize("lengths, message", [
    ([3, 5, 2], "must be sorted in decreasing order"),
    ([5, 3, 0], "every length must be positive"),
    ([6, 3, 2], "longer than the 5 steps"),
])
def test_packing_bad_lengths_is_refused_with_the_reason(device, lengths, message):
    x = torch.randn(3, 5, 4).to(device)
    with pytest.raises(RuntimeError, match=message):
        nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), batch_first=True)


def test_packed_lstm_under_inference_mode_matches_eager(device):
    """inference_mode skips the autograd keys: the functionalization-key kernel packs."""
    torch.manual_seed(0)
    cpu = nn.LSTM(4, 6, batch_first=True)
    xla = copy.deepcopy(cpu).to(device)
    x, lengths = torch.randn(3, 5, 4), torch.tensor([5, 3, 2])

    def run(module, dev):
        with torch.inference_mode():
            packed = nn.utils.rnn.pack_padded_sequence(x.to(dev), lengths, batch_first=True)
            out, (h, c) = module(packed)
            return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0], h, c

    for got, expected in zip(run(xla, device), run(cpu, "cpu"), strict=True):
        assert_close(got, expected, **TOLERANCE)
