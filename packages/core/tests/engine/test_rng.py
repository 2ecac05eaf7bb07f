"""Random ops on the device: reproducible under torch.manual_seed and xm.set_rng_state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm

RANDOM_OPS = {
    "randn": lambda d: torch.randn(1000, device=d),
    "rand": lambda d: torch.rand(1000, device=d),
    "randint": lambda d: torch.randint(0, 10, (1000,), device=d),
    "bernoulli": lambda d: torch.bernoulli(torch.full((1000,), 0.3).to(d)),
    "normal_": lambda d: torch.empty(1000, device=d).normal_(2.0, 3.0),
    "uniform_": lambda d: torch.empty(1000, device=d).uniform_(-1, 1),
    "dropout": lambda d: F.dropout(torch.ones(1000).to(d), p=0.5, training=True),
}


def _draw(device, name, seed):
    torch.manual_seed(seed)
    value = RANDOM_OPS[name](device)
    torch_xla.sync()
    return value.cpu()


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_manual_seed_reproduces(device, name):
    a, b, c = _draw(device, name, 1), _draw(device, name, 1), _draw(device, name, 2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_distributions_look_right(device):
    n = _draw(device, "normal_", 0)
    assert abs(n.mean().item() - 2.0) < 0.4 and abs(n.std().item() - 3.0) < 0.4
    u = _draw(device, "uniform_", 0)
    assert u.min() >= -1 and u.max() <= 1 and abs(u.mean().item()) < 0.1
    r = _draw(device, "randint", 0)
    assert r.dtype == torch.int64 and r.min() >= 0 and r.max() <= 9
    keep = _draw(device, "dropout", 0)
    assert set(keep.unique().tolist()) <= {0.0, 2.0} and 0.4 < (keep > 0).float().mean() < 0.6


def test_successive_draws_differ(device):
    torch.manual_seed(0)
    a = torch.randn(100, device=device)
    torch_xla.sync()
    b = torch.randn(100, device=device)
    c = torch.randn(100, device=device)
    torch_xla.sync()
    assert not torch.equal(a.cpu(), b.cpu()) and not torch.equal(b.cpu(), c.cpu())


def test_get_and_set_rng_state(device):
    xm.set_rng_state(1234)
    assert xm.get_rng_state() == 1234
    a = torch.rand(10, device=device)
    torch_xla.sync()
    assert xm.get_rng_state() != 1234
    xm.set_rng_state(1234)
    b = torch.rand(10, device=device)
    torch_xla.sync()
    assert torch.equal(a.cpu(), b.cpu())


BAD_BOUNDS = {
    "random_ from >= to": (torch.float32, lambda t: t.random_(3, 1)),
    "random_ beyond float16": (torch.float16, lambda t: t.random_(3, 65_504 + 2)),
    "random_ beyond int8": (torch.int8, lambda t: t.random_(0, 300)),
    "uniform_ from > to": (torch.float32, lambda t: t.uniform_(5.0, 2.0)),
}


@pytest.mark.parametrize("dtype,op", BAD_BOUNDS.values(), ids=BAD_BOUNDS.keys())
def test_bad_random_bounds_raise_the_cpus_error_at_once(dtype, op):
    """Meta kernels check no bounds, so these used to sample silently; CPU torch refuses
    them, and so do we, with its message, when the op is called."""
    with pytest.raises(RuntimeError) as cpu:
        op(torch.empty(10, dtype=dtype))
    with pytest.raises(RuntimeError) as ours:
        op(torch.empty(10, dtype=dtype, device=torch_xla.device()))
    assert str(ours.value) == str(cpu.value)


def test_good_random_bounds_sample_within_them():
    t = torch.empty(1000, device=torch_xla.device())
    low = t.random_(2, 5).cpu()
    assert low.min() >= 2 and low.max() <= 4
    uniform = t.uniform_(-1.0, 3.0).cpu()
    assert uniform.min() >= -1.0 and uniform.max() < 3.0
