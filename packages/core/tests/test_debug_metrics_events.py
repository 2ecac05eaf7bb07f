"""The events behind `torch_xla.debug.metrics`: each counter and metric is recorded where
PyTorch/XLA records it, under its name and in its unit (one device, the CPU plugin)."""

from __future__ import annotations

import gc
import threading
import time

import jax
import jax.numpy as jnp
import pytest
import torch

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla import _metrics
from torch_xla.pjrt.client import ExecutionClock, execution_clock


@pytest.fixture(scope="module")
def device() -> torch.device:
    return xm.xla_device()


@pytest.fixture
def metrics(device):
    torch_xla.sync()
    xm.wait_device_ops()
    met.clear_all()
    return met


def _samples(name: str) -> int:
    data = met.metric_data(name)
    return 0 if data is None else data[0]


def test_host_to_device_copy_records_bytes_handles_and_time(device, metrics):
    host = torch.ones(5, 7)
    x = host.to(device)
    assert met.metric_data("OutboundData")[1] == host.nbytes  # bytes, host -> device
    assert met.counter_value("CreateDataHandles") == 1
    assert _samples("TransferToDeviceTime") == 1 and _samples("TensorToData") == 1
    assert met.metric_data("InboundData") is None
    back = x.cpu()
    assert met.metric_data("InboundData")[1] == back.nbytes  # bytes, device -> host
    assert _samples("TransferFromDeviceTime") == 1


def test_compilation_records_handles_graph_size_and_aliases(device, metrics):
    x = torch.randn(3, 3).to(device)
    y = (x.sin() + x.cos()) * 3.0  # sin, cos, add and mul over one device-data input
    expected_nodes = xlac._get_xla_tensors_text([y]).count(" = ")
    torch_xla.sync()
    assert met.counter_value("UncachedCompile") == 1
    assert met.counter_value("CreateCompileHandles") == 1
    assert _samples("CompileTime") == 1
    assert met.metric_data("TensorsGraphSize")[1] == expected_nodes >= 5
    assert met.metric_data("InputOutputAliasCount")[1] == 0  # no buffer donation yet
    again = (x.sin() + x.cos()) * 3.0  # the same graph, held so that the sync runs it
    torch_xla.sync()
    assert met.counter_value("CachedCompile") == 1
    assert torch.equal(again.cpu(), y.cpu())
    assert met.counter_value("CreateCompileHandles") == 1  # a cache hit compiles nothing
    assert _samples("ExecuteTime") == 2
    for name in ("DeviceLockWait", "UnwrapXlaData", "WrapXlaData"):
        assert _samples(name) == 2, name


def test_execute_time_lasts_until_the_results_are_ready(device, metrics):
    x = torch.randn(1200, 1200).to(device)
    y = x
    for _ in range(6):
        y = (y @ x) / 1200.0
    begin = time.perf_counter()
    torch_xla.sync()
    launched = time.perf_counter() - begin
    y.cpu()
    wall = time.perf_counter() - begin
    execute = met.metric_data("ExecuteTime")[1] / 1e9
    assert execute > 0.5 * wall, (execute, wall)
    assert launched < execute  # the sync itself did not wait for the execution


class _Result:
    """Stands for a jax array whose readiness the test decides (a real program's results
    are ready whenever its device is done)."""

    def __init__(self, ready: bool) -> None:
        self.done = threading.Event()
        if ready:
            self.done.set()

    def is_ready(self) -> bool:
        return self.done.is_set()

    def block_until_ready(self) -> _Result:
        self.done.wait()
        return self


def test_the_clock_records_a_finished_execution_at_its_check_without_its_thread():
    clock, metric = ExecutionClock(), _metrics.Metric("ClockTest")
    start = time.perf_counter()
    clock.launched(metric, start, [_Result(ready=True)])
    assert metric.total_samples == 0  # noted, not looked at yet
    clock.check()
    assert metric.total_samples == 1 and 0 < metric.samples[-1][1] < time.perf_counter() - start
    assert clock._thread is None  # nothing was handed over


def test_the_clock_times_an_unfinished_execution_until_it_is_ready():
    clock, metric = ExecutionClock(), _metrics.Metric("ClockTest")
    result = _Result(ready=False)
    clock.launched(metric, time.perf_counter(), [result])
    clock.check()
    time.sleep(0.05)
    assert metric.total_samples == 0  # still running: the thread waits for it
    threading.Timer(0.05, result.done.set).start()
    clock.settle(wait=True)  # returns once the thread has recorded it
    assert metric.total_samples == 1 and metric.samples[-1][1] >= 0.1
    clock.stop()


def test_the_clock_counts_a_result_already_donated_by_its_check_as_done():
    """Another thread's program may take over a result's buffer before its launcher
    checks it (donation): jax then refuses to say whether it is ready."""
    clock, metric = ExecutionClock(), _metrics.Metric("ClockTest")
    result = jnp.ones(3) + 1
    clock.launched(metric, time.perf_counter(), [result])
    jax.jit(lambda a: a * 2, donate_argnums=0)(result)
    assert result.is_deleted()
    clock.check()
    assert metric.total_samples == 1 and clock._thread is None


