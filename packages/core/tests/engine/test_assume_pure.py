"""`assume_pure`: a pure function recorded once per signature and replayed as one node, its
values and gradients equal to eager CPU PyTorch's."""

from __future__ import annotations

import copy
import functools

import jax.numpy as jnp
import pytest
import torch
from torch import nn

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_builder as xb
from torch_xla.experimental.assume_pure import (
    ImpureFunctionError,
    PureModule,
    assume_pure,
    assume_pure_torch,
    j2t_autograd,
)

from .helpers import assert_close

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _pair(*shapes, grad=True):
    """CPU tensors and XLA copies of them, both leaves that require grad when `grad`."""
    cpu = [torch.randn(*s).requires_grad_(grad) for s in shapes]
    xla = [t.detach().to("xla").requires_grad_(grad) for t in cpu]
    return cpu, xla


def test_values_and_gradients_equal_eager():
    def f(a, b, c):
        return a * torch.tanh(b) + c**2

    torch.manual_seed(0)
    cpu, xla = _pair((3, 3), (3, 3), (3, 3))
    xla[1].requires_grad_(False)
    cpu[1].requires_grad_(False)
    out = assume_pure(f)(*xla)
    assert "xla::call_jax" in xlac._get_xla_tensors_text([out])
    out.sum().backward()
    f(*cpu).sum().backward()
    assert_close(out, f(*cpu).detach(), **TOLERANCE)
    assert_close(xla[0].grad, cpu[0].grad, **TOLERANCE)
    assert_close(xla[2].grad, cpu[2].grad, **TOLERANCE)
    assert xla[1].grad is None


class _Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(9, 9)
        self.conv = nn.Conv2d(3, 3, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(9)
        self.fc = nn.Linear(9 * 9 * 3, 3)

    def forward(self, x):
        x = torch.relu(self.norm(self.conv(self.linear(x))))
        return self.fc(torch.flatten(x, 1))


def test_module_through_functional_call_trains_like_eager():
    torch.manual_seed(0)
    cpu_model = _Small()
    model = copy.deepcopy(cpu_model).to("xla")
    pure = assume_pure(lambda params, x: torch.func.functional_call(model, params, x))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(5, 3, 9, 9)
        opt.zero_grad()
        cpu_opt.zero_grad()
        loss = pure(dict(model.named_parameters()), x.to("xla")).square().mean()
        loss.backward()
        opt.step()
        torch_xla.sync()
        cpu_loss = cpu_model(x).square().mean()
        cpu_loss.backward()
        cpu_opt.step()
        assert_close(loss, cpu_loss.detach(), **TOLERANCE)
    for (name, p), q in zip(model.named_parameters(), cpu_model.parameters(), strict=True):
        assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5), name


def test_recorded_once_then_one_node_per_call_and_one_program():
    xb._JAX_TO_XLA_COMPUTATION_CACHE.clear()
    traced = 0

    @assume_pure
    def f(a, b):
        nonlocal traced
        traced += 1
        return torch.sin(a @ b).relu() * 2 + 1

    for _ in range(5):
        a = torch.ones((3, 3), device="xla", requires_grad=True)
        f(a, a).sum().backward()
        torch_xla.sync()
    assert traced == 1  # one run under autograd gives the forward and the backward
    assert xb._jax_to_xla_computation_cache_elements() == 2  # the forward and the backward
    f(torch.ones((2, 3), device="xla"), torch.ones((3, 3), device="xla"))
    assert traced == 2  # a new shape is a new signature (no gradient: no backward)


def test_a_signature_first_met_without_gradients_records_its_backward_when_asked():
    traced = 0

    @assume_pure
    def f(a, b):
        nonlocal traced
        traced += 1
        return torch.sin(a @ b) * b

    torch.manual_seed(0)
    cpu, xla = _pair((3, 3), (3, 3))
    with torch.no_grad():
        assert_close(f(*xla), torch.sin(cpu[0] @ cpu[1]) * cpu[1], **TOLERANCE)
    for _ in range(2):
        f(*xla).sum().backward()
    assert traced == 2  # the forward alone, then once more under autograd
    (torch.sin(cpu[0] @ cpu[1]) * cpu[1]).sum().mul(2).backward()
    assert_close(xla[0].grad, cpu[0].grad, **TOLERANCE)
    assert_close(xla[1].grad, cpu[1].grad, **TOLERANCE)


def test_pytrees_kwargs_and_non_tensor_values():
    def f(x, *, factor, parts):
        return {"scaled": x * factor + parts[0], "count": parts[1], "sum": (x.sum(),)}

    torch.manual_seed(0)
    cpu, xla = _pair((3, 3), (3, 3))
    out = assume_pure(f)(xla[0], factor=2.5, parts=(xla[1], 7))
    expected = f(cpu[0], factor=2.5, parts=(cpu[1], 7))
    assert out["count"] == 7
    assert_close(out["scaled"], expected["scaled"].detach(), **TOLERANCE)
    (out["scaled"].sum() + out["sum"][0]).backward()
    (expected["scaled"].sum() + expected["sum"][0]).backward()
    assert_close(xla[0].grad, cpu[0].grad, **TOLERANCE)
    assert_close(xla[1].grad, cpu[1].grad, **TOLERANCE)


