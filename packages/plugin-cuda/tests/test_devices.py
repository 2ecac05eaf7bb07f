import logging
import os
import stat

import pytest

from torch_xla.plugins import PluginError
from torch_xla_cuda import devices


@pytest.fixture
def driver_gpus(tmp_path):
    """A fake /proc/driver/nvidia/gpus with one directory per GPU (PCI address)."""

    def build(count: int) -> str:
        root = tmp_path / "gpus"
        root.mkdir()
        for index in range(count):
            (root / f"0000:{index:02x}:00.0").mkdir()
        return os.fspath(root)

    return build


@pytest.fixture
def nvidia_smi(tmp_path):
    """A real executable standing in for nvidia-smi, printing what a driver would."""

    def build(output: str, exit_code: int = 0) -> str:
        script = tmp_path / "nvidia-smi"
        script.write_text(f"#!/bin/sh\ncat <<'END'\n{output}\nEND\nexit {exit_code}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        return os.fspath(script)

    return build


ABSENT = "/nonexistent/driver/gpus"


def test_env_count_wins(monkeypatch, driver_gpus):
    monkeypatch.setenv("GPU_NUM_DEVICES", "3")
    assert devices.count_gpus(driver_gpus(8)) == 3


def test_bad_env_count_is_an_error(monkeypatch):
    monkeypatch.setenv("GPU_NUM_DEVICES", "many")
    with pytest.raises(PluginError, match="GPU_NUM_DEVICES='many'"):
        devices.count_gpus()


def test_driver_listing(driver_gpus):
    assert devices.count_gpus(driver_gpus(4), nvidia_smi="/nonexistent/nvidia-smi") == 4


def test_cuda_visible_devices_limits_the_count(monkeypatch, driver_gpus):
    root = driver_gpus(8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert devices.count_gpus(root) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.count_gpus(root) == 0


def test_nvidia_smi_when_proc_is_absent(nvidia_smi):
    listing = "GPU 0: NVIDIA H100 (UUID: GPU-a)\nGPU 1: NVIDIA H100 (UUID: GPU-b)"
    assert devices.count_gpus(ABSENT, nvidia_smi(listing)) == 2


def test_failing_nvidia_smi_counts_none_and_says_so(nvidia_smi, caplog):
    with caplog.at_level(logging.WARNING, logger="torch_xla"):
        count = devices.count_gpus(ABSENT, nvidia_smi("NVIDIA-SMI has failed", exit_code=9))
    assert count == 0
    assert "exited with 9" in caplog.text


def test_no_driver_no_gpus():
    assert devices.count_gpus(ABSENT, "/nonexistent/nvidia-smi") == 0


def test_this_machine_has_no_gpu():
    assert devices.count_gpus() == 0
