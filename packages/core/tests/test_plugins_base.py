"""The DevicePlugin contract: required methods and documented defaults."""

import pytest
import torch

from torch_xla.plugins import DevicePlugin, DtypePolicy


class Minimal(DevicePlugin):
    def library_path(self):
        return "/opt/vendor/pjrt.so"

    def physical_chip_count(self):
        return 2


def test_library_path_and_chip_count_are_required():
    class Incomplete(DevicePlugin):
        def library_path(self):
            return None

    with pytest.raises(TypeError, match="physical_chip_count"):
        Incomplete()


def test_defaults_are_documented_values():
    plugin = Minimal()
    assert plugin.priority == 0
    assert plugin.jax_platform() is None
    assert plugin.hardware_present() is True
    assert plugin.host_index() == 0
    assert plugin.configure_single_process() is None
    assert plugin.configure_multiprocess(1, 4) is None
    assert plugin.client_create_options() == {}
    assert plugin.requires_xla_coordinator() is False
    assert plugin.dense_gather_factor() == 0
    assert plugin.rng_algorithm() == "default"
    assert plugin.dtype_policy() == DtypePolicy(False, False, False)
    assert plugin.autocast_dtype() is torch.bfloat16


def test_hardware_present_follows_chip_count():
    class Absent(Minimal):
        def physical_chip_count(self):
            return 0

    assert Absent().hardware_present() is False


def test_dtype_policy_is_immutable():
    policy = DtypePolicy(f64_as_f32=True)
    with pytest.raises(AttributeError):
        policy.f64_as_f32 = False
