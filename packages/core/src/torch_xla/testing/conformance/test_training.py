"""A compiled training step equals eager PyTorch on the CPU, and is compiled once."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 10), nn.LogSoftmax(dim=1),
    )


def test_sgd_steps_match_eager_and_hit_the_cache(device):
    torch.manual_seed(1)
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
    eager, lazy = make_model(), make_model().to(device)
    e_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    l_opt = torch.optim.SGD(lazy.parameters(), lr=0.05, momentum=0.9)
    compiles = []
    for _ in range(4):
        e_opt.zero_grad()
        e_loss = F.nll_loss(eager(x), y)
        e_loss.backward()
        e_opt.step()
        l_opt.zero_grad()
        l_loss = F.nll_loss(lazy(x.to(device)), y.to(device))
        l_loss.backward()
        l_opt.step()
        xm.mark_step()
        compiles.append(met.counter_value("UncachedCompile") or 0)
        torch.testing.assert_close(l_loss.cpu(), e_loss.detach(), rtol=1e-4, atol=1e-5)
    assert compiles[-1] == compiles[-2], f"recompiled in a steady loop: {compiles}"
    for e, v in zip(eager.state_dict().values(), lazy.state_dict().values(), strict=True):
        torch.testing.assert_close(v.cpu(), e, rtol=1e-4, atol=1e-5)
