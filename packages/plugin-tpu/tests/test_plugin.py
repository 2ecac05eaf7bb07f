import os
import subprocess
import sys
import textwrap
import time

import importlib_metadata
import torch

from torch_xla.plugins import DtypePolicy, registry
from torch_xla_tpu import TpuPlugin, __version__

GOOGLE = "0x1ae0"
V4 = (GOOGLE, "0x005e")


def run_python(code: str, timeout: float = 120, **env: str):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},  # the autouse fixture removed TPU variables
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.perf_counter() - start


def test_entry_point_is_declared():
    (entry,) = importlib_metadata.entry_points(group="torch_xla.plugins", name="tpu")
    assert entry.value == "torch_xla_tpu:TpuPlugin"
    assert entry.dist.name == "torch-xla-tpu" and entry.dist.version == __version__


def test_registry_loaded_it():
    record = registry.record("tpu")
    assert isinstance(record.plugin, TpuPlugin)
    assert record.plugin.priority == 300


def test_chip_count_from_pci_capped_by_process_bounds(pci_tree, monkeypatch):
    plugin = TpuPlugin(sysfs_root=pci_tree([V4] * 4))
    assert plugin.physical_chip_count() == 4 and plugin.hardware_present()
    monkeypatch.setenv("TPU_PROCESS_BOUNDS", "1,2,1")
    assert plugin.physical_chip_count() == 2


def test_no_hardware_here():
    plugin = TpuPlugin()
    assert plugin.physical_chip_count() == 0 and not plugin.hardware_present()


def test_configure_multiprocess_uses_the_host_generation(pci_tree):
    TpuPlugin(sysfs_root=pci_tree([(GOOGLE, "0x0027")] * 4)).configure_multiprocess(3, 4)
    assert os.environ["TPU_VISIBLE_CHIPS"] == "3"
    assert "TPU_PROCESS_BOUNDS" not in os.environ  # v2/v3 take no bounds


def test_host_index_is_the_worker_id(monkeypatch):
    assert TpuPlugin().host_index() == 0
    monkeypatch.setenv("TPU_WORKER_ID", "3")
    assert TpuPlugin().host_index() == 3


def test_client_create_options(monkeypatch):
    from torch_xla.version import __version__ as core_version

    assert TpuPlugin().client_create_options() == {
        "max_inflight_computations": 4,
        "ml_framework_name": "PyTorch/XLA",
        "ml_framework_version": core_version,
    }
    monkeypatch.setenv("XLA_TPU_MAX_INFLIGHT_COMPUTATIONS", "8")
    assert TpuPlugin().client_create_options()["max_inflight_computations"] == 8


def test_policies(monkeypatch):
    plugin = TpuPlugin()
    assert plugin.dense_gather_factor() == 81920
    monkeypatch.setenv("XLA_DENSE_GATHER_FACTOR", "10")
    assert plugin.dense_gather_factor() == 100
    assert plugin.dtype_policy() == DtypePolicy(f64_as_f32=True)
    assert plugin.autocast_dtype() == torch.bfloat16
    assert plugin.rng_algorithm() == "default"
    assert not plugin.requires_xla_coordinator()


def test_import_does_not_import_libtpu():
    done, _ = run_python(
        "import torch_xla, torch_xla_tpu, sys; assert 'libtpu' not in sys.modules, 'imported'"
    )
    assert done.returncode == 0, done.stderr


def test_importing_the_plugin_package_first_warns_nothing():
    done, _ = run_python(
        "import warnings; warnings.simplefilter('error'); import torch_xla_tpu\n"
        "import torch_xla.plugins as p; print(p.get_plugin('tpu'))"
    )
    assert done.returncode == 0, done.stderr


def test_pjrt_device_tpu_without_a_tpu_fails_fast_and_clearly():
    """The real libtpu is installed; this machine has no TPU."""
    done, seconds = run_python(
        "import torch_xla.pjrt as p; p.client()", timeout=60, PJRT_DEVICE="TPU"
    )
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0
    assert seconds < 30, f"took {seconds:.1f}s"
    assert "TPU" in last_line and "hardware" in last_line, done.stderr
    assert "Fatal Python error" not in done.stderr  # an exception, not a crash


def test_libtpu_accepts_our_client_options_then_reports_no_device(pci_tree):
    """Past the core's hardware check (a fake v4 host), libtpu itself loads, takes our
    create options (it rejects unknown names before probing) and fails in under a second."""
    done, seconds = run_python(
        f"""
        import torch_xla
        from torch_xla.plugins import register_plugin
        from torch_xla_tpu import TpuPlugin
        import torch_xla.pjrt as p
        register_plugin("tpu", TpuPlugin(sysfs_root={pci_tree([V4] * 4)!r}))
        p.client()
        """,
        timeout=60,
    )
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and seconds < 30
    assert "XlaRuntimeError" in last_line and "TPU" in last_line, done.stderr
    assert "NOT_FOUND" in last_line, last_line  # not INVALID_ARGUMENT: options were accepted


def test_listing_shows_libtpu_and_no_hardware():
    done, _ = run_python("import sys; from torch_xla.cli import main; sys.exit(main(['plugins']))")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("  tpu  ")[1].splitlines()[1:6]  # the TPU plugin's own lines
    assert [line.split(":")[0].strip() for line in lines] == [
        "class",
        "priority",
        "library",
        "chips",
        "hardware",
    ]
    assert lines[1].endswith(" 300") and lines[2].endswith("/libtpu/libtpu.so")
    assert lines[3].endswith(" 0") and lines[4].endswith(" absent")
