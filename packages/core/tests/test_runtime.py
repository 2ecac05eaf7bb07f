"""torch_xla.runtime (xr) on the CPU plugin, each case in a fresh process."""

from __future__ import annotations

import json

import pytest
from conftest import run_python

TOPOLOGY = """
import json
import torch_xla.runtime as xr
names = ["device_type", "world_size", "global_ordinal", "local_ordinal",
         "local_process_count", "local_device_count", "addressable_device_count",
         "global_device_count", "host_index", "process_index", "process_count"]
print(json.dumps({n: getattr(xr, n)() for n in names}))
"""


@pytest.mark.parametrize("num_devices", [1, 4])
def test_topology_of_one_process(num_devices):
    result = run_python(
        TOPOLOGY, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(num_devices)}
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "device_type": "CPU",
        "world_size": 1,  # no replication without xmp.spawn
        "global_ordinal": 0,
        "local_ordinal": 0,
        "local_process_count": 1,
        "local_device_count": num_devices,
        "addressable_device_count": num_devices,
        "global_device_count": num_devices,
        "host_index": 0,
        "process_index": 0,
        "process_count": 1,
    }


def test_device_type_defaults_to_cpu_when_unset():
    result = run_python("import torch_xla.runtime as xr; print(xr.device_type())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "CPU"
    assert "PJRT_DEVICE is not set; using CPU" in result.stderr


def test_bad_cpu_num_devices_is_a_clear_error():
    result = run_python(TOPOLOGY, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "four"})
    assert result.returncode != 0
    assert "CPU_NUM_DEVICES='four' is not a positive integer" in result.stderr


def test_unknown_pjrt_device_is_a_clear_error():
    result = run_python(TOPOLOGY, env={"PJRT_DEVICE": "QUANTUM"})
    assert result.returncode != 0
    assert "Unknown PJRT device 'QUANTUM'. Installed plugins: " in result.stderr
    assert "pip install torch-xla-quantum" in result.stderr


def test_set_device_type_before_start_then_refused_after():
    result = run_python(
        """
        import torch_xla.runtime as xr
        from torch_xla.plugins import DevicePlugin, register_plugin

        class Other(DevicePlugin):
            def library_path(self):
                return None
            def jax_platform(self):
                return "cpu"
            def physical_chip_count(self):
                return 1

        register_plugin("other", Other())
        xr.set_device_type("other")
        print(xr.device_type())
        xr.set_device_type("cpu")
        print(xr.device_type(), xr.global_device_count())
        xr.set_device_type("CPU")  # same type after start: allowed
        try:
            xr.set_device_type("other")
        except RuntimeError as error:
            print("refused:", error)
        """
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "OTHER"
    assert lines[1] == "CPU 1"
    assert lines[2].startswith("refused: Cannot switch to device type 'other'")
    assert "already started with 'CPU'" in lines[2]


def test_chosen_plugin_without_hardware_fails_fast_with_the_reason():
    result = run_python(
        """
        import torch_xla.runtime as xr
        from torch_xla.plugins import DevicePlugin, register_plugin

        class Absent(DevicePlugin):
            def library_path(self):
                return "/opt/absent/pjrt.so"
            def physical_chip_count(self):
                return 0

        register_plugin("absent", Absent())
        xr.set_device_type("absent")
        xr.global_device_count()
        """,
        timeout=240,
    )
    assert result.returncode != 0
    assert "found no ABSENT hardware on this host (physical_chip_count() = 0)" in result.stderr


def test_missing_plugin_library_is_a_clear_error():
    result = run_python(
        """
        import torch_xla.runtime as xr
        from torch_xla.plugins import DevicePlugin, register_plugin

        class Gone(DevicePlugin):
            def library_path(self):
                return "/opt/gone/libpjrt_gone.so"
            def physical_chip_count(self):
                return 1

        register_plugin("gone", Gone())
        xr.set_device_type("gone")
        xr.global_device_count()
        """,
        timeout=240,
    )
    assert result.returncode != 0
    assert "names the PJRT library '/opt/gone/libpjrt_gone.so', which does not exist" in (
        result.stderr
    )


COMPILE_ONCE = """
import sys
import jax.numpy as jnp
import numpy as np
import torch_xla.runtime as xr
import torch_xla.debug.metrics as met
from torch_xla.pjrt import client

xr.initialize_cache(sys.argv[1] if len(sys.argv) > 1 else {path!r}, readonly={readonly})
runtime = client()
x = runtime.to_device(np.arange(6.0).reshape(2, 3))
compiled = runtime.compile("graph-key-1", lambda a: (a * 2).sum(), x)
print(float(compiled(x)), met.counter_value("PersistentCacheHit"),
      met.metric_data("CompileTime")[0] if met.metric_data("CompileTime") else 0)
try:
    xr.initialize_cache({path!r})
except RuntimeError as error:
    print("refused:", error)
"""


def compile_once(path, readonly: bool):
    code = COMPILE_ONCE.format(path=str(path), readonly=readonly)
    return run_python(code, {"PJRT_DEVICE": "CPU"})


def test_initialize_cache_persists_compilations_across_processes(tmp_path):
    path = str(tmp_path / "cache")
    first = compile_once(path, readonly=False)
    assert first.returncode == 0, first.stderr
    value, hits, compiles = first.stdout.splitlines()[0].split()
    assert (float(value), hits, compiles) == (30.0, "None", "1")
    assert "refused: initialize_cache() must be called before the first compilation" in (
        first.stdout
    )
    second = compile_once(path, readonly=True)
    assert second.returncode == 0, second.stderr
    value, hits, compiles = second.stdout.splitlines()[0].split()
    assert (float(value), hits, compiles) == (30.0, "1", "0")  # loaded, not compiled


def test_readonly_cache_writes_nothing(tmp_path):
    path = tmp_path / "cache"
    path.mkdir()
    result = compile_once(path, readonly=True)
    assert result.returncode == 0, result.stderr
    assert list(path.iterdir()) == []


def test_corrupt_cache_entry_is_ignored_with_a_warning(tmp_path):
    path = tmp_path / "cache"
    first = compile_once(path, readonly=False)
    assert first.returncode == 0, first.stderr
    (entry,) = path.iterdir()
    entry.write_bytes(b"not an executable")
    second = compile_once(path, readonly=False)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split()[:3] == ["30.0", "None", "1"]  # recompiled
    assert "ignoring unreadable compilation cache entry" in second.stderr


def test_readonly_cache_that_does_not_exist_is_an_error(tmp_path):
    result = run_python(
        f"import torch_xla.runtime as xr; xr.initialize_cache({str(tmp_path / 'nope')!r}, True)"
    )
    assert result.returncode != 0
    assert "Read-only compilation cache" in result.stderr and "does not exist" in result.stderr


def test_set_device_type_of_an_unknown_plugin_fails_at_first_use():
    """As upstream: set_device_type only sets PJRT_DEVICE; the first device use reports the
    unknown name with the installed plugins."""
    result = run_python(
        """
        import os
        import torch_xla.runtime as xr
        xr.set_device_type("toaster")
        print(os.environ["PJRT_DEVICE"])
        xr.global_device_count()
        """,
        timeout=240,
    )
    assert result.stdout.strip() == "TOASTER"
    assert result.returncode != 0
    assert "Unknown PJRT device 'TOASTER'. Installed plugins:" in result.stderr
