"""The seed snippet "Running on a Single XLA Device" (xla-devices-api.md), unmodified apart
from its data and model definitions, trains to the same losses as the same loop in eager."""

from __future__ import annotations

import copy

import torch
from torch import nn, optim

from torch_xla.testing.models import MNIST

lr, momentum = 0.01, 0.5


def _loader(steps=12, batch=32):
    g = torch.Generator().manual_seed(0)
    # Learnable fake digits: the label decides the mean of the image.
    for _ in range(steps):
        target = torch.randint(0, 10, (batch,), generator=g)
        data = torch.randn(batch, 1, 28, 28, generator=g) * 0.5 + target.view(-1, 1, 1, 1) / 5
        yield data, target


def _seed_loop(train_loader, device, model, losses):
    import torch_xla.core.xla_model as xm

    # --- the seed snippet ---
    device = xm.xla_device()
    model = model.train().to(device)
    loss_fn = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    for data, target in train_loader:
        optimizer.zero_grad()
        data = data.to(device)
        target = target.to(device)
        output = model(data)
        loss = loss_fn(output, target)
        loss.backward()

        optimizer.step()
        xm.mark_step()
        losses.append(loss)  # kept to compare with eager
    # --- end of the seed snippet ---
    return model


def _eager_loop(train_loader, model, losses):
    loss_fn = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for data, target in train_loader:
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return model


def test_seed_mnist_loop_trains_like_eager():
    import torch_xla.debug.metrics as met

    torch.manual_seed(0)
    eager = MNIST().train()
    initial = copy.deepcopy(eager)
    eager_losses, xla_losses = [], []
    _eager_loop(_loader(), eager, eager_losses)
    trained = _seed_loop(_loader(), None, initial, xla_losses)
    xla = torch.stack([loss.cpu() for loss in xla_losses])
    reference = torch.stack(eager_losses)
    torch.testing.assert_close(xla, reference, rtol=1e-4, atol=1e-4)
    assert xla[-3:].mean() < reference[0] * 0.9  # it learned something
    for p, q in zip(trained.parameters(), eager.parameters(), strict=False):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-4, atol=1e-4)
    assert met.counter_value("CachedCompile") >= 9
    assert not [n for n in met.counter_names() if n.startswith("aten::")]
