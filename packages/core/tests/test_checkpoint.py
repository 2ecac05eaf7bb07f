"""`torch_xla.utils.checkpoint`: gradients equal eager CPU PyTorch's (plain autograd and
`torch.utils.checkpoint`), the forward really runs again in backward behind an
optimization barrier, and random ops replay the forward's numbers."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.utils.checkpoint import checkpoint, checkpoint_sequential

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # float32; XLA fuses the small matmuls differently
REENTRANT = [True, False]


@pytest.fixture
def device():
    return xm.xla_device()


def _block() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


def _grads(model, x, run):
    x = x.clone().requires_grad_()
    out = run(model, x)
    (out * out).sum().backward()
    return [t.grad.cpu() for t in (x, *model.parameters())]


@pytest.mark.parametrize("use_reentrant", REENTRANT)
def test_gradients_equal_eager_autograd_and_torch_checkpoint(device, use_reentrant):
    cpu = _block()
    x = torch.randn(3, 6)
    plain = _grads(copy.deepcopy(cpu), x, lambda m, a: m(a))
    reference = _grads(copy.deepcopy(cpu), x, lambda m, a: torch_checkpoint.checkpoint(
        m, a, use_reentrant=use_reentrant))
    ours = _grads(copy.deepcopy(cpu).to(device), x.to(device),
                  lambda m, a: checkpoint(m, a, use_reentrant=use_reentrant))
    for got, want, alt in zip(ours, plain, reference, strict=True):
        torch.testing.assert_close(got, want, **TOLERANCE)
        torch.testing.assert_close(got, alt, **TOLERANCE)


@pytest.mark.parametrize("use_reentrant", REENTRANT)
def test_cpu_tensors_get_the_gradients_of_eager_autograd(use_reentrant):
    # The reentrant variant once recomputed on the caller's own CPU leaves, so their
    # gradients arrived twice (accumulated in the recomputation and returned).
    cpu = _block()
    x = torch.randn(3, 6)
    plain = _grads(copy.deepcopy(cpu), x, lambda m, a: m(a))
    ours = _grads(copy.deepcopy(cpu), x, lambda m, a: checkpoint(m, a,
                                                                 use_reentrant=use_reentrant))
    for got, want in zip(ours, plain, strict=True):
        torch.testing.assert_close(got, want, **TOLERANCE)


@pytest.mark.parametrize("use_reentrant", REENTRANT)
def test_backward_runs_the_function_again(device, use_reentrant):
    model = _block().to(device)
    calls = []

    def counted(a):
        calls.append(torch.is_grad_enabled())
        return model(a)

    out = checkpoint(counted, torch.randn(2, 6, device=device, requires_grad=True),
                     use_reentrant=use_reentrant)
    assert len(calls) == 1
    out.sum().backward()
    assert len(calls) == 2 and calls[1] is True  # recomputed, with autograd on


def test_recomputation_reads_its_inputs_through_an_optimization_barrier(device):
    model = _block().to(device)
    x = torch.randn(2, 6, device=device, requires_grad=True)
    out = checkpoint(model, x, use_reentrant=True)
    out.sum().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out, model[0].weight.grad])
    assert "opt-barrier" in hlo
    # two tanh: the forward's and the recomputation's (the barrier keeps them apart)
    assert hlo.count(" tanh(") == 2, hlo


class _WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(16, 16)
        self.register_buffer("scale", torch.full((16,), 0.5))

    def forward(self, x):
        return torch.tanh(self.linear(x)) * self.scale


@pytest.mark.parametrize("use_reentrant", REENTRANT)
def test_a_checkpointed_module_method_fences_its_parameters_and_buffers(device,
                                                                        use_reentrant):
    """As PyTorch/XLA: when the checkpointed function is a module's method, its
    parameters and buffers pass the recomputation's barrier too (in place), so the
    recomputation shares no operand with the forward; gradients are eager's."""
    cpu = _WithBuffer()
    x = torch.randn(4, 16)
    expected = _grads(copy.deepcopy(cpu), x, lambda m, a: m(a))
    model = copy.deepcopy(cpu).to(device)
    xla_x = x.to(device).requires_grad_()
    out = checkpoint(model.forward, xla_x, use_reentrant=use_reentrant)
    (out * out).sum().backward()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([model.linear.weight.grad])
    (barrier,) = [line for line in hlo.splitlines() if "= (" in line and "opt-barrier(" in line]
    result_type = barrier.split(" opt-barrier(")[0]
    # the input (and, reentrant, the incoming gradient), the weight, the bias, the buffer
    assert result_type.count("f32[4,16]") == (2 if use_reentrant else 1), barrier
    assert result_type.count("f32[16,16]") == 1 and result_type.count("f32[16]") == 2, barrier
    got = [t.grad.cpu() for t in (xla_x, *model.parameters())]
    for g, want in zip(got, expected, strict=True):
        torch.testing.assert_close(g, want, **TOLERANCE)
    torch.testing.assert_close(model.scale.cpu(), cpu.scale)


