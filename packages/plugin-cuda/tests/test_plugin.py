import os
import subprocess
import sys
import textwrap
import time

import importlib_metadata
import pytest
import torch

from torch_xla.plugins import PluginError, registry
from torch_xla_cuda import CudaPlugin, __version__, library

PJRT_INSTALLED = any(library.package_directory(module) for module, _ in library.PJRT_PACKAGES)


def run_python(code: str, timeout: float = 60, **env: str):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},  # the autouse fixture removed CUDA variables
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.perf_counter() - start


def test_entry_point_is_declared():
    (entry,) = importlib_metadata.entry_points(group="torch_xla.plugins", name="cuda")
    assert entry.value == "torch_xla_cuda:CudaPlugin"
    assert entry.dist.name == "torch-xla-cuda" and entry.dist.version == __version__
    extras = {"cuda12", "cuda13", "cuda12-local", "cuda13-local"}
    assert set(entry.dist.metadata.get_all("Provides-Extra")) == extras
    # What `jax[cuda1x]` installs: jax's custom calls and NVIDIA's libraries with the
    # PJRT library (jax-cuda1x-plugin requires jax-cuda1x-pjrt); `-local` without NVIDIA's.
    requires = {r.replace(" ", "").replace("'", '"') for r in entry.dist.requires or []}
    for cuda in ("12", "13"):
        assert f'jax-cuda{cuda}-plugin[with-cuda];extra=="cuda{cuda}"' in requires, requires
        assert f'jax-cuda{cuda}-plugin;extra=="cuda{cuda}-local"' in requires, requires


def test_registry_loaded_it():
    record = registry.record("cuda")
    assert isinstance(record.plugin, CudaPlugin) and record.plugin.priority == 200


def test_hardware_from_the_device_count(monkeypatch):
    plugin = CudaPlugin()
    assert plugin.physical_chip_count() == 0 and not plugin.hardware_present()
    monkeypatch.setenv("GPU_NUM_DEVICES", "2")
    assert plugin.physical_chip_count() == 2 and plugin.hardware_present()


def test_single_process_options_use_every_gpu():
    plugin = CudaPlugin()
    plugin.configure_single_process()
    assert plugin.client_create_options() == {"platform_name": "cuda", "allocator": "default"}


def test_each_process_sees_its_own_gpu():
    plugin = CudaPlugin()
    plugin.configure_multiprocess(2, 4)
    assert plugin.client_create_options()["visible_devices"] == [2]
    with pytest.raises(PluginError, match="rank 4 is outside 0..3"):
        plugin.configure_multiprocess(4, 4)


def test_allocator_options(monkeypatch):
    monkeypatch.setenv("PJRT_ALLOCATOR_FRACTION", "0.5")
    monkeypatch.setenv("PJRT_ALLOCATOR_PREALLOCATE", "false")
    monkeypatch.setenv("PJRT_ALLOCATOR_CUDA_ASYNC", "1")
    options = CudaPlugin().client_create_options()
    assert options["memory_fraction"] == 0.5
    assert options["preallocate"] is False
    assert options["allocator"] == "cuda_async"


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("PJRT_ALLOCATOR_FRACTION", "1.5", "not a fraction"),
        ("PJRT_ALLOCATOR_FRACTION", "half", "not a fraction"),
        ("PJRT_ALLOCATOR_PREALLOCATE", "maybe", "not a boolean"),
    ],
)
def test_bad_allocator_values_are_errors(monkeypatch, name, value, match):
    monkeypatch.setenv(name, value)
    with pytest.raises(PluginError, match=f"{name}='{value}' is {match}"):
        CudaPlugin().client_create_options()


def test_coordinator_only_for_several_processes(monkeypatch):
    plugin = CudaPlugin()
    assert not plugin.requires_xla_coordinator()
    monkeypatch.setenv("PJRT_LOCAL_PROCESS_COUNT", "4")  # xmp.spawn's, before configuring
    assert plugin.requires_xla_coordinator()
    monkeypatch.delenv("PJRT_LOCAL_PROCESS_COUNT")
    plugin.configure_multiprocess(0, 2)
    assert plugin.requires_xla_coordinator()
    plugin.configure_single_process()
    monkeypatch.setenv("WORLD_SIZE", "2")  # one process on each of two hosts
    assert plugin.requires_xla_coordinator()


def test_bad_world_size_is_an_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "0")
    with pytest.raises(PluginError, match="WORLD_SIZE='0' is not a positive integer"):
        CudaPlugin().requires_xla_coordinator()


def test_policies():
    plugin = CudaPlugin()
    assert plugin.autocast_dtype() == torch.float16
    assert plugin.rng_algorithm() == "philox"
    assert plugin.dense_gather_factor() == 0


def test_import_touches_no_cuda_package():
    done, _ = run_python(
        "import torch_xla, torch_xla_cuda, sys; "
        "assert not [m for m in sys.modules if m.startswith('jax_plugins')], 'imported'"
    )
    assert done.returncode == 0, done.stderr


def test_pjrt_device_cuda_without_a_gpu_fails_fast_and_clearly():
    done, seconds = run_python("import torch_xla.pjrt as p; p.client()", PJRT_DEVICE="CUDA")
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and seconds < 30, done.stderr
    assert "CUDA" in last_line and "hardware" in last_line, done.stderr


# Makes the jax-cuda PJRT packages installed here (if any) invisible to the child.
HIDE_PJRT_PACKAGES = (
    "import sys, types; hidden = types.ModuleType('jax_plugins'); hidden.__path__ = []; "
    "sys.modules['jax_plugins'] = hidden; "
)


def test_missing_pjrt_package_fails_with_the_install_command():
    """Past the hardware check (GPU_NUM_DEVICES=1), the missing library is named."""
    done, seconds = run_python(
        HIDE_PJRT_PACKAGES + "import torch_xla.pjrt as p; p.client()",
        PJRT_DEVICE="CUDA",
        GPU_NUM_DEVICES="1",
    )
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and seconds < 30, done.stderr
    assert "PluginError" in last_line and "torch-xla-cuda[cuda12]" in last_line, done.stderr


def test_the_installed_setup_without_a_gpu_fails_fast_and_clearly():
    """What a user gets here for real, past the hardware check: with jax-cuda1x-pjrt
    installed (the CI session installs it), the real library is registered once and jax
    finds no GPU; without it, the install command. Neither crashes nor hangs.

    JAX_SKIP_CUDA_CONSTRAINTS_CHECK lets jax's own initialize() of the package get as far
    as registering "cuda" a second time, had keep_jax_from_registering_it not run.
    """
    done, seconds = run_python(
        "import torch_xla.pjrt as p; p.client()",
        PJRT_DEVICE="CUDA",
        GPU_NUM_DEVICES="1",
        JAX_SKIP_CUDA_CONSTRAINTS_CHECK="1",
    )
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and seconds < 30, done.stderr
    assert "Fatal Python error" not in done.stderr
    if PJRT_INSTALLED:
        assert "XlaRuntimeError" in last_line and "CUDA" in last_line, done.stderr
        assert "ALREADY_EXISTS" not in done.stderr, done.stderr
        assert "Jax plugin configuration error" not in done.stderr, done.stderr
    else:
        assert "PluginError" in last_line and "torch-xla-cuda[cuda12]" in last_line, done.stderr
