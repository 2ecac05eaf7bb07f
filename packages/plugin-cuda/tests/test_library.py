import importlib.util
import os
import sys

import pytest

from torch_xla.plugins import PluginError
from torch_xla_cuda import library

PJRT_INSTALLED = any(library.package_directory(module) for module, _ in library.PJRT_PACKAGES)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh site directory on sys.path where tests install stand-in PJRT packages."""
    monkeypatch.delitem(sys.modules, "jax_plugins", raising=False)
    monkeypatch.syspath_prepend(os.fspath(tmp_path))

    def install(module: str, with_library: bool = True) -> str:
        package = tmp_path.joinpath(*module.split("."))
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("raise AssertionError('must not be imported')\n")
        if with_library:
            (package / library.LIBRARY_FILE).write_bytes(b"\x7fELF stand-in")
        importlib.invalidate_caches()
        return os.fspath(package / library.LIBRARY_FILE)

    return install


@pytest.mark.skipif(PJRT_INSTALLED, reason="a jax-cuda PJRT package is installed here")
def test_without_a_pjrt_package_the_error_names_the_extras():
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
