"""Eager mode (`torch_xla.experimental.eager_mode`): each op compiles once per op and
shapes and runs at once; values match eager CPU PyTorch."""

from __future__ import annotations

import pytest
import torch

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics
import torch_xla.experimental as exp

from .helpers import assert_close


def _on_device(device, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """`tensors` copied to the device, with the metrics cleared afterwards: in eager mode a
    copy also runs the zero fill of the tensor it creates (`empty`), as in PyTorch/XLA."""
    moved = [t.to(device) for t in tensors]
    xm.wait_device_ops()
    torch_xla.debug.metrics.clear_all()
    return moved


@pytest.fixture
def eager(device, metrics):
    """Eager mode on for one test (off again afterwards, whatever happens)."""
    with exp.eager_mode_context(True) as before:
        assert before is False
        yield metrics
    assert not exp.is_eager_mode()


def _count(met, name: str) -> int:
    data = met.metric_data(name)
    return 0 if data is None else data[0]


def _holds_data(t: torch.Tensor) -> bool:
    return "Data Shape: " in xlac._get_xla_tensor_debug_info(t)


def test_each_op_runs_when_called(device, eager):
    cpu = torch.randn(4, 5)
    (x,) = _on_device(device, cpu)
    y = (x * 3).exp()
    assert _holds_data(y)  # nothing pending: the value is already device data
    xm.wait_device_ops()
    assert _count(eager, "EagerOpExecuteTime") == 2  # mul, exp
    assert eager.metric_data("ExecuteTime") is None and eager.metric_data("CompileTime") is None
    assert_close(y, (cpu * 3).exp())


def test_an_op_seen_before_does_not_compile_again(device, eager):
    x, other = _on_device(device, torch.randn(6, 7), torch.randn(6, 7))
    torch.logsumexp(x, 1)
    xm.wait_device_ops()
    compiled = _count(eager, "EagerOpCompileTime")
    y = torch.logsumexp(other, 1)  # new data, same op and shapes
    xm.wait_device_ops()
    assert _count(eager, "EagerOpCompileTime") == compiled
    assert _count(eager, "EagerOpExecuteTime") == 2
    assert y.shape == (6,)


def test_sync_finds_nothing_to_run(device, eager):
    (x,) = _on_device(device, torch.ones(3))
    (x + 1).sum()
    xm.wait_device_ops()
    assert _count(eager, "EagerOpExecuteTime") == 2  # add, sum: one program each, run
    eager.clear_all()  # (compiled here, or found compiled by an earlier test's ops)
    torch_xla.sync()
    assert eager.counter_value("UncachedCompile") is None  # the sync compiled nothing
    assert eager.counter_value("CachedCompile") is None  # and ran no graph
    assert eager.metric_data("ExecuteTime") is None
    assert eager.metric_data("EagerOpExecuteTime") is None


def test_an_op_with_several_outputs_runs_once(device, eager):
    cpu = torch.randn(5, 3)
    (a,) = _on_device(device, cpu)
    values, indices = torch.sort(a, dim=0)
    xm.wait_device_ops()
    assert eager.counter_value("xla::sort") == 1
    assert _count(eager, "EagerOpExecuteTime") == 1
    expected = torch.sort(cpu, dim=0)
    assert_close(values, expected.values)
    assert torch.equal(indices.cpu(), expected.indices)


def test_training_batch_norm_updates_running_stats_as_data(device, eager):
    torch.manual_seed(0)
    cpu_model = torch.nn.BatchNorm2d(4)
    model = torch.nn.BatchNorm2d(4).to(device)
    batch = torch.randn(3, 4, 2, 2)
    out = model(batch.to(device))
    expected = cpu_model(batch)
    assert eager.counter_value("xla::native_batch_norm") == 1
    assert _holds_data(model.running_mean) and _holds_data(model.running_var)
    assert_close(out, expected)
    assert_close(model.running_mean, cpu_model.running_mean)
    assert_close(model.running_var, cpu_model.running_var)


def test_random_ops_give_new_values_and_follow_the_seed(device, eager):
    xm.set_rng_state(1234)
    a = torch.randn(8, 9, device=device)
    b = torch.randn(8, 9, device=device)
    xm.wait_device_ops()
    compiled = _count(eager, "EagerOpCompileTime")
    assert not torch.equal(a.cpu(), b.cpu())
    xm.set_rng_state(1234)
    a_again = torch.randn(8, 9, device=device)
    assert torch.equal(a.cpu(), a_again.cpu())
    assert _count(eager, "EagerOpCompileTime") == compiled  # every random op reuses one program


def test_compile_traces_lazily_inside_eager_mode(device, eager):
    (x,) = _on_device(device, torch.randn(4, 4))

    @torch_xla.compile
    def step(t):
        return ((t @ t).relu() + 1).sum()

    loss = step(x)
    assert exp.is_eager_mode()  # restored after the call
    xm.wait_device_ops()
    assert _count(eager, "ExecuteTime") == 1  # one lazy graph for the whole function
    assert _count(eager, "EagerOpExecuteTime") == 0
    assert_close(loss, ((x.cpu() @ x.cpu()).relu() + 1).sum())


def test_eager_training_matches_cpu(device, eager):
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    model.load_state_dict(cpu_model.state_dict())
    model.to(device)
    batch, target = torch.randn(5, 3), torch.randn(5, 1)
    for m, x, y in ((cpu_model, batch, target), (model, batch.to(device), target.to(device))):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            optimizer.step()
    for p, q in zip(model.parameters(), cpu_model.parameters(), strict=True):
        assert_close(p, q)


def test_optimization_barrier_keeps_values(device, metrics):
    cpu = torch.randn(3, 2)
    a, b = cpu.to(device), (cpu * 2).to(device)
    xm.optimization_barrier_([a, b])
    assert "xla::optimization_barrier" in xlac._get_xla_tensors_text([a, b])
    assert_close(a, cpu)
    assert_close(b, cpu * 2)
    with exp.eager_mode_context(True):
        c = torch.ones(2).to(device) + 1
        metrics.clear_all()
        xm.optimization_barrier_([c])
        xm.wait_device_ops()
        assert _count(metrics, "EagerOpExecuteTime") == 1
    assert_close(c, torch.full((2,), 2.0))
