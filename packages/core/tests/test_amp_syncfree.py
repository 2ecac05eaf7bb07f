"""`torch_xla.amp.syncfree`: each optimizer equals its torch.optim counterpart on the CPU,
skips the step where `found_inf` is set, and records the step without a host transfer."""

from __future__ import annotations

import pytest
import torch
from conftest import small_mlp

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.amp import syncfree

# Adam's bias corrections are float32 device values here and Python floats in
# torch.optim; over a few steps the parameters differ by a few float32 ulps.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
STEPS = 5
SKIPPED = 2  # the step that found_inf cancels

CONFIGS = [  # (optimizer name, keyword arguments)
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.5, "dampening": 0.3, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "betas": (0.8, 0.9), "maximize": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
]
IDS = [f"{name}-{'-'.join(kw)}" for name, kw in CONFIGS]


@pytest.fixture(scope="module")
def device() -> torch.device:
    return torch_xla.device()


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(1)
    return [(torch.randn(5, 6), torch.randn(5, 3)) for _ in range(STEPS)]


def _backward(model, x, y, poison: bool) -> None:
    for p in model.parameters():
        p.grad = None
    torch.nn.functional.mse_loss(model(x), y).backward()
    if poison:  # what an overflowing scaled loss gives: the step must not use it
        next(model.parameters()).grad[0, 0] = float("inf")


def _eager(name, kwargs, skip: int | None) -> torch.nn.Module:
    model = small_mlp()
    opt = getattr(torch.optim, name)(model.parameters(), **kwargs)
    for i, (x, y) in enumerate(_batches()):
        _backward(model, x, y, poison=i == skip)
        if i != skip:
            opt.step()
    return model


def _syncfree(device, name, kwargs, skip: int | None, found_inf_of=None):
    model = small_mlp().to(device)
    opt = getattr(syncfree, name)(model.parameters(), **kwargs)
    for i, (x, y) in enumerate(_batches()):
        _backward(model, x.to(device), y.to(device), poison=i == skip)
        flag = torch.tensor(float(i == skip), device=device)
        opt.step(found_inf=flag if found_inf_of is None else found_inf_of(flag))
        torch_xla.sync()
    return model, opt


def _assert_same_parameters(got: torch.nn.Module, want: torch.nn.Module) -> None:
    for g, w in zip(got.parameters(), want.parameters(), strict=True):
        torch.testing.assert_close(g.detach().cpu(), w.detach(), **TOLERANCE)


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=IDS)
def test_steps_equal_torch_optim(device, name, kwargs):
    got, _ = _syncfree(device, name, kwargs, skip=None)
    _assert_same_parameters(got, _eager(name, kwargs, skip=None))


@pytest.mark.parametrize(("name", "kwargs"), CONFIGS, ids=IDS)
def test_found_inf_skips_the_step(device, name, kwargs):
    got, opt = _syncfree(device, name, kwargs, skip=SKIPPED)
    _assert_same_parameters(got, _eager(name, kwargs, skip=SKIPPED))
    steps = {float(state["step"].cpu()) for state in opt.state.values()}
    assert steps == {STEPS - 1}  # the skipped step is not counted


def test_the_first_taken_step_starts_the_momentum(device):
    """A skipped first step leaves no momentum behind: the buffer starts at the next one."""
    got, _ = _syncfree(device, "SGD", {"lr": 0.1, "momentum": 0.9}, skip=0)
    _assert_same_parameters(got, _eager("SGD", {"lr": 0.1, "momentum": 0.9}, skip=0))


def test_found_inf_may_be_any_nonzero_count_of_any_dtype_on_the_cpu(device):
    kwargs = {"lr": 0.01}
    got, _ = _syncfree(device, "Adam", kwargs, skip=SKIPPED,
                       found_inf_of=lambda flag: (flag.cpu() * 3).to(torch.int64))
    _assert_same_parameters(got, _eager("Adam", kwargs, skip=SKIPPED))


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_without_found_inf_it_is_torch_optim(device, name):
    model, want = small_mlp().to(device), small_mlp()
    opt = getattr(syncfree, name)(model.parameters(), lr=0.05)
    ref = getattr(torch.optim, name)(want.parameters(), lr=0.05)
    for x, y in _batches()[:2]:
        _backward(model, x.to(device), y.to(device), poison=False)
        _backward(want, x, y, poison=False)
        opt.step()
        ref.step()
    _assert_same_parameters(model, want)


def test_a_closure_is_evaluated_and_its_loss_returned(device):
    model = small_mlp().to(device)
    opt = syncfree.SGD(model.parameters(), lr=0.1)
    x, y = (t.to(device) for t in _batches()[0])

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    loss = opt.step(closure, found_inf=torch.tensor(0.0, device=device))
    assert loss.requires_grad and loss.device == device


@pytest.mark.parametrize("bad", [torch.zeros(1), torch.zeros(2, 2), 0.0])
def test_found_inf_must_be_a_0d_tensor(device, bad):
    model = small_mlp().to(device)
    _backward(model, *(t.to(device) for t in _batches()[0]), poison=False)
    with pytest.raises(ValueError, match="found_inf tensor has to be scalar type.*0-d"):
        syncfree.SGD(model.parameters(), lr=0.1).step(found_inf=bad)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_steps_compile_once_and_never_read_the_device(device, name):
    """Skipped or not, every step is the same graph and nothing comes back to the host.

    The model's shapes are this test's own, so no other test compiled its graphs."""
    torch.manual_seed(0)
    model = torch.nn.Linear(7, 9).to(device)
    opt = getattr(syncfree, name)(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 7, device=device), torch.randn(4, 9, device=device)
    torch_xla.sync()

    def run(flags):
        for flag in flags:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step(found_inf=torch.tensor(flag, device=device))
            torch_xla.sync()

    run([0.0, 0.0])  # the first step creates the optimizer state: a graph of its own
    met.clear_all()
    run([1.0, 0.0, 1.0, 0.0])
    assert met.metric_data("TransferFromDeviceTime") is None
    assert met.metric_data("CompileTime") is None, met.metrics_report()
    assert met.metric_data("ExecuteTime")[0] == 4
