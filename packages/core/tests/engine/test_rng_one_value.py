"""A pending random tensor has one value, whichever graph computes it and however often.

Each random op takes its key when it is recorded (`lazy/rng.py`), so reading the tensor
through a derived tensor first, then itself, gives the same numbers; the key is graph
input data, so a training step with random ops compiles once.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.lowering import registered

# One user-level call per random op the engine lowers (every overload with needs_rng is
# reached by one of these; test_every_lowered_random_op_is_covered checks it).
RANDOM_OPS = {
    "randn": lambda d: torch.randn(500, device=d),
    "rand": lambda d: torch.rand(500, device=d),
    "randint": lambda d: torch.randint(0, 1000, (500,), device=d),
    "randint_low": lambda d: torch.randint(-50, 50, (500,), device=d),
    "randn_like": lambda d: torch.randn_like(torch.zeros(500, device=d)),
    "rand_like": lambda d: torch.rand_like(torch.zeros(500, device=d)),
    "randint_like": lambda d: torch.randint_like(torch.zeros(500, device=d), 1000),
    "randint_like_low": lambda d: torch.randint_like(torch.zeros(500, device=d), -9, 1000),
    "normal_": lambda d: torch.empty(500, device=d).normal_(2.0, 3.0),
    "normal_tensor_tensor": lambda d: torch.normal(
        torch.zeros(500, device=d), torch.ones(500, device=d)),
    "normal_tensor_float": lambda d: torch.normal(torch.zeros(500, device=d), 2.0),
    "normal_float_tensor": lambda d: torch.normal(1.0, torch.ones(500, device=d)),
    "normal_float_float": lambda d: torch.normal(0.0, 1.0, (500,), device=d),
    "uniform_": lambda d: torch.empty(500, device=d).uniform_(-1, 1),
    "bernoulli": lambda d: torch.bernoulli(torch.full((500,), 0.3, device=d)),
    "bernoulli_p": lambda d: torch.zeros(500, device=d).bernoulli_(0.4),
    "bernoulli_tensor": lambda d: torch.zeros(500, device=d).bernoulli_(
        torch.full((500,), 0.6, device=d)),
    "dropout": lambda d: F.dropout(torch.ones(500, device=d), p=0.5, training=True),
    "exponential_": lambda d: torch.empty(500, device=d).exponential_(),
    "cauchy_": lambda d: torch.empty(500, device=d).cauchy_(),
    "geometric_": lambda d: torch.empty(500, device=d).geometric_(0.3),
    "log_normal_": lambda d: torch.empty(500, device=d).log_normal_(),
    "random_": lambda d: torch.empty(500, device=d).random_(),
    "random_to": lambda d: torch.empty(500, device=d).random_(100),
    "random_from": lambda d: torch.empty(500, device=d).random_(-5, 100),
    "randperm": lambda d: torch.randperm(500, device=d),
    "multinomial": lambda d: torch.multinomial(torch.ones(4, 50, device=d), 20),
    "rrelu": lambda d: F.rrelu(-torch.ones(500, device=d), training=True),
}

# Ops with a user call above, by the schema name their call records.
COVERED = {
    "randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "normal",
    "normal_functional", "uniform", "bernoulli", "native_dropout", "exponential", "cauchy",
    "geometric", "log_normal", "random", "randperm", "multinomial", "rrelu_with_noise",
    "rrelu_with_noise_functional",
}


def test_every_lowered_random_op_is_covered():
    lowered = {op._schema.name.split("::")[1] for op, e in registered() if e.needs_rng}
    assert lowered <= COVERED, f"random lowerings without a one-value test: {lowered - COVERED}"


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_derived_tensor_then_itself(device, name):
    torch_xla.sync()
    t = RANDOM_OPS[name](device)
    derived = (t * 1).cpu()  # one graph computes t inside it, then t is computed alone
    itself = t.cpu()
    assert torch.equal(derived, itself)
    assert torch.equal(t.cpu(), itself)  # and reading it again


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_two_graphs_reading_one_pending_tensor(device, name):
    torch_xla.sync()
    t = RANDOM_OPS[name](device)
    a = (t + 0).cpu()
    b = (t * 1).cpu()
    assert torch.equal(a, b)


def test_issue_examples(device):
    t = torch.randn(3, device=device)
    assert torch.equal((t * 1).cpu(), t.cpu())
    x = torch.randn(1000, device=device)
    assert (x > 0).sum().item() == x[x > 0].shape[0]


def test_dropout_loss_and_gradient_use_one_mask(device):
    """The gradient of a dropout step is taken through the mask of the logged loss."""
    torch.manual_seed(0)
    w = torch.ones(64, device=device, requires_grad=True)
    out = F.dropout(w * 3.0, p=0.5, training=True)
    loss = out.sum()
    logged = loss.item()  # the loss alone, in its own graph
    loss.backward()
    kept = (w.grad.cpu() != 0).float()
    # every kept element contributes 3 * 2 (scaled by 1 / (1 - p)) to the loss
    assert logged == pytest.approx(float(kept.sum()) * 6.0)
    torch.testing.assert_close(out.cpu(), kept * 6.0)


def test_manual_seed_reproduces_across_graph_orders(device):
    """The same seed draws the same numbers whichever program computes them. The two
    programs here differ (the first also doubles them), and XLA may evaluate the normal
    transform's polynomial in another order inside another fusion: equal to the last bit
    of float32, where another seed's numbers differ by about 1."""
    torch_xla.sync()
    xm.set_rng_state(42)
    a = torch.randn(100, device=device)
    first = (a * 2).cpu() / 2
    torch_xla.sync()
    xm.set_rng_state(42)
    b = torch.randn(100, device=device)
    torch.testing.assert_close(b.cpu(), first, rtol=2.4e-7, atol=1.2e-7)
    torch_xla.sync()
    xm.set_rng_state(43)
    assert (torch.randn(100, device=device).cpu() - first).abs().max() > 0.5


def test_ops_in_one_step_draw_different_numbers(device):
    torch_xla.sync()
    a, b = torch.rand(100, device=device), torch.rand(100, device=device)
    torch_xla.sync()
    assert not torch.equal(a.cpu(), b.cpu())


def test_a_training_step_with_dropout_compiles_once(device, metrics):
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.ReLU(),
        torch.nn.Linear(16, 1), torch.nn.Dropout(0.2),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    masks = []
    for step in range(5):
        optimizer.zero_grad()
        out = model(torch.ones(4, 8, device=device))
        out.sum().backward()
        optimizer.step()
        xm.mark_step()
        masks.append((out != 0).cpu())
        if step == 1:
            compiled = metrics.counter_value("UncachedCompile")
    assert metrics.counter_value("UncachedCompile") == compiled
    assert not all(torch.equal(masks[0], m) for m in masks[1:])  # new numbers every step
