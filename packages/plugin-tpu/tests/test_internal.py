"""`torch_xla._internal.tpu` (PyTorch/XLA's name) is this package's `internal` module,
found by the core through the `torch_xla.internal_modules` entry point."""

import os

import pytest

import torch_xla_tpu.internal
from torch_xla.plugins import PluginError
from torch_xla_tpu import topology


def test_the_core_resolves_internal_tpu_to_this_package():
    from torch_xla._internal import tpu

    assert tpu is torch_xla_tpu.internal


def test_counts_follow_the_pci_bus(monkeypatch):
    chips = topology.find_chips()  # this machine's real bus (no TPU on CI)
    assert torch_xla_tpu.internal.num_available_chips() == chips.count
    assert torch_xla_tpu.internal.num_available_devices() == chips.devices
    monkeypatch.setenv("TPU_PROCESS_BOUNDS", "1,1,1")
    assert torch_xla_tpu.internal.num_local_processes() == min(chips.count, 1)


def test_version_without_chips_says_why(monkeypatch):
    monkeypatch.setattr(topology, "find_chips", lambda: topology.LocalChips(0, None))
    with pytest.raises(PluginError, match="No TPU chips"):
        torch_xla_tpu.internal.version()


@pytest.mark.parametrize("pci_id, major", [("0x005e", 4), ("0x0063", 5), ("0x006f", 6),
                                           ("0x0027", 3)])
def test_version_from_the_generation(monkeypatch, pci_id, major):
    chips = topology.LocalChips(4, topology.GENERATIONS[pci_id])
    monkeypatch.setattr(topology, "find_chips", lambda: chips)
    assert torch_xla_tpu.internal.version() == major


def test_topology_settings_and_task_id(monkeypatch):
    monkeypatch.setattr(topology, "find_chips",
                        lambda: topology.LocalChips(4, topology.GENERATIONS["0x005e"]))
    assert torch_xla_tpu.internal.task_id() is None
    torch_xla_tpu.internal.configure_topology(1, 4)
    assert os.environ["TPU_VISIBLE_CHIPS"] == "1"
    assert torch_xla_tpu.internal.task_id() == 1
    assert torch_xla_tpu.internal.discover_master_worker_ip() == "localhost"
