"""`torch_xla.runtime` entry points added for PyTorch/XLA's API (device type, counts,
attributes, the program cache) and `torch_xla.core.xla_env_vars`."""

from __future__ import annotations

import os
from unittest import mock

import pytest
import torch
from conftest import run_python

import torch_xla
import torch_xla.core.xla_env_vars as xenv
import torch_xla.runtime as xr
from torch_xla.lazy import compiler


def test_env_var_names_are_pytorch_xla_s():
    assert (xenv.PJRT_DEVICE, xenv.PJRT_SELECT_DEFAULT_DEVICE, xenv.CPU_NUM_DEVICES) == (
        "PJRT_DEVICE", "PJRT_SELECT_DEFAULT_DEVICE", "CPU_NUM_DEVICES")
    assert (xenv.PJRT_LOCAL_PROCESS_RANK, xenv.PJRT_LOCAL_PROCESS_COUNT) == (
        "PJRT_LOCAL_PROCESS_RANK", "PJRT_LOCAL_PROCESS_COUNT")
    assert (xenv.LOCAL_RANK, xenv.WORLD_SIZE) == ("LOCAL_RANK", "WORLD_SIZE")


def test_device_type_reads_pjrt_device_first():
    with mock.patch.dict(os.environ, {"PJRT_DEVICE": "cpu_special"}):
        assert xr.device_type() == "CPU"
    with mock.patch.dict(os.environ, {"PJRT_SELECT_DEFAULT_DEVICE": "0"}, clear=True):
        assert xr.device_type() is None


def test_set_device_type_refuses_a_switch_once_the_runtime_runs():
    torch_xla.device()  # starts the runtime
    assert torch_xla._XLAC._xla_runtime_is_initialized()
    xr.set_device_type("CPU")  # the same type is fine
    with mock.patch.dict(os.environ, {"PJRT_DEVICE": "CPU"}), \
            pytest.raises(RuntimeError, match="already started"):
        xr.set_device_type("OTHER")


def test_counts_of_one_process():
    torch_xla.device()
    assert xr.global_runtime_device_count() == xr.global_device_count() == 1
    assert xr.addressable_runtime_device_count() == xr.addressable_device_count() == 1
    assert xr.local_process_count() == 1
    assert (xr.process_index(), xr.process_count(), xr.host_index()) == (0, 1, 0)
    assert (xr.global_ordinal(), xr.local_ordinal()) == (0, 0)


def test_device_attributes_name_the_runtime_device():
    attributes = xr.runtime_device_attributes("xla:0")
    assert attributes["name"] == "CPU:0"
    assert attributes["process_index"] == 0
    assert attributes["device_kind"]
    assert xr.global_runtime_device_attributes() == [xr.runtime_device_attributes("CPU:0")]
    with pytest.raises(RuntimeError, match="Unknown device 'CPU:5'"):
        xr.runtime_device_attributes("CPU:5")


def test_bf16_is_supported_on_the_cpu():
    assert xr.is_bf16_supported() is True


def test_get_num_cached_compilation_graph_counts_the_program_cache():
    device = torch_xla.device()
    compiler.cache().clear()
    assert xr.get_num_cached_compilation_graph() == 0
    (torch.ones(3, device=device) * 7).cpu()
    assert xr.get_num_cached_compilation_graph() == 1
    (torch.ones(3, device=device) * 7).cpu()  # the same graph: a cache hit
    assert xr.get_num_cached_compilation_graph() == 1
    (torch.ones(5, device=device) * 7).cpu()
    assert xr.get_num_cached_compilation_graph() == 2


def test_get_master_ip_needs_a_job():
    with pytest.raises(RuntimeError, match="not part of a multi-process job"):
        xr.get_master_ip()


def test_get_master_ip_in_a_job_is_the_coordinator_host():
    result = run_python("""
        import torch_xla.runtime as xr
        print(xr.get_master_ip())
    """, env={"PJRT_DEVICE": "CPU", "PJRT_LOCAL_PROCESS_RANK": "0",
              "PJRT_LOCAL_PROCESS_COUNT": "1", "XLA_COORDINATOR_ADDRESS": "localhost:1234"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "127.0.0.1"


def test_is_spmd_reads_xla_use_spmd_as_upstream(monkeypatch):
    monkeypatch.setenv("XLA_USE_SPMD", "1")
    assert xr.is_spmd() is True
    monkeypatch.setenv("XLA_USE_SPMD", "0")
    assert xr.is_spmd() is False
    monkeypatch.delenv("XLA_USE_SPMD")
    assert xr.is_spmd() is False


def test_device_type_keeps_a_plugin_name_with_an_underscore(clean_registry):
    from torch_xla.plugins.base import DevicePlugin

    class Fake(DevicePlugin):
        def library_path(self):
            return None

        def physical_chip_count(self):
            return 1

    clean_registry.register_plugin("MY_DEVICE", Fake())
    with mock.patch.dict(os.environ, {"PJRT_DEVICE": "my_device"}):
        assert xr.device_type() == "MY_DEVICE"
    with mock.patch.dict(os.environ, {"PJRT_DEVICE": "other_suffix"}):
        assert xr.device_type() == "OTHER"
