"""MpDeviceLoader / ParallelLoader: batches arrive on the device, in order, every epoch."""

from __future__ import annotations

import gc
import threading
import time

import pytest
import torch
from conftest import run_python
from torch.utils.data import DataLoader, TensorDataset

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
from torch_xla.utils.utils import SampleGenerator


@pytest.fixture
def device():
    return xm.xla_device()


def make_loader(batches: int = 5, batch_size: int = 4) -> DataLoader:
    x = torch.arange(batches * batch_size * 3, dtype=torch.float32).reshape(-1, 3)
    y = torch.arange(batches * batch_size)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


def loader_threads() -> int:
    return sum(1 for t in threading.enumerate() if "_read_host" in t.name or "_transfer" in t.name)


def test_batches_arrive_on_the_device_in_order_and_equal_to_the_host(device):
    loader = make_loader()
    got = [(x.device, x.cpu(), y.cpu()) for x, y in pl.MpDeviceLoader(loader, device)]
    want = list(loader)
    assert len(got) == len(want) == 5
    for (dev, x, y), (wx, wy) in zip(got, want, strict=True):
        assert dev == device
        torch.testing.assert_close(x, wx, rtol=0, atol=0)
        torch.testing.assert_close(y, wy, rtol=0, atol=0)


def test_a_pinning_data_loader_feeds_the_device(device):
    """`DataLoader(pin_memory=True)`, common in CUDA code, pins for the current accelerator:
    the xla device once torch_xla is imported. It raised NotImplementedError (torch asks a
    PrivateUse1 backend for a pinned-memory allocator); pinning for xla keeps the batch."""
    x = torch.arange(24, dtype=torch.float32).reshape(8, 3)
    loader = DataLoader(TensorDataset(x), batch_size=4, pin_memory=True)
    got = [batch.cpu() for (batch,) in pl.MpDeviceLoader(loader, device)]
    assert [b.tolist() for b in got] == [x[:4].tolist(), x[4:].tolist()]
    t = torch.ones(3)
    assert t.pin_memory() is t


def test_nested_batches_keep_their_structure(device):
    data = [{"image": torch.ones(2, 2), "meta": (torch.zeros(1), "name")}] * 2
    (first, second) = list(pl.MpDeviceLoader(data, device))
    assert first["image"].device == device and first["meta"][0].device == device
    assert first["meta"][1] == "name"
    assert second["image"].cpu().sum().item() == 4


def test_re_iterates_every_epoch_and_closes_its_threads(device):
    mp_loader = pl.MpDeviceLoader(make_loader(batches=3), device)
    assert len(mp_loader) == 3
    for _ in range(3):
        assert [y.cpu()[0].item() for _, y in mp_loader] == [0, 4, 8]
    deadline = time.time() + 5
    while loader_threads() and time.time() < deadline:
        time.sleep(0.05)
    assert loader_threads() == 0


def test_breaking_out_early_then_closing_stops_the_threads(device):
    iterator = iter(pl.MpDeviceLoader(make_loader(batches=50), device, loader_prefetch_size=2,
                                      device_prefetch_size=1))
    next(iterator)
    iterator.close()
    assert loader_threads() == 0


def test_dropping_the_iterator_after_a_break_stops_the_threads(device):
    for _ in pl.MpDeviceLoader(make_loader(batches=50), device, device_prefetch_size=1):
        break
    gc.collect()
    deadline = time.time() + 5
    while loader_threads() and time.time() < deadline:
        time.sleep(0.05)
    assert loader_threads() == 0


def test_exit_waits_for_the_threads_of_a_loop_left_early(device):
    """At exit the threads of a loader a loop broke out of are stopped and joined (they
    were daemons left moving batches, and the runtime torn down under a copy aborted the
    process); the hook runs before the engine's own exit hook."""
    for _ in pl.MpDeviceLoader(make_loader(batches=50), device, device_prefetch_size=4):
        break
    running = [t for t in threading.enumerate()
               if "_read_host" in t.name or "_transfer" in t.name]
    pl._close_at_exit()
    assert running and not any(t.is_alive() for t in running)


