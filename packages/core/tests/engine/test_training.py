"""Autograd and optimizers on the xla device give eager CPU's parameters."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_xla.amp
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

from .helpers import assert_close
from .models import MNIST, TinyTransformer, lm_loss, mnist_batch, mnist_loss, token_batch

# float32 graphs are fused and reordered by XLA; 5 optimizer steps stay within this of eager.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
# Adam divides by sqrt(v) + eps: for a gradient near zero, float32 rounding differences are
# amplified up to lr (1e-3) per step, so a few elements may differ by a fraction of lr.
ADAM_TOLERANCE = {"rtol": 1e-3, "atol": 5e-4}

OPTIMIZERS = {
    "sgd_momentum": lambda ps, foreach: torch.optim.SGD(ps, lr=0.05, momentum=0.9, foreach=foreach),
    "adam": lambda ps, foreach: torch.optim.Adam(ps, lr=1e-3, foreach=foreach),
    "adamw": lambda ps, foreach: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1, foreach=foreach),
}
WORKLOADS = {
    "cnn": (MNIST, mnist_batch, mnist_loss),
    "transformer": (TinyTransformer, token_batch, lm_loss),
}


def _train_both(device, workload, optimizer, foreach, steps=5):
    make_model, make_batch, loss_fn = WORKLOADS[workload]
    torch.manual_seed(0)
    eager = make_model()
    lazy = copy.deepcopy(eager).to(device)
    eager_opt = OPTIMIZERS[optimizer](eager.parameters(), foreach)
    lazy_opt = OPTIMIZERS[optimizer](lazy.parameters(), foreach)
    losses = []
    for _ in range(steps):
        x, y = make_batch()
        for model, opt, dev in ((eager, eager_opt, "cpu"), (lazy, lazy_opt, device)):
            opt.zero_grad()
            loss = loss_fn(model, x.to(dev), y.to(dev))
            loss.backward()
            opt.step()
            if dev != "cpu":
                xm.mark_step()
            losses.append(loss.detach())
    return eager, lazy, losses


# CI runs these; the full workload x optimizer x foreach matrix runs with `-m slow`.
CI_CASES = {
    ("cnn", "sgd_momentum", True),
    ("cnn", "adam", False),
    ("transformer", "adamw", True),
    ("transformer", "sgd_momentum", False),
}
CASES = [
    pytest.param(
        w,
        o,
        f,
        marks=() if (w, o, f) in CI_CASES else pytest.mark.slow,
        id=f"{w}-{o}-{'foreach' if f else 'for-loop'}",
    )
    for w in sorted(WORKLOADS)
    for o in sorted(OPTIMIZERS)
    for f in (False, True)
]


@pytest.mark.parametrize("workload, optimizer, foreach", CASES)
def test_optimizer_matches_eager_after_5_steps(device, workload, optimizer, foreach):
    eager, lazy, losses = _train_both(device, workload, optimizer, foreach)
    tolerance = TOLERANCE if optimizer.startswith("sgd") else ADAM_TOLERANCE
    for (name, p), q in zip(eager.named_parameters(), lazy.parameters(), strict=False):
        assert_close(q, p.detach(), **tolerance, msg=lambda m, name=name: f"{name}: {m}")
    for (name, b), c in zip(eager.named_buffers(), lazy.buffers(), strict=False):
        assert_close(c, b, **TOLERANCE, msg=lambda m, name=name: f"buffer {name}: {m}")
    for e, lz in zip(losses[0::2], losses[1::2], strict=False):
        assert_close(lz, e, **TOLERANCE)


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_training_loop_hits_the_cache_every_step(device, metrics, workload):
    make_model, make_batch, loss_fn = WORKLOADS[workload]
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    uncached, cached = [], []
    for _ in range(6):
        x, y = make_batch()
        opt.zero_grad()
        loss_fn(model, x.to(device), y.to(device)).backward()
        opt.step()
        xm.mark_step()
        uncached.append(metrics.counter_value("UncachedCompile"))
        cached.append(metrics.counter_value("CachedCompile") or 0)
    # The first steps compile (step 1 creates optimizer state); from step 3 on, hits only.
    assert uncached[2:] == [uncached[2]] * 4
    assert [b - a for a, b in zip(cached[2:], cached[3:], strict=False)] == [1, 1, 1]
    assert not [n for n in metrics.counter_names() if n.startswith("aten::")]


def test_autograd_grad_matches_eager(device):
    torch.manual_seed(0)
    w = torch.randn(4, 3, requires_grad=True)
    x = torch.randn(5, 4)
    wx = w.detach().to(device).requires_grad_()
    (g,) = torch.autograd.grad((x @ w).tanh().pow(2).sum(), w)
    (gx,) = torch.autograd.grad((x.to(device) @ wx).tanh().pow(2).sum(), wx)
    assert gx.device == device
    assert_close(gx, g, **TOLERANCE)


@pytest.mark.parametrize("norm", ["BatchNorm1d", "BatchNorm2d"])
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_a_network_starting_with_batch_norm_trains_as_on_the_cpu(device, norm, train):
    """The input of the first layer needs no gradient, so autograd asks batch norm's
    backward for none: torch's meta kernel still makes one, and the lowering returned None
    for it ("None is not a valid value for jnp.array" at the sync)."""
    shape = (6, 4) if norm == "BatchNorm1d" else (6, 4, 3, 3)
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(getattr(torch.nn, norm)(4), torch.nn.Flatten(),
                                    torch.nn.LazyLinear(2))
    cpu_model(torch.zeros(shape))  # size the lazy layer on the CPU
    model = copy.deepcopy(cpu_model).to(device)
    inputs = torch.randn(3, *shape, generator=torch.Generator().manual_seed(1))
    for m, where in ((cpu_model, torch.device("cpu")), (model, device)):
        m.train(train)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for x in inputs:
            opt.zero_grad()
            m(x.to(where)).square().mean().backward()
            opt.step()
            if where.type == "xla":
                xm.mark_step()
    for got, expected in zip(model.state_dict().values(), cpu_model.state_dict().values(),
                                strict=True):
        assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("last", [False, True], ids=["dim0", "dim-last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_normalized_layers_train_on_the_device_as_on_the_cpu(device, last, dtype):
    """`weight_norm` over the first or the last dimension computes its weight with torch's
    fused `_weight_norm_interface` on our device; that kernel's backward had no rule and
    ran on the CPU at every step."""
    torch.manual_seed(0)
    weight_norm = torch.nn.utils.parametrizations.weight_norm
    cpu_model = torch.nn.ModuleList([weight_norm(torch.nn.Linear(5, 7), dim=1 if last else 0),
                                     weight_norm(torch.nn.Conv1d(7, 3, 2), dim=2 if last else 0),
                                     ]).to(dtype)
    model = copy.deepcopy(cpu_model).to(device)
    inputs = torch.randn(3, 4, 6, 5, dtype=dtype, generator=torch.Generator().manual_seed(1))
    met.clear_all()
    for (linear, conv), where in ((cpu_model, torch.device("cpu")), (model, device)):
        opt = torch.optim.SGD([*linear.parameters(), *conv.parameters()], lr=0.1)
        for x in inputs:
            opt.zero_grad()
            conv(linear(x.to(where)).tanh().transpose(1, 2)).square().mean().backward()
            opt.step()
            if where.type == "xla":
                xm.mark_step()
    assert met.executed_fallback_ops() == []
    for got, expected in zip(model.state_dict().values(), cpu_model.state_dict().values(),
                             strict=True):
        assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_backward_accumulates_into_leaf_grad(device):
    w = torch.tensor([1.0, 2.0, 3.0]).to(device).requires_grad_()
    (w * w).sum().backward()
    (3 * w).sum().backward()
    assert_close(w.grad, torch.tensor([5.0, 7.0, 9.0]))


# The fused steps PyTorch runs for `fused=True`; torch accepts the xla device for them.
FUSED = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True),
    "adam-amsgrad-decay-maximize": lambda ps: torch.optim.Adam(
        ps, lr=1e-2, fused=True, amsgrad=True, weight_decay=0.1, maximize=True),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True),
    "adamw-tensor-lr": lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(1e-2), fused=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, fused=True),
    "sgd-nesterov-decay": lambda ps: torch.optim.SGD(
        ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, fused=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, fused=True),
    "adagrad-decays-maximize": lambda ps: torch.optim.Adagrad(
        ps, lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2,
        maximize=True, fused=True),
    "adagrad-tensor-lr": lambda ps: torch.optim.Adagrad(ps, lr=torch.tensor(0.1), fused=True),
}


def _fused_training(device, make_optimizer, scaled=False):
    """4 steps of a small MLP; with `scaled`, through a GradScaler and with an infinite
    input on step 3, whose update the scaler must skip."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3)).to(device)
    opt = make_optimizer(model.parameters())
    scaler = None
    if scaled and device.type == "cpu":
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    elif scaled:
        scaler = torch_xla.amp.GradScaler(init_scale=1024.0)
    inputs = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(2))
    if scaled:
        inputs[2, 0, 0] = float("inf")
    for x in inputs:
        opt.zero_grad()
        loss = model(x.to(device)).square().mean()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        if device.type != "cpu":
            xm.mark_step()
    return [p.detach().cpu() for p in model.parameters()], scaler


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_optimizer_steps_match_eager(device, metrics, name):
    """PyTorch's functionalization kernel stopped these (without amsgrad or momentum) with
    "mutating a non-functional tensor with a functional tensor". The step is recorded, not
    run on the CPU: torch has no meta kernel for most fused steps, and without ours
    (`backend/meta_kernels.py`) the engine could not infer their shapes."""
    expected, _ = _fused_training(torch.device("cpu"), FUSED[name])
    got, _ = _fused_training(device, FUSED[name])
    for e, g in zip(expected, got, strict=True):
        assert_close(g, e, rtol=1e-5, atol=1e-6)
    assert metrics.executed_fallback_ops() == []


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd-nesterov-decay", "adagrad"])
def test_fused_steps_under_a_learning_rate_schedule_compile_once(device, metrics, name):
    """A fused step takes `lr` as a float: it is a graph input, as `alpha` is."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).to(device)
    opt = FUSED[name](model.parameters())
    schedule = torch.optim.lr_scheduler.ExponentialLR(opt, 0.9)
    x = torch.randn(4, 6).to(device)
    for step in range(6):
        if step == 3:
            metrics.clear_all()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        schedule.step()
        xm.mark_step()
    assert (metrics.counter_value("UncachedCompile") or 0) == 0
    assert metrics.counter_value("CachedCompile") == 3


def test_fused_adamw_under_a_grad_scaler_skips_the_infinite_step(device):
    """torch's scaler hands a fused step `grad_scale` and `found_inf`: no host sync."""
    expected, cpu_scaler = _fused_training(torch.device("cpu"), FUSED["adamw"], scaled=True)
    got, scaler = _fused_training(device, FUSED["adamw"], scaled=True)
    assert scaler.get_scale() == cpu_scaler.get_scale() == 512.0  # halved once, at the inf
    for e, g in zip(expected, got, strict=True):
        assert_close(g, e, rtol=1e-5, atol=1e-6)


