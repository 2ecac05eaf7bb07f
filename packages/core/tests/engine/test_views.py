"""Views and in-place ops keep eager semantics: writes through a view reach the base and
every sibling view (functionalization does the bookkeeping, the engine records pure ops)."""

from __future__ import annotations

import pytest
import torch

import torch_xla

from .helpers import assert_close


def _select_add(x):
    x[0].add_(1)


def _view_mul(x):
    x.view(-1).mul_(2)


def _transpose_inplace(x):
    x.t_()


def _setitem_column(x):
    x[:, 1] = torch.tensor([7.0, 8.0]).to(x.device)


def _unsqueeze_inplace(x):
    x.unsqueeze_(0)


def _sibling_views(x):
    a, b = x[0], x[:, 2]
    a.mul_(10)
    b.sub_(1)


def _chain_of_views(x):
    x[:, 1:].t()[::2].fill_(-5)


def _zero_and_copy(x):
    y = x.clone()
    x.zero_()
    x.diagonal().copy_(y.diagonal())


CASES = [
    _select_add,
    _view_mul,
    _transpose_inplace,
    _setitem_column,
    _unsqueeze_inplace,
    _sibling_views,
    _chain_of_views,
    _zero_and_copy,
]


@pytest.mark.parametrize("mutate", CASES, ids=lambda f: f.__name__.strip("_"))
def test_inplace_through_views_matches_eager(device, mutate):
    eager = torch.arange(6.0).reshape(2, 3)
    lazy = eager.to(device)
    mutate(eager)
    mutate(lazy)
    assert lazy.shape == eager.shape
    assert_close(lazy, eager)


def test_view_sees_later_writes_to_base(device):
    x = torch.zeros(4).to(device)
    v = x[1:3]
    x.add_(1)
    torch_xla.sync()
    x.mul_(3)
    assert_close(v, torch.full((2,), 3.0))
    assert_close(x, torch.full((4,), 3.0))


def test_inplace_on_view_survives_mark_step(device):
    x = torch.ones(2, 2).to(device)
    x[1].add_(4)
    torch_xla.sync()
    assert_close(x, torch.tensor([[1.0, 1.0], [5.0, 5.0]]))


def test_inplace_on_parameter_under_no_grad(device):
    w = torch.ones(3).to(device).requires_grad_()
    with torch.no_grad():
        w.mul_(2)
    (w * w).sum().backward()
    assert_close(w.grad, torch.full((3,), 4.0))


def test_foreach_inplace_writes_through_views(device):
    eager = [torch.arange(6.0).reshape(2, 3), torch.ones(3), torch.full((3,), 2.0)]
    lazy = [t.to(device) for t in eager]
    for x, y, z in (eager, lazy):
        torch._foreach_mul_([x[1], y], 3.0)
        torch._foreach_addcdiv_([x.t()[0], y[:2]], [z[:2], z[1:]], [z[:2], z[:2]], [0.5, 2.0])
    for e, lz in zip(eager, lazy, strict=True):
        assert_close(lz, e)
