"""The CPU plugin: its entry point, CPU_NUM_DEVICES, and per-process set-up."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import importlib_metadata
import pytest

from torch_xla.plugins import PluginError
from torch_xla_cpu import CpuPlugin, num_devices


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "CPU_NUM_DEVICES")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full, timeout=120,
    )


def test_entry_point_is_declared_by_the_installed_distribution():
    (entry,) = [
        ep for ep in importlib_metadata.entry_points(group="torch_xla.plugins") if ep.name == "cpu"
    ]
    assert entry.value == "torch_xla_cpu:CpuPlugin"
    assert entry.dist.name == "torch-xla-cpu"
    assert entry.load() is CpuPlugin


def test_defaults_one_device(monkeypatch):
    monkeypatch.delenv("CPU_NUM_DEVICES", raising=False)
    assert num_devices() == 1
    plugin = CpuPlugin()
    assert plugin.physical_chip_count() == 1
    assert plugin.library_path() is None and plugin.jax_platform() == "cpu"
    assert plugin.hardware_present() is True
    assert plugin.priority < 0  # chosen after every accelerator


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_bad_cpu_num_devices_is_refused(monkeypatch, bad):
    monkeypatch.setenv("CPU_NUM_DEVICES", bad)
    with pytest.raises(PluginError, match="CPU_NUM_DEVICES=.* is not a positive integer"):
        num_devices()


def test_blank_cpu_num_devices_means_the_default(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", " ")
    assert num_devices() == 1


def test_cpu_num_devices_gives_that_many_devices():
    result = run(
        """
        from torch_xla.pjrt import client
        c = client()
        print(c.name, c.platform, len(c.devices), [d.platform for d in c.devices])
        """,
        PJRT_DEVICE="cpu", CPU_NUM_DEVICES="3",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "CPU cpu 3 ['cpu', 'cpu', 'cpu']"


SPAWNED = """
import jax
import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def _mp_fn(index):
    mine = torch.full((3,), index + 1.0).to(xm.xla_device())  # per-process values as data
    total = xm.all_reduce(xm.REDUCE_SUM, mine)
    return (xr.addressable_device_count(), xr.global_device_count(),
            jax.config.jax_cpu_collectives_implementation, total.cpu().tolist())


if __name__ == "__main__":
    import sys

    with open(sys.argv[1], "w") as out:  # not stdout: gloo's own messages interleave there
        for index, seen in sorted(xmp.spawn(_mp_fn).items()):
            print(index, *seen, file=out)
"""


def test_each_spawned_process_owns_one_device_and_reduces_over_gloo(tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED)
    result = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "seen.txt")], capture_output=True,
        text=True, timeout=240,
        env={**{k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"},
             "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "3"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "seen.txt").read_text().splitlines() == [
        f"{i} 1 3 gloo [6.0, 6.0, 6.0]" for i in range(3)
    ]


def test_transfers_round_trip_every_dtype_exactly():
    result = run(
        """
        import numpy as np
        import ml_dtypes
        from torch_xla.pjrt import client
        c = client()
        rng = np.random.default_rng(0)
        dtypes = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.int16,
                  np.int32, np.int64, np.uint8, np.bool_, np.complex64]
        for dtype in dtypes:
            host = (rng.standard_normal((3, 5)) * 100).astype(dtype)
            back = c.to_host(c.to_device(host))
            assert back.dtype == host.dtype, (dtype, back.dtype)
            assert np.array_equal(back, host), dtype
        print("ok", len(dtypes))
        """,
        PJRT_DEVICE="CPU",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok 11"


def test_devices_per_process_splits_the_devices_into_processes(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    plugin = CpuPlugin()
    monkeypatch.delenv("CPU_DEVICES_PER_PROCESS", raising=False)
    assert (plugin.devices_per_process(), plugin.physical_chip_count()) == (1, 4)
    monkeypatch.setenv("CPU_DEVICES_PER_PROCESS", "2")
    assert (plugin.devices_per_process(), plugin.physical_chip_count()) == (2, 2)
    monkeypatch.setenv("CPU_DEVICES_PER_PROCESS", "all")
    assert (plugin.devices_per_process(), plugin.physical_chip_count()) == (4, 1)


def test_devices_per_process_must_divide_the_devices(monkeypatch):
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    monkeypatch.setenv("CPU_DEVICES_PER_PROCESS", "3")
    with pytest.raises(PluginError, match="CPU_DEVICES_PER_PROCESS=3 does not divide"):
        CpuPlugin().physical_chip_count()
