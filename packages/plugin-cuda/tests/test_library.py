import importlib
import importlib.util
import os
import sys
import types

import pytest

from torch_xla.plugins import PluginError
from torch_xla_cuda import library

STAND_INS = [module for module, _ in library.PJRT_PACKAGES]


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A `jax_plugins` namespace that holds only the stand-in PJRT packages a test installs.

    The packages really installed here (if any) are out of sight, so each test sees exactly
    what it builds; the stand-ins' `__init__` raises if anything imports them.
    """
    namespace = tmp_path / "jax_plugins"
    namespace.mkdir()
    hidden = types.ModuleType("jax_plugins")
    hidden.__path__ = [os.fspath(namespace)]
    monkeypatch.setitem(sys.modules, "jax_plugins", hidden)
    for module in STAND_INS:
        monkeypatch.delitem(sys.modules, module, raising=False)

    def install(module: str, with_library: bool = True) -> str:
        package = tmp_path.joinpath(*module.split("."))
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("raise AssertionError('must not be imported')\n")
        if with_library:
            (package / library.LIBRARY_FILE).write_bytes(b"\x7fELF stand-in")
        importlib.invalidate_caches()
        return os.fspath(package / library.LIBRARY_FILE)

    yield install
    for module in STAND_INS:  # what keep_jax_from_registering_it put there
        sys.modules.pop(module, None)


def test_without_a_pjrt_package_the_error_names_the_extras(site):
    with pytest.raises(PluginError) as error:
        library.find_library()
    message = str(error.value)
    assert "torch-xla-cuda[cuda12]" in message and "torch-xla-cuda[cuda13]" in message
    assert "GPU_LIBRARY_PATH" in message


def test_finds_the_cuda12_package_without_importing_it(site):
    path = site("jax_plugins.xla_cuda12")
    assert library.find_library() == path
    assert "jax_plugins.xla_cuda12" not in sys.modules


def test_prefers_cuda13_when_both_are_installed(site):
    site("jax_plugins.xla_cuda12")
    cuda13 = site("jax_plugins.xla_cuda13")
    assert library.find_library() == cuda13


def test_package_without_library_is_reported(site):
    site("jax_plugins.xla_cuda12", with_library=False)
    with pytest.raises(PluginError, match="has no xla_cuda_plugin.so.*cuda12"):
        library.find_library()


def test_env_override(monkeypatch, tmp_path):
    custom = tmp_path / "custom_cuda_plugin.so"
    custom.write_bytes(b"")
    monkeypatch.setenv("GPU_LIBRARY_PATH", os.fspath(custom))
    assert library.find_library() == os.fspath(custom)
    monkeypatch.setenv("GPU_LIBRARY_PATH", os.fspath(tmp_path / "missing.so"))
    with pytest.raises(PluginError, match="missing.so.*is not a file"):
        library.find_library()


def test_jax_discovery_finds_a_stand_in_that_registers_nothing(site):
    """jax imports every jax_plugins.* package and calls its initialize(): after
    keep_jax_from_registering_it that is a no-op, and the real package is never imported."""
    path = site("jax_plugins.xla_cuda13")
    library.keep_jax_from_registering_it()
    module = importlib.import_module("jax_plugins.xla_cuda13")  # what jax's discovery does
    assert module.initialize() is None
    assert library.find_library() == path  # the library is still found where installed
    assert "jax_plugins.xla_cuda12" not in sys.modules  # absent packages get no stand-in


def test_configuring_the_plugin_keeps_jax_from_registering_cuda(site):
    from torch_xla_cuda import CudaPlugin

    site("jax_plugins.xla_cuda12")
    CudaPlugin().configure_single_process()
    assert importlib.import_module("jax_plugins.xla_cuda12").initialize() is None
    sys.modules.pop("jax_plugins.xla_cuda12")
    CudaPlugin().configure_multiprocess(0, 2)
    assert importlib.import_module("jax_plugins.xla_cuda12").initialize() is None