def _dropout_grads(device, use_reentrant, preserve):
    """Gradient of a checkpointed dropout, and the mask the forward used."""
    xm.set_rng_state(123)
    x = torch.ones(64, device=device, requires_grad=True)
    torch.nn.functional.dropout(x, 0.5)  # a random op before: the sync's seed already exists
    out = checkpoint(lambda a: torch.nn.functional.dropout(a, 0.5) * 3, x,
                     use_reentrant=use_reentrant, preserve_rng_state=preserve)
    out.sum().backward()
    return x.grad.cpu(), out.detach().cpu()


@pytest.mark.parametrize("use_reentrant", REENTRANT)
def test_dropout_replays_the_forward_mask(device, use_reentrant):
    grad, out = _dropout_grads(device, use_reentrant, preserve=True)
    # out = 3 * mask * x / 0.5, so d(sum out)/dx = 6 where the forward kept the element
    torch.testing.assert_close(grad, torch.where(out != 0, 6.0, 0.0))
    assert 0 < (out != 0).sum() < 64


def test_without_preserve_rng_state_the_recomputation_draws_new_numbers(device):
    grad, out = _dropout_grads(device, use_reentrant=True, preserve=False)
    assert not torch.equal(grad != 0, out != 0)


def test_dropout_replay_leaves_the_surrounding_random_stream_alone(device):
    xm.set_rng_state(7)
    x = torch.ones(32, device=device, requires_grad=True)
    checkpoint(lambda a: torch.nn.functional.dropout(a, 0.5), x,
               use_reentrant=False).sum().backward()
    after = torch.rand(4, device=device).cpu()
    xm.set_rng_state(7)
    torch.nn.functional.dropout(torch.ones(32, device=device), 0.5)
    torch.testing.assert_close(torch.rand(4, device=device).cpu(), after)


def test_checkpoint_sequential_equals_eager(device):
    cpu = _block()
    x = torch.randn(3, 6)
    want = _grads(copy.deepcopy(cpu), x, lambda m, a: m(a))
    got = _grads(copy.deepcopy(cpu).to(device), x.to(device),
                 lambda m, a: checkpoint_sequential(m, 2, a, use_reentrant=False))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **TOLERANCE)


def test_use_reentrant_defaults_to_true_with_a_warning(device):
    x = torch.randn(2, 6, device=device, requires_grad=True)
    with pytest.warns(UserWarning, match="use_reentrant"):
        out = checkpoint(_block().to(device), x)
    assert type(out.grad_fn).__name__ == "CheckpointFunctionBackward"


def test_reentrant_rejects_what_only_the_other_variant_supports(device):
    x = torch.randn(2, 6, device=device, requires_grad=True)
    with pytest.raises(ValueError, match="Unexpected keyword arguments"):
        checkpoint(lambda a, scale: a * scale, x, use_reentrant=True, scale=2.0)
    with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
        checkpoint(lambda a: a, x, use_reentrant=True, debug=True)
    out = checkpoint(lambda a, scale: a * scale, x, use_reentrant=False, scale=2.0)
    torch.testing.assert_close(out.cpu(), x.detach().cpu() * 2)


def test_non_reentrant_works_with_autograd_grad(device):
    cpu = _block()
    x = torch.randn(3, 6)
    want = torch.autograd.grad(cpu(x).sum(), [cpu[0].weight])[0]
    xla = copy.deepcopy(cpu).to(device)
    out = checkpoint(xla, x.to(device), use_reentrant=False)
    got = torch.autograd.grad(out.sum(), [xla[0].weight])[0]
    torch.testing.assert_close(got.cpu(), want, **TOLERANCE)


EXIT_WHILE_RUNNING = """
import atexit, sys, torch, torch_xla.core.xla_model as xm
from torch_xla.lazy import graph
from torch_xla.utils.checkpoint import checkpoint
if sys.argv[-1] == "no-drain":
    atexit.unregister(graph._drain_at_exit)
device = xm.xla_device()
layers = torch.nn.ModuleList([torch.nn.Sequential(
    torch.nn.Conv2d(1024, 1024, 1), torch.nn.ReLU(), torch.nn.Conv2d(1024, 1024, 1),
    torch.nn.ReLU()) for _ in range(2)]).to(device)
optimizer = torch.optim.SGD(layers.parameters(), lr=0.0)
for step in range(3):
    optimizer.zero_grad()
    x = layers[0](torch.zeros(64, 1024, 14, 14, device=device))
    x = checkpoint(layers[1], x, use_reentrant=True)
    x.sum().backward()
    optimizer.step()
    xm.mark_step()  # queued: the script ends while the device still runs
print("done", flush=True)
"""


def test_a_script_ending_while_programs_run_exits_cleanly():
    """The last steps still run when the interpreter exits; tearing the runtime down under
    them aborted the process (exit code 134). Exit waits for them now."""
    done = subprocess.run([sys.executable, "-c", EXIT_WHILE_RUNNING], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "done"
