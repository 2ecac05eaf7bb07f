"""Backward passes on any xla device, whatever ran first in the process (fresh processes)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from .helpers import run_python

TRAIN = """
    import json, sys, torch
    {before_import}
    import torch_xla
    import torch_xla.core.xla_model as xm

    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
        for _ in range(3):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            xm.mark_step()
        grads = [p.grad.device.type + ":" + str(p.grad.device.index) for p in model.parameters()]
        return [p.detach().cpu().tolist() for p in model.parameters()], grads

    result = {{name: train(device) for name, device in
              [("cpu", "cpu")] + [(f"xla:{{i}}", xm.xla_device(i)) for i in range(4)]}}
    print(json.dumps(result))
"""


def trained(before_import: str = "") -> dict:
    out = run_python(
        TRAIN.format(before_import=before_import),
        env={"CPU_NUM_DEVICES": "4", "PJRT_DEVICE": "CPU"},
    )
    return json.loads(out.strip().splitlines()[-1])


def assert_like_cpu(result: dict) -> None:
    expected, _ = result["cpu"]
    for i in range(4):
        params, grad_devices = result[f"xla:{i}"]
        assert grad_devices == [f"xla:{i}"] * 4
        for actual, wanted in zip(params, expected, strict=True):
            torch.testing.assert_close(torch.tensor(actual), torch.tensor(wanted))


def test_every_device_of_a_process_trains_like_the_cpu():
    assert_like_cpu(trained())


def test_backward_before_importing_torch_xla():
    """The autograd engine sizes its device queues at the first backward of the process."""
    first_backward = """
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    """
    assert_like_cpu(trained(first_backward))


def test_checkpointed_backward_and_autograd_grad(device):
    """Re-entrant backward passes (checkpointing) and `autograd.grad` on the calling thread."""
    results = {}
    for where in ("cpu", device):
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 4).to(where)
        x = torch.randn(2, 4).to(where).requires_grad_()
        for reentrant in (True, False):
            layer.zero_grad()
            x.grad = None
            checkpoint(layer, x, use_reentrant=reentrant).tanh().sum().backward()
            results[str(where), reentrant] = (layer.weight.grad.cpu(), x.grad.cpu())
        (grad,) = torch.autograd.grad((layer.weight**2).sum(), layer.weight)
        results[str(where), "grad"] = (grad.cpu(),)
    for key in [("cpu", True), ("cpu", False), ("cpu", "grad")]:
        for actual, expected in zip(results[str(device), key[1]], results[key], strict=True):
            torch.testing.assert_close(actual, expected)


def test_cross_entropy_takes_float_class_targets_as_pytorch_xla_does(device):
    """PyTorch/XLA's nll_loss reads a floating target as class indices (CPU PyTorch
    refuses it); the loss and gradient equal CPU PyTorch's with the indices as int64."""
    torch.manual_seed(0)
    logits = torch.randn(6, 5, requires_grad=True)
    target = torch.tensor([0.0, 4.0, 2.0, 1.0, 3.0, 2.0])
    with pytest.raises(RuntimeError, match="Long"):
        torch.nn.functional.cross_entropy(logits, target)
    expected = torch.nn.functional.cross_entropy(logits, target.long())
    expected.backward()
    xla_logits = logits.detach().to(device).requires_grad_()
    loss = torch.nn.functional.cross_entropy(xla_logits, target.to(device))
    loss.backward()
    torch.testing.assert_close(loss.cpu(), expected.detach())
    torch.testing.assert_close(xla_logits.grad.cpu(), logits.grad)
