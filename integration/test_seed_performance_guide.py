"""The single-device snippets of performance-guide.md, unmodified apart from their data
and model definitions, against eager PyTorch on the CPU."""

from __future__ import annotations

import copy

import torch
from test_seed_mnist import MNIST, _loader
from torch import nn, optim

lr, momentum = 0.01, 0.5


def test_creating_and_printing_a_tensor(capsys):
    # --- the seed snippet ---
    import torch

    import torch_xla  # noqa: F401
    import torch_xla.core.xla_model as xm

    x = torch.randn(4, 2, device=xm.xla_device())
    print(x.device)
    print(x)
    # --- end of the seed snippet ---
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "xla:0"
    assert out[1].startswith("tensor([[") and "device='xla:0'" in "".join(out)


def eager_losses(model: nn.Module) -> torch.Tensor:
    loss_fn = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    losses = []
    for data, target in _loader():
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def test_native_pytorch_api_with_optimizer_step_barrier():
    torch.manual_seed(0)
    reference_model = MNIST()
    initial = copy.deepcopy(reference_model)
    reference = eager_losses(reference_model.train())
    train_loader, losses = _loader(), []

    # --- the seed snippet ---
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()
    model = initial.to(device)  # was: MNIST()
    loss_fn = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    model.train()
    for data, target in train_loader:
      optimizer.zero_grad()
      data = data.to(device)
      target = target.to(device)
      output = model(data)
      loss = loss_fn(output, target)
      loss.backward()
      xm.optimizer_step(optimizer, barrier=True)
      losses.append(loss)  # kept to compare with eager
    # --- end of the seed snippet ---

    torch.testing.assert_close(torch.stack([v.cpu() for v in losses]), reference,
                               rtol=1e-4, atol=1e-4)


def test_parallel_loader_per_device_loader_on_one_device():
    torch.manual_seed(0)
    reference_model = MNIST()
    initial = copy.deepcopy(reference_model)
    reference = eager_losses(reference_model.train())
    train_loader, losses = list(_loader()), []

    # --- the seed snippet (the body of _mp_fn, run in this process) ---
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as dp

    device = xm.xla_device()
    para_loader = dp.ParallelLoader(train_loader, [device])

    model = initial.to(device)  # was: MNIST()
    loss_fn = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    model.train()
    for data, target in para_loader.per_device_loader(device):
      optimizer.zero_grad()
      output = model(data)
      loss = loss_fn(output, target)
      loss.backward()
      xm.optimizer_step(optimizer)
      losses.append(loss)  # kept to compare with eager
    # --- end of the seed snippet ---

    torch.testing.assert_close(torch.stack([v.cpu() for v in losses]), reference,
                               rtol=1e-4, atol=1e-4)