def test_no_grad_needed_records_no_autograd_node():
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    out = assume_pure(lambda x, y: torch.cos(x) + torch.sin(y))(a.to("xla"), b.to("xla"))
    assert not out.requires_grad
    assert_close(out, torch.cos(a) + torch.sin(b), **TOLERANCE)


def test_integer_results_and_arguments():
    def f(x, index):
        return x[index].sum(0), index.argmax()

    x, index = torch.randn(6, 4), torch.tensor([5, 0, 2])
    xx = x.to("xla").requires_grad_(True)
    total, where = assume_pure(f)(xx, index.to("xla"))
    assert not where.requires_grad
    assert_close(where, index.argmax())
    total.sum().backward()
    expected = torch.zeros(6, 4)
    expected[index] = 1
    assert_close(xx.grad, expected)


def test_composes_with_call_jax_and_with_itself():
    inner = assume_pure(lambda a, b: torch.matmul(a, b))
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    out = assume_pure(lambda x, y: inner(x, y) + xb.call_jax(jnp.dot, (x, y)))(
        a.to("xla"), b.to("xla"))
    assert_close(out, 2 * (a @ b), **TOLERANCE)


def test_impure_functions_are_refused_with_the_reason():
    x = torch.randn(3).to("xla")
    kept = []
    cases = [
        (lambda t: t * t.sum().item(), "read the value"),
        (lambda t: t.add_(1), "changed its tensor argument 0 in place"),
        (lambda t: kept.append(t * 2) or t + 1, "did not return"),
        (lambda t: torch.nn.functional.dropout(t, 0.5, training=True), "random numbers"),
    ]
    for fn, message in cases:
        with pytest.raises(ImpureFunctionError, match=message):
            assume_pure(fn)(x)
    kept.clear()
    torch_xla.sync()  # nothing recorded over a placeholder was left for the sync
    assert_close(x * 3, x.cpu() * 3)
    w = torch.randn(3).to("xla").requires_grad_(True)
    for fn, message in cases:  # recorded under autograd: the same reasons
        with pytest.raises(ImpureFunctionError, match=message):
            assume_pure(fn)(w)
    kept.clear()
    torch_xla.sync()
    assert_close(w.detach() * 3, w.detach().cpu() * 3)
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        assume_pure(lambda t: t + 1)(torch.randn(3))


def test_rng_seed_argument_draws_from_the_seed():
    @functools.partial(assume_pure, add_rng_seed_argument=True)
    def noisy(x):
        return x + torch.randn_like(x), torch.nn.functional.dropout(x, 0.5, training=True)

    x = torch.ones(64).to("xla")
    a = [t.cpu() for t in noisy(x, rng_seed=0)]
    b = [t.cpu() for t in noisy(x, rng_seed=0)]
    c = [t.cpu() for t in noisy(x, rng_seed=1)]
    seed = torch.tensor(1, device="xla")
    d = [t.cpu() for t in noisy(x, rng_seed=seed)]
    for same, other in zip(a, b, strict=True):
        torch.testing.assert_close(same, other)
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    torch.testing.assert_close(c[0], d[0])  # an int and a tensor holding it agree
    assert set(a[1].unique().tolist()) <= {0.0, 2.0}  # dropout's scaling holds
    with pytest.raises(TypeError, match="needs the keyword argument rng_seed"):
        noisy(x)


def test_rng_seed_backward_replays_the_forward_numbers():
    @functools.partial(assume_pure, add_rng_seed_argument=True)
    def masked(w):
        return torch.nn.functional.dropout(w, 0.5, training=True) * w

    w = torch.randn(128).to("xla").requires_grad_(True)
    out = masked(w, rng_seed=7)
    out.sum().backward()
    kept = out.detach().cpu() != 0
    w_cpu = w.detach().cpu()
    # d/dw (mask * 2 * w * w) = 4 w where kept, 0 where dropped: the same mask both ways
    torch.testing.assert_close(w.grad.cpu(), torch.where(kept, 4 * w_cpu, 0.0))


def test_pure_module_matches_the_module_and_trains():
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    model = copy.deepcopy(cpu_model).to("xla")
    pure = PureModule(model)
    opt = torch.optim.SGD(pure.parameters(), lr=0.1)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 6)
        opt.zero_grad()
        cpu_opt.zero_grad()
        pure(x.to("xla")).square().sum().backward()
        opt.step()
        torch_xla.sync()
        cpu_model(x).square().sum().backward()
        cpu_opt.step()
    for p, q in zip(model.parameters(), cpu_model.parameters(), strict=True):
        assert_close(p.detach(), q.detach(), rtol=1e-4, atol=1e-5)


def test_pure_module_refuses_a_module_that_updates_buffers():
    model = nn.BatchNorm1d(4).to("xla")
    with pytest.raises(ImpureFunctionError, match="in place|did not return"):
        PureModule(model)(torch.randn(8, 4).to("xla"))


