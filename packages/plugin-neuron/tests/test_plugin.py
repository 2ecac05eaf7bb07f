import os
import subprocess
import sys
import time

import importlib_metadata
import pytest
import torch

from torch_xla.plugins import DtypePolicy, registry
from torch_xla_neuron import NeuronPlugin, __version__


def run_python(code: str, timeout: float = 60, **env: str):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},  # the autouse fixture removed Neuron variables
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.perf_counter() - start


def test_entry_point_is_declared():
    (entry,) = importlib_metadata.entry_points(group="torch_xla.plugins", name="neuron")
    assert entry.value == "torch_xla_neuron:NeuronPlugin"
    assert entry.dist.name == "torch-xla-neuron" and entry.dist.version == __version__


def test_registry_loaded_it():
    record = registry.record("neuron")
    assert isinstance(record.plugin, NeuronPlugin) and record.plugin.priority == 100


def test_hardware(monkeypatch, tmp_path):
    assert not NeuronPlugin().hardware_present()
    (tmp_path / "neuron0").write_text("")
    assert NeuronPlugin(dev_root=os.fspath(tmp_path)).hardware_present()
    monkeypatch.setenv("NEURONCORE_NUM_DEVICES", "2")
    assert NeuronPlugin().physical_chip_count() == 2


def test_configure_multiprocess_sets_the_runtime_variables():
    NeuronPlugin().configure_multiprocess(1, 2)
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "1"
    assert os.environ["NEURON_PJRT_PROCESS_INDEX"] == "1"
    assert os.environ["NEURON_RT_ROOT_COMM_ID"] == "localhost:62182"


def test_policies(monkeypatch):
    plugin = NeuronPlugin()
    assert plugin.dtype_policy() == DtypePolicy(f64_as_f32=True, s16_as_s32=True)
    assert plugin.dense_gather_factor() == 81920
    assert plugin.autocast_dtype() == torch.bfloat16
    assert plugin.client_create_options() == {}
    assert not plugin.requires_xla_coordinator()


def test_pjrt_device_neuron_without_hardware_fails_fast_and_clearly():
    done, seconds = run_python("import torch_xla.pjrt as p; p.client()", PJRT_DEVICE="NEURON")
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and seconds < 30, done.stderr
    assert "NEURON" in last_line and "hardware" in last_line, done.stderr


def test_without_libneuronxla_the_client_error_says_how_to_install():
    done, _ = run_python(
        "import torch_xla.pjrt as p; p.client()", PJRT_DEVICE="NEURON", NEURONCORE_NUM_DEVICES="1"
    )
    last_line = done.stderr.strip().splitlines()[-1]
    assert "PluginError" in last_line and "pip install libneuronxla" in last_line, done.stderr


def test_the_library_libneuronxla_reports_is_the_one_pjrt_loads(libneuronxla):
    """End to end through the core with the stand-in libneuronxla reporting a real PJRT
    C API library (the CPU one from lammps-jax-pjrt-cpu, as no Neuron library exists here)."""
    cpu_library = pytest.importorskip("lammps_jax_pjrt_cpu").PLUGIN_PATH
    site = libneuronxla(os.fspath(cpu_library))
    code = (
        "import torch_xla.pjrt as p; c = p.client(); "
        "print(c.platform, len(c.devices), c.devices[0].client.platform_version)"
    )
    done, _ = run_python(
        code,
        timeout=120,
        PJRT_DEVICE="NEURON",
        NEURONCORE_NUM_DEVICES="1",
        PYTHONPATH=os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "neuron", done.stdout


def test_dtype_policy_reaches_the_compiled_graph(libneuronxla, tmp_path):
    """float64 is stored and computed as float32, int16 as int32, on the (stand-in) device,
    while tensors still report their PyTorch dtypes."""
    cpu_library = pytest.importorskip("lammps_jax_pjrt_cpu").PLUGIN_PATH
    site = libneuronxla(os.fspath(cpu_library))
    dump = tmp_path / "graphs.hlo"
    code = (
        "import torch, torch_xla.core.xla_model as xm\n"
        "d = xm.xla_device()\n"
        "x = torch.tensor([1 + 2**-40], dtype=torch.float64).to(d) * 2\n"
        "s = torch.tensor([300], dtype=torch.int16).to(d) * 3\n"
        "print(x.dtype, s.dtype, x.cpu().item(), s.cpu().item())\n"
    )
    done, _ = run_python(
        code, timeout=120, PJRT_DEVICE="NEURON", NEURONCORE_NUM_DEVICES="1",
        XLA_SAVE_TENSORS_FILE=str(dump), XLA_SAVE_TENSORS_FMT="hlo",
        PYTHONPATH=os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["torch.float64", "torch.int16", "2.0", "900"]
    hlo = dump.with_name(dump.name + ".0").read_text()
    assert "f32[1]" in hlo and "s32[1]" in hlo
    assert "f64[" not in hlo and "s16[" not in hlo