def _one_fused_step(device, scaled: bool):
    """One AdamW(fused=True) step of a small MLP; its gradients before and after the step
    (the engine tensors under them on the device: same object means not written)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 3)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    loss = model(torch.randn(5, 6, generator=torch.Generator().manual_seed(3)).to(device))
    loss = loss.square().mean()
    on_xla = device.type != "cpu"
    scaler = None
    if scaled:
        scaler = torch_xla.amp.GradScaler(init_scale=64.0) if on_xla else torch.amp.GradScaler(
            "cpu", init_scale=64.0)
        loss = scaler.scale(loss)
    loss.backward()
    if on_xla:
        xm.mark_step()
    inner = [torch._from_functional_tensor(p.grad) if on_xla else p.grad
             for p in model.parameters()]
    if scaler is None:
        opt.step()
    else:
        scaler.step(opt)
    if on_xla:
        xm.mark_step()
    after = [torch._from_functional_tensor(p.grad) if on_xla else p.grad
             for p in model.parameters()]
    grads = [p.grad.detach().cpu() for p in model.parameters()]
    return inner, after, grads, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "grad-scaler"])
def test_fused_steps_write_gradients_only_to_unscale_them(device, scaled):
    """A fused step's gradients are written only when it unscales them (`grad_scale`,
    from a GradScaler); otherwise writing them back would make every step's program
    output a copy of each gradient. Gradients and parameters match the CPU's either way."""
    _, _, cpu_grads, cpu_params = _one_fused_step(torch.device("cpu"), scaled)
    before, after, grads, params = _one_fused_step(device, scaled)
    if scaled:
        assert not any(b is a for b, a in zip(before, after, strict=True))
    else:
        assert all(b is a for b, a in zip(before, after, strict=True))
    for e, g in zip(cpu_grads + cpu_params, grads + params, strict=True):
        assert_close(g, e, rtol=1e-5, atol=1e-6)