def test_assume_pure_torch_is_forward_only():
    f = assume_pure_torch(lambda a: a.exp() * 2)
    x = torch.randn(3)
    with torch.no_grad():
        assert_close(f(x.to("xla")), x.exp() * 2, **TOLERANCE)
    with pytest.raises(RuntimeError, match="forward-only"):
        f(x.to("xla"))


@torch.no_grad()
def test_assume_pure_torch_use_cache_keeps_recordings_until_the_cache_is_cleared():
    import torch_xla.experimental.assume_pure as ap

    traced = 0

    @assume_pure_torch(use_cache=True)
    def f(a, b):
        nonlocal traced
        traced += 1
        return torch.sin(a @ b)

    a, b = torch.randn(3, 3), torch.randn(3, 2)
    for _ in range(3):
        assert_close(f(a.to("xla"), b.to("xla")), torch.sin(a @ b), **TOLERANCE)
    assert traced == 1
    assert_close(f(a.to("xla"), a.to("xla")), torch.sin(a @ a), **TOLERANCE)
    assert traced == 2  # another signature is recorded anew
    ap._XLA_COMPUTATION_CACHE.clear()
    assert_close(f(a.to("xla"), b.to("xla")), torch.sin(a @ b), **TOLERANCE)
    assert traced == 3


@torch.no_grad()
def test_assume_pure_torch_without_cache_records_every_call_and_reads_closures_afresh():
    import torch_xla.experimental.assume_pure as ap

    lin = nn.Linear(3, 3).to("xla")

    def layer(x):
        return lin(x)

    f = assume_pure_torch(layer)
    x = torch.randn(2, 3)
    before = f(x.to("xla")).cpu()
    lin.weight.mul_(2)
    again = f(x.to("xla"))  # recorded again: the weight as it is now
    assert_close(again, torch.nn.functional.linear(x, lin.weight.cpu(), lin.bias.cpu()),
                 **TOLERANCE)
    assert not torch.allclose(again.cpu(), before)
    assert all(key[0] is not layer for key in ap._XLA_COMPUTATION_CACHE)


def test_j2t_autograd_differentiates_a_jax_function():
    def jax_fn(inputs, scale):
        return {"y": jnp.tanh(inputs["a"] @ inputs["b"]) * scale}

    torch.manual_seed(0)
    cpu, xla = _pair((3, 4), (4, 2))
    out = j2t_autograd(jax_fn)({"a": xla[0], "b": xla[1]}, 2.0)
    out["y"].sum().backward()
    expected = torch.tanh(cpu[0] @ cpu[1]) * 2.0
    expected.sum().backward()
    assert_close(out["y"], expected.detach(), **TOLERANCE)
    assert_close(xla[0].grad, cpu[0].grad, **TOLERANCE)
    assert_close(xla[1].grad, cpu[1].grad, **TOLERANCE)


def test_inside_torch_compile_the_call_is_a_graph_break():
    pure = assume_pure(lambda a: a.cos() * 3)
    compiled = torch.compile(lambda a: pure(a * 2) + 1, backend="openxla")
    x = torch.randn(4)
    assert_close(compiled(x.to("xla")), torch.cos(x * 2) * 3 + 1, **TOLERANCE)


def test_tensors_read_from_a_closure_are_fixed_and_warned_about():
    lin = nn.Linear(4, 4).to("xla")
    f = assume_pure(lambda x: lin(x))
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match=r"reads 2 tensor\(s\) it does not take as arguments"):
        before = f(x.to("xla"))
    with torch.no_grad():
        lin.weight.mul_(2)
    again = f(x.to("xla"))  # the recording still holds the weight it read
    assert_close(again, before.cpu())


VIEW_RESULTS = {
    "matmul_3d": lambda x, w: x @ w,
    "view_of_a_result": lambda x, w: (x * 2).view(6, 4) @ w,
    "linear_3d": lambda x, w: torch.nn.functional.linear(x, w.t()),
    "einsum": lambda x, w: torch.einsum("bij,jk->bik", x, w),
}


@pytest.mark.parametrize("fn", VIEW_RESULTS.values(), ids=VIEW_RESULTS.keys())
def test_results_that_are_views_differentiate_like_eager(fn):
    """A result that is a view of an internal value (matmul of a 3-d input reshapes)
    used to be refused as impure once gradients were wanted: autograd's recording kept
    the view's base, which the check took for a tensor the function stored."""
    torch.manual_seed(0)
    cpu, xla = _pair((2, 3, 4), (4, 5))
    out = assume_pure(fn)(*xla)
    out.sum().backward()
    expected = fn(*cpu)
    expected.sum().backward()
    assert_close(out, expected.detach(), **TOLERANCE)
    for got, want in zip(xla, cpu, strict=True):
        assert_close(got.grad, want.grad, **TOLERANCE)
    kept = []
    with pytest.raises(ImpureFunctionError, match="did not return"):  # still checked
        assume_pure(lambda x, w: kept.append(x * 3) or fn(x, w))(*xla)
    kept.clear()
