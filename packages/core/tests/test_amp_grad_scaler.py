"""`torch_xla.amp.GradScaler`: training on the device equals eager CPU training with
torch's GradScaler (same scales, same skipped steps), and with a sync-free optimizer or
`use_zero_grad` no step waits for the device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import small_mlp

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.amp import GradScaler, syncfree

STEPS = 6
POISONED = 2  # this step's loss overflows: the step is skipped and the scale backs off
SCALER = {"init_scale": 2.0**10, "growth_factor": 4.0, "backoff_factor": 0.25,
          "growth_interval": 2}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # float32 steps: a few ulps of reassociation
# Adam divides by the root of the second moment: a gradient element near 0 with a few
# ulps of error moves its parameter by a small fraction of lr (0.05) more or less.
ADAM_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}

# (id, optimizer on the device, eager CPU reference, GradScaler extras, tolerance)
MODES = [
    ("sync", torch.optim.SGD, torch.optim.SGD, {}, TOLERANCE),
    ("syncfree-sgd", syncfree.SGD, torch.optim.SGD, {}, TOLERANCE),
    ("syncfree-adam", syncfree.Adam, torch.optim.Adam, {}, ADAM_TOLERANCE),
    ("syncfree-adamw", syncfree.AdamW, torch.optim.AdamW, {}, ADAM_TOLERANCE),
    # plain SGD stepped with zeroed gradients leaves the parameters as a skip does
    ("zero-grad-sgd", torch.optim.SGD, torch.optim.SGD, {"use_zero_grad": True}, TOLERANCE),
]


@pytest.fixture(scope="module")
def device() -> torch.device:
    return torch_xla.device()


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(1)
    batches = [(torch.randn(5, 6), torch.randint(0, 3, (5,))) for _ in range(STEPS)]
    batches[POISONED][0][0, 0] = float("inf")
    return batches


def _train(model, opt, scaler, batches, device, get_scale=True) -> list[float]:
    scales = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch_xla.sync()
        if get_scale:
            scales.append(scaler.get_scale())
    return scales


@pytest.mark.parametrize(("optimizer", "reference", "extra", "tolerance"),
                         [m[1:] for m in MODES], ids=[m[0] for m in MODES])
def test_training_equals_eager_cpu_grad_scaler(device, optimizer, reference, extra, tolerance):
    want_model, got_model = small_mlp(), small_mlp().to(device)
    want_scales = _train(want_model, reference(want_model.parameters(), lr=0.05),
                         torch.amp.GradScaler("cpu", **SCALER), _batches(), "cpu")
    got_scales = _train(got_model, optimizer(got_model.parameters(), lr=0.05),
                        GradScaler(**SCALER, **extra), _batches(), device)
    assert got_scales == want_scales
    assert want_scales[POISONED] == want_scales[POISONED - 1] * SCALER["backoff_factor"]
    for got, want in zip(got_model.parameters(), want_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **tolerance)
        assert torch.isfinite(got.detach().cpu()).all()


def test_training_under_autocast_equals_eager_cpu(device):
    """bfloat16 autocast on both sides; the tolerance is bfloat16's."""
    want_model, got_model = small_mlp(), small_mlp().to(device)
    want_opt = torch.optim.SGD(want_model.parameters(), lr=0.05)
    got_opt = syncfree.SGD(got_model.parameters(), lr=0.05)
    want_scaler, got_scaler = torch.amp.GradScaler("cpu", **SCALER), GradScaler(**SCALER)
    for x, y in _batches():
        for model, opt, scaler, context, dev in (
                (want_model, want_opt, want_scaler, torch.autocast("cpu"), "cpu"),
                (got_model, got_opt, got_scaler, torch_xla.amp.autocast(device), device)):
            opt.zero_grad()
            with context:
                loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        torch_xla.sync()
    assert got_scaler.get_scale() == want_scaler.get_scale()
    for got, want in zip(got_model.parameters(), want_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize(("optimizer", "extra", "transfers"), [
    (syncfree.SGD, {}, False),
    (syncfree.AdamW, {}, False),
    (torch.optim.SGD, {"use_zero_grad": True}, False),
    (torch.optim.SGD, {}, True),  # torch's way: read found_inf, which waits for the device
], ids=["syncfree-sgd", "syncfree-adamw", "zero-grad", "sync"])
def test_which_steps_read_the_device(device, optimizer, extra, transfers):
    model = small_mlp().to(device)
    opt, scaler = optimizer(model.parameters(), lr=0.05), GradScaler(**SCALER, **extra)
    batches = _batches()
    _train(model, opt, scaler, batches[:2], device, get_scale=False)
    met.clear_all()
    _train(model, opt, scaler, batches[2:], device, get_scale=False)
    assert (met.metric_data("TransferFromDeviceTime") is not None) == transfers


def test_defaults_are_pytorch_xlas():
    scaler = GradScaler()
    assert (scaler.get_scale(), scaler.get_growth_factor(), scaler.get_backoff_factor(),
            scaler.get_growth_interval(), scaler.is_enabled(), scaler.use_zero_grad) == (
        2.0**16, 2.0, 0.5, 2000, True, False)


def test_disabled_steps_the_optimizer_as_is(device):
    want_model, got_model = small_mlp(), small_mlp().to(device)
    want_opt = torch.optim.SGD(want_model.parameters(), lr=0.05)
    got_opt = torch.optim.SGD(got_model.parameters(), lr=0.05)
    scaler = GradScaler(enabled=False)
    x, y = _batches()[0]
    for model, opt, dev in ((want_model, want_opt, "cpu"), (got_model, got_opt, device)):
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        assert scaler.scale(loss) is loss
        loss.backward()
        scaler.step(opt)
    for got, want in zip(got_model.parameters(), want_model.parameters(), strict=True):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOLERANCE)


@pytest.mark.parametrize("poison", [None, float("inf"), float("nan")])
def test_unscale_and_inf_check_equal_the_cpu(device, poison):
    torch.manual_seed(0)
    grads = [torch.randn(4, 3), torch.randn(5)]
    if poison is not None:
        grads[1][2] = poison
    found, inv_scale = torch.zeros(1), torch.full((1,), 0.125)
    on_device = [g.to(device) for g in grads]
    found_device, inv_device = found.to(device), inv_scale.to(device)
    met.clear_all()
    torch._amp_foreach_non_finite_check_and_unscale_(on_device, found_device, inv_device)
    assert met.executed_fallback_ops() == []  # recorded on the device, not run on the CPU
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
    torch.testing.assert_close(found_device.cpu(), found)
    for got, want in zip(on_device, grads, strict=True):
        torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize(("found_inf", "tracker"), [(0.0, 0), (0.0, 2), (1.0, 2)])
def test_update_scale_equals_the_cpu(device, found_inf, tracker):
    scale, growth = torch.full((1,), 64.0), torch.full((1,), tracker, dtype=torch.int32)
    found = torch.full((1,), found_inf)
    scale_d, growth_d, found_d = scale.to(device), growth.to(device), found.to(device)
    met.clear_all()
    torch._amp_update_scale_(scale_d, growth_d, found_d, 2.0, 0.5, 3)
    assert met.executed_fallback_ops() == []
    torch._amp_update_scale_(scale, growth, found, 2.0, 0.5, 3)
    torch.testing.assert_close(scale_d.cpu(), scale)
    torch.testing.assert_close(growth_d.cpu(), growth)