def test_every_launch_of_the_engine_is_checked_by_its_launcher(device, metrics):
    """A launch left unchecked would keep its buffers alive and be timed late."""
    x = torch.randn(4, 4).to(device)
    (x * 2).sum()
    torch_xla.sync()
    assert execution_clock._unchecked == []
    compiled = torch.compile(lambda t: (t @ t).relu(), backend="openxla")
    compiled(x)
    compiled(x)  # the cached graph's call
    assert execution_clock._unchecked == []
    assert _samples("ExecuteTime") >= 2


def test_each_engine_op_counts_xla_op_and_tracing_time(device, metrics):
    a, b = torch.ones(4).to(device), torch.ones(4).to(device)
    met.clear_all()
    a + b
    (a * b).sum()
    assert met.counter_value("xla::add") == 1
    assert met.counter_value("xla::mul") == 1 and met.counter_value("xla::sum") == 1
    assert _samples("LazyTracing") >= 3
    assert met.executed_fallback_ops() == []


def test_a_cpu_fallback_counts_its_aten_name_only(device, metrics):
    t = torch.tensor([0.0, 2.0, 0.0, 3.0]).to(device)
    met.clear_all()
    found = torch.nonzero(t)
    assert found.cpu().tolist() == [[1], [3]]
    assert met.counter_value("aten::nonzero") == 1
    assert met.counter_value("xla::nonzero") is None
    assert met.executed_fallback_ops() == ["aten::nonzero"]


def test_item_counts_as_local_scalar_dense(device, metrics):
    t = torch.tensor([2.5]).to(device) * 2
    assert t.sum().item() == 5.0
    assert bool(t.sum() > 1)
    assert met.counter_value("aten::_local_scalar_dense") == 2
    assert "aten::_local_scalar_dense" in met.short_metrics_report()


def test_median_of_all_elements_runs_on_the_cpu_median_dim_does_not(device, metrics):
    cpu = torch.tensor([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]])
    x = cpu.to(device)
    met.clear_all()
    assert torch.median(x).item() == torch.median(cpu).item()
    assert met.counter_value("aten::median") == 1
    values, indices = torch.median(x, dim=1)
    expected = torch.median(cpu, dim=1)
    assert torch.equal(values.cpu(), expected.values)
    assert torch.equal(indices.cpu(), expected.indices)
    assert met.counter_value("aten::median") == 1  # median.dim is lowered
    assert met.counter_value("xla::median") == 1


def test_create_xla_tensor_counts_user_tensors(device, metrics):
    t = torch.tensor(2077, device=device)
    assert met.counter_value("CreateXlaTensor") == 1
    u = t + 1
    assert met.counter_value("CreateXlaTensor") == 2
    del t, u
    gc.collect()
    assert met.counter_value("DestroyXlaTensor") >= 2


def test_scalars_are_copied_once_per_value(device, metrics):
    x = torch.ones(3).to(device)
    met.clear_all()
    a = x * torch.tensor(7.3125)  # a value no other test uses: the cache misses once
    b = x + torch.tensor(7.3125)
    assert met.counter_value("DeviceDataCacheMiss") == 1
    c = x * torch.tensor(-0.0)
    d = x * torch.tensor(0.0)  # equal to -0.0 with one hash: still another value
    assert torch.equal((1 / c).cpu(), torch.full((3,), -float("inf")))
    assert torch.equal((1 / d).cpu(), torch.full((3,), float("inf")))
    assert torch.equal(a.cpu(), torch.full((3,), 7.3125))
    assert torch.equal(b.cpu(), torch.full((3,), 8.3125))


def test_cleared_counters_count_again(device, metrics):
    x = torch.ones(2).to(device)
    x + x
    met.clear_all()
    assert met.counter_value("xla::add") is None and "xla::add" not in met.counter_names()
    assert met.metric_data("LazyTracing") is None
    x + x
    assert met.counter_value("xla::add") == 1 and _samples("LazyTracing") == 1


def test_increment_counter_creates_and_adds(metrics):
    xlac._xla_increment_counter("SomeCounter", 3)
    xlac._xla_increment_counter("SomeCounter")
    assert met.counter_value("SomeCounter") == 4


def test_tensor_debug_info_shows_ir_then_device_data(device, metrics):
    y = torch.ones(16).to(device) * 2
    pending = xlac._get_xla_tensor_debug_info(y)
    assert "IR: aten::mul" in pending and "XLAData: None" in pending
    assert "XLA Shape: f32[16]" in pending
    torch_xla.sync()
    computed = xlac._get_xla_tensor_debug_info(y)
    assert "IR: None" in computed and "Data Shape: f32[16]" in computed
    assert xlac._get_xla_tensor_debug_info(torch.ones(2)) == "Not a XLATensor\n"
