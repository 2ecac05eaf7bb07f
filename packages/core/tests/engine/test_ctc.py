"""CTC loss on the xla device gives eager CPU's losses and gradients, on the device.

`_ctc_loss` and its backward ran on the CPU (no lowering; no meta kernel for the
backward). The engine's rule (`lazy/special.py`) now computes both with JAX recursions
(`lowering/ops/losses.py`) and feeds the lengths, which torch passes as int lists, as
arrays, so a batch of new lengths reuses the step's program.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

from .helpers import assert_close

T, B, C, S = 12, 4, 6, 5
# Sequence 2 has an empty target; sequence 3 cannot be aligned (4 labels, 3 steps).
INPUT_LENGTHS = torch.tensor([12, 10, 7, 3])
TARGET_LENGTHS = torch.tensor([5, 3, 0, 4])


def _batch(concatenated: bool, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(T, B, C, generator=g, dtype=dtype)
    targets = torch.randint(1, C, (B, S), generator=g)
    if concatenated:
        targets = torch.cat([targets[b, :n] for b, n in enumerate(TARGET_LENGTHS.tolist())])
    return logits, targets


def _loss_and_grads(logits, targets, device, **options):
    """The loss, the logits' gradient and the log-probabilities' own gradient (torch's
    CTC backward formula, which differs from the log-probabilities' true gradient by
    exp(log_probs))."""
    x = logits.detach().to(device).requires_grad_()
    log_probs = x.log_softmax(-1)
    log_probs.retain_grad()
    loss = nn.CTCLoss(**options)(log_probs, targets.to(device), INPUT_LENGTHS, TARGET_LENGTHS)
    loss.sum().backward()
    if device.type != "cpu":
        xm.mark_step()
    return [t.cpu() for t in (loss.detach(), x.grad, log_probs.grad)]


@pytest.mark.parametrize("concatenated", [False, True], ids=["padded", "concatenated"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_and_gradients_match_eager_on_the_device(device, concatenated, reduction,
                                                          zero_infinity):
    logits, targets = _batch(concatenated)
    options = {"reduction": reduction, "zero_infinity": zero_infinity}
    expected = _loss_and_grads(logits, targets, torch.device("cpu"), **options)
    met.clear_all()
    actual = _loss_and_grads(logits, targets, device, **options)
    assert met.executed_fallback_ops() == []
    for got, want in zip(actual, expected, strict=True):
        # the impossible sequence's loss is inf and its gradients NaN without zero_infinity
        assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_ctc_loss_in_float64_matches_eager(device):
    logits, targets = _batch(False, torch.float64)
    expected = _loss_and_grads(logits, targets, torch.device("cpu"), zero_infinity=True)
    actual = _loss_and_grads(logits, targets, device, zero_infinity=True)
    for got, want in zip(actual, expected, strict=True):
        assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_batches_of_new_lengths_reuse_the_training_step(device):
    """Input lengths, and target lengths with the same longest target, are data: once the
    step's program is settled (the second step donates the first's buffers, a program of
    its own) no batch compiles."""
    torch.manual_seed(0)
    model = nn.Linear(8, C).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    compiles = []
    for input_lengths, target_lengths in (([12, 10, 7, 5], [5, 3, 2, 4]),
                                          ([11, 12, 9, 6], [2, 5, 1, 3]),
                                          ([8, 12, 12, 12], [4, 4, 5, 0]),
                                          ([3, 4, 5, 6], [1, 1, 5, 2])):
        x = torch.randn(T, B, 8, generator=g).to(device)
        targets = torch.randint(1, C, (B, S), generator=g).to(device)
        opt.zero_grad()
        log_probs = model(x).log_softmax(-1)
        nn.CTCLoss()(log_probs, targets, input_lengths, target_lengths).backward()
        opt.step()
        xm.mark_step()
        compiles.append(met.metric_data("CompileTime")[0])
    assert compiles[3] == compiles[2] == compiles[1], compiles
    assert met.executed_fallback_ops() == []


def test_ctc_loss_errors_are_torchs(device):
    log_probs = torch.randn(3, 1, 4).log_softmax(-1).to(device)
    targets = torch.tensor([[1, 2]]).to(device)
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 3"):
        nn.functional.ctc_loss(log_probs, targets, [4], [2])
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        nn.functional.ctc_loss(log_probs, targets, [3], [2], blank=9)