def test_a_script_leaving_a_loader_early_exits_cleanly():
    """Before the fix, most runs of this script aborted at exit (exit code 134)."""
    script = """
        import torch
        import torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl
        from torch_xla.utils.utils import SampleGenerator
        data = SampleGenerator(data=torch.randn(4096, 4096), sample_count=64)
        for step, batch in enumerate(pl.MpDeviceLoader(data, xm.xla_device())):
            if step == 2:
                break
        print("left the loop")
        """
    for _ in range(3):
        result = run_python(script, env={"PJRT_DEVICE": "CPU"}, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "left the loop" in result.stdout


def test_mark_step_every_batches_per_execution(device):
    met.clear_all()
    before = met.counter_value("MarkStep") or 0
    for _ in pl.MpDeviceLoader(make_loader(batches=6), device, batches_per_execution=2):
        pass
    # after batches 2 and 4 (before handing out 3 and 5), and once at the end
    assert (met.counter_value("MarkStep") or 0) - before == 3


def test_a_failing_dataset_raises_in_the_training_loop(device):
    def broken():
        yield torch.ones(2)
        raise OSError("disk went away")

    class Broken:
        def __iter__(self):
            return broken()

        def __len__(self):
            return 2

    iterator = iter(pl.MpDeviceLoader(Broken(), device))
    assert next(iterator).device == device
    with pytest.raises(OSError, match="disk went away"):
        next(iterator)
    assert loader_threads() == 0


def test_parallel_loader_per_device_loader_and_bad_arguments(device):
    para = pl.ParallelLoader(make_loader(batches=2), [device])
    per_device = para.per_device_loader(device)
    assert len(per_device) == 2
    assert len(list(per_device)) == 2
    with pytest.raises(ValueError, match="batches_per_execution must be >= 1"):
        pl.ParallelLoader(make_loader(), [device], batches_per_execution=0)
    with pytest.raises(ValueError, match="not one of this loader's devices"):
        pl.ParallelLoader(make_loader(), [device]).per_device_loader("xla:7")


def test_sample_generator_is_fake_data_for_a_fixed_number_of_steps(device):
    data = (torch.zeros(8, 1, 28, 28), torch.zeros(8, dtype=torch.int64))
    fake = SampleGenerator(data, sample_count=3)
    assert len(fake) == 3
    assert [b is data for b in fake] == [True, True, True]
    assert len(list(fake)) == 3  # a new pass each time
    batches = list(pl.MpDeviceLoader(fake, device))
    assert len(batches) == 3 and batches[0][0].shape == (8, 1, 28, 28)
    with pytest.raises(ValueError):
        SampleGenerator(data, -1)


def test_loader_workers_fork_without_jax_warning_and_other_forks_still_warn():
    """A DataLoader with workers forks a process whose XLA runtime runs: jax warns "will
    likely lead to a deadlock" at each such fork, though workers never use the device.
    The warning is gone for loaders (batches as on the CPU), kept for any other fork."""
    done = run_python("""
        import os, warnings
        import torch, torch_xla, torch_xla.core.xla_model as xm
        import torch_xla.distributed.parallel_loader as pl
        warnings.simplefilter("default")
        device = xm.xla_device()
        total = torch.zeros(3, device=device)
        torch.manual_seed(0)
        data = torch.randn(64, 3)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data),
                                             batch_size=16, num_workers=2)
        for (x,) in pl.MpDeviceLoader(loader, device):
            total = total + x.sum(0)
        for (x,) in loader:  # a plain loader too
            total = total + x.to(device).sum(0)
        assert torch.allclose(total.cpu(), 2 * data.sum(0), atol=1e-5), total
        print("loaders done", flush=True)
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    """, env={"PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr
    assert "loaders done" in done.stdout
    assert "popen_fork" not in done.stderr, done.stderr  # where the workers' fork warned
    assert done.stderr.count("os.fork() was called") == 1, done.stderr  # the plain fork
