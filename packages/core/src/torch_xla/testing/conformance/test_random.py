"""Random numbers: reproducible under a seed, different across seeds, well distributed."""

import torch

import torch_xla.core.xla_model as xm


def draw(device, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(2000, device=device).cpu()


def test_manual_seed_makes_draws_reproducible(device):
    torch.testing.assert_close(draw(device, 7), draw(device, 7), rtol=0, atol=0)
    assert not torch.equal(draw(device, 7), draw(device, 8))


def test_rng_state_round_trips(device):
    xm.set_rng_state(1234)
    first = torch.rand(100, device=device).cpu()
    xm.set_rng_state(1234)
    torch.testing.assert_close(torch.rand(100, device=device).cpu(), first, rtol=0, atol=0)


def test_distributions_have_the_right_moments(device):
    torch.manual_seed(0)
    normal = torch.randn(20000, device=device).cpu()
    uniform = torch.rand(20000, device=device).cpu()
    assert abs(normal.mean().item()) < 0.05 and abs(normal.std().item() - 1) < 0.05
    assert 0 <= uniform.min().item() and uniform.max().item() < 1
    assert abs(uniform.mean().item() - 0.5) < 0.02
