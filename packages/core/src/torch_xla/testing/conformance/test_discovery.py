"""The plugin is installed, loads, finds its hardware and starts its devices."""

import os

import torch

import torch_xla.runtime as xr
from torch_xla.plugins import DevicePlugin, registry


def test_plugin_loaded_without_error(plugin_record):
    assert plugin_record.error is None
    assert isinstance(plugin_record.plugin, DevicePlugin)


def test_pjrt_device_names_this_plugin(plugin_record):
    requested = os.environ.get("PJRT_DEVICE")
    if requested:
        assert plugin_record.name == registry.canonical_name(requested)
    assert xr.device_type() == plugin_record.name


def test_library_exists_or_platform_is_built_in(plugin):
    library = plugin.library_path()
    if library is None:
        assert plugin.jax_platform(), "no library_path() and no jax_platform()"
    else:
        assert os.path.isfile(library), library


def test_hardware_is_present_and_counted(plugin):
    assert plugin.hardware_present()
    assert plugin.physical_chip_count() >= 1


def test_every_addressable_device_computes(device):
    count = xr.addressable_device_count()
    assert count >= 1
    assert xr.global_device_count() >= count
    for index in range(count):
        here = torch.device("xla", index)
        value = (torch.arange(4.0, device=here) * 2).sum()
        assert value.item() == 12.0


def test_policies_have_valid_values(plugin):
    assert plugin.dense_gather_factor() >= 0
    assert plugin.rng_algorithm() in ("default", "threefry", "philox")
    assert plugin.autocast_dtype() in (torch.bfloat16, torch.float16, torch.float32)
    assert isinstance(plugin.client_create_options(), dict)