class _TiedLM(torch.nn.Module):
    """An embedding whose weight the output layer reuses (weight tying)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(11, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.emb(ids)))


def _tied_training(device, retie: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = _TiedLM().to(device)
    if retie:
        model.head.weight = model.emb.weight
    assert model.head.weight is model.emb.weight
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 11, (3, 4, 5), generator=torch.Generator().manual_seed(3))
    for batch in ids:
        opt.zero_grad()
        logits = model(batch.to(device))
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.flatten().to(device)
                                          ).backward()
        opt.step()
        if device.type != "cpu":
            xm.mark_step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("way", ["retie-after-to", "swap-on-conversion"])
def test_tied_weights_train_as_on_the_cpu_either_way_the_guide_gives(device, way):
    """docs/guide/training.md: `.to(xla)` splits a shared parameter (as in PyTorch/XLA);
    tying again after the move, or torch's swap-on-conversion switch, keeps one."""
    expected = _tied_training(torch.device("cpu"), retie=False)
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(way == "swap-on-conversion")
    try:
        got = _tied_training(device, retie=way == "retie-after-to")
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    assert len(got) == len(expected) == 1
    assert_close(got[0], expected[0], **ADAM_TOLERANCE)


def test_moving_a_tied_model_splits_the_shared_parameter_as_pytorch_xla_does(device):
    """The behaviour the guide warns about (torch's Module._apply with a tensor type that
    cannot take over a CPU tensor's storage)."""
    model = _TiedLM().to(device)
    assert model.head.weight is not model.emb.weight
    assert len(list(model.parameters())) == 2
