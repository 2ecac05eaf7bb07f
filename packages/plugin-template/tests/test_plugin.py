import os
import subprocess
import sys
import textwrap
import time

import importlib_metadata
import lammps_jax_pjrt_cpu
import pytest

from torch_xla.plugins import PluginError, registry
from torch_xla_plugin_template import TemplatePlugin, __version__, plugin

LIBRARY = os.fspath(lammps_jax_pjrt_cpu.PLUGIN_PATH)


def run_python(code: str, timeout: float = 120, **env: str):
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},  # the autouse fixture removed the template's variables
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, time.perf_counter() - start


# --- the plugin object ------------------------------------------------------------


def test_entry_point_is_declared():
    (entry,) = importlib_metadata.entry_points(group="torch_xla.plugins", name="template")
    assert entry.value == "torch_xla_plugin_template:TemplatePlugin"
    assert entry.dist.name == "torch-xla-plugin-template" and entry.dist.version == __version__


def test_registry_loaded_it_below_the_cpu_plugin():
    record = registry.record("template")
    assert isinstance(record.plugin, TemplatePlugin)
    assert record.plugin.priority < registry.get_plugin("cpu").priority


def test_never_chosen_automatically_over_the_cpu(monkeypatch):
    monkeypatch.setattr(registry, "_active", None)
    assert registry.active().name != "TEMPLATE"


def test_library_from_the_shipping_package():
    assert plugin.find_library() == LIBRARY


def test_library_from_env(monkeypatch, tmp_path):
    copy = tmp_path / "my_pjrt_plugin.so"
    copy.write_bytes(b"")
    monkeypatch.setenv("TEMPLATE_LIBRARY_PATH", os.fspath(copy))
    assert TemplatePlugin().library_path() == os.fspath(copy)


def test_library_env_naming_nothing_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TEMPLATE_LIBRARY_PATH", os.fspath(tmp_path / "missing.so"))
    with pytest.raises(PluginError, match="TEMPLATE_LIBRARY_PATH=.*missing.so.*is not a file"):
        plugin.find_library()


def test_missing_package_says_what_to_install(monkeypatch):
    monkeypatch.setattr(plugin, "LIBRARY_PACKAGE", "no_such_pjrt_package")
    with pytest.raises(PluginError, match="pip install lammps-jax-pjrt-cpu"):
        plugin.find_library()


def test_device_count_and_options(monkeypatch):
    assert TemplatePlugin().physical_chip_count() == 1
    monkeypatch.setenv("TEMPLATE_NUM_DEVICES", "3")
    template = TemplatePlugin()
    template.configure_single_process()
    assert template.client_create_options() == {"cpu_device_count": 3}
    template.configure_multiprocess(1, 3)
    assert template.client_create_options() == {"cpu_device_count": 1}
    monkeypatch.setenv("TEMPLATE_NUM_DEVICES", "lots")
    with pytest.raises(PluginError, match="TEMPLATE_NUM_DEVICES='lots'"):
        template.physical_chip_count()


# --- for real, through the core, in fresh processes --------------------------------

RUN_A_JAX_FUNCTION = """
    import jax, jax.numpy as jnp, numpy as np
    import torch_xla.pjrt as pjrt

    client = pjrt.client()
    maps = open("/proc/self/maps").read()
    assert {library!r} in maps, "the PJRT library was not loaded by path"
    from jax._src import xla_bridge
    # the only backend is the library's: jaxlib's built-in CPU client never started
    assert client.platform == "template" and set(xla_bridge.backends()) == {{"template"}}

    def fn(a, b):
        return jnp.tanh(a @ b) * 2.0 + jnp.exp(-a.sum(axis=1, keepdims=True))

    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    x, y = client.to_device(a), client.to_device(b)
    result = client.to_host(client.compile(None, fn, x, y)(x, y))
    expected = np.tanh(a @ b) * 2.0 + np.exp(-a.sum(axis=1, keepdims=True))
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    print(len(client.devices), x.devices().pop().platform)
"""


def test_runs_a_jax_function_through_the_library_loaded_by_path():
    done, _ = run_python(RUN_A_JAX_FUNCTION.format(library=LIBRARY), PJRT_DEVICE="TEMPLATE")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "cpu"]  # one device; the library calls itself cpu


def test_device_count_reaches_the_library():
    done, _ = run_python(
        RUN_A_JAX_FUNCTION.format(library=LIBRARY), PJRT_DEVICE="template", TEMPLATE_NUM_DEVICES="2"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "2"


def test_missing_library_fails_fast_and_clearly(tmp_path):
    missing = os.fspath(tmp_path / "gone" / "pjrt_c_api_cpu_plugin.so")
    done, seconds = run_python(
        "import torch_xla.pjrt as p; p.client()",
        timeout=60,
        PJRT_DEVICE="TEMPLATE",
        TEMPLATE_LIBRARY_PATH=missing,
    )
    last_line = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and seconds < 30
    assert "PluginError" in last_line and missing in last_line, done.stderr


def test_listing_shows_the_library_and_the_devices():
    done, _ = run_python(
        "import sys; from torch_xla.cli import main; sys.exit(main(['plugins', '--devices']))",
        PJRT_DEVICE="TEMPLATE",
    )
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("  template  ")[1]
    assert f"library:  {LIBRARY}" in section and "hardware: present" in section
    assert "Chosen device: TEMPLATE (PJRT_DEVICE=TEMPLATE)" in done.stdout
    assert "xla:0" in done.stdout
