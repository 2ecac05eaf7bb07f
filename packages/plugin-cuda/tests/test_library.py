import importlib
import importlib.util
import os
import sys
import types

import pytest

from torch_xla.plugins import PluginError
from torch_xla_cuda import library

STAND_INS = [module for module, _ in library.PJRT_PACKAGES]


# What jax's package does in initialize(): register its own library under "cuda", then
# hand the C API it gets back to what needs it (custom calls, FFI types, Triton).
JAX_PACKAGE = """
import os
import jax._src.xla_bridge as xb

SEEN_C_API = []

def initialize():
    c_api = xb.register_plugin(
        "cuda", priority=500,
        library_path=os.path.join(os.path.dirname(__file__), "xla_cuda_plugin.so"),
        options={"allocator": "jax's own"})
    SEEN_C_API.append(c_api)
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A `jax_plugins` namespace that holds only the stand-in PJRT packages a test installs.

    The packages really installed here (if any) are out of sight, so each test sees exactly
    what it builds. A stand-in's `initialize()` does what jax's does with `register_plugin`
    (JAX_PACKAGE), or raises `failure` if given.
    """
    namespace = tmp_path / "jax_plugins"
    namespace.mkdir()
    hidden = types.ModuleType("jax_plugins")
    hidden.__path__ = [os.fspath(namespace)]
    monkeypatch.setitem(sys.modules, "jax_plugins", hidden)
    monkeypatch.setattr(library, "_jax_initializers", {})
    for module in STAND_INS:
        monkeypatch.delitem(sys.modules, module, raising=False)

    def install(module: str, with_library: bool = True, failure: str = "") -> str:
        package = tmp_path.joinpath(*module.split("."))
        package.mkdir(parents=True)
        body = JAX_PACKAGE
        if failure:
            body += f"    raise {failure}\n"
        (package / "__init__.py").write_text(body)
        if with_library:
            (package / library.LIBRARY_FILE).write_bytes(b"\x7fELF stand-in")
        importlib.invalidate_caches()
        return os.fspath(package / library.LIBRARY_FILE)

    yield install
    for module in STAND_INS:  # what keep_jax_from_registering_it imported
        sys.modules.pop(module, None)


@pytest.fixture
def jax_registrations(monkeypatch):
    """jax's `register_plugin` replaced by a recorder; each call returns a new C API."""
    from jax._src import xla_bridge

    calls = []

    def register_plugin(name, *, priority=400, library_path=None, options=None, c_api=None):
        calls.append({"name": name, "priority": priority, "library_path": library_path,
                      "options": options})
        return f"c_api #{len(calls)}"

    monkeypatch.setattr(xla_bridge, "register_plugin", register_plugin)
    return calls


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


def test_jax_discovery_finds_an_initialize_that_registers_nothing(site, jax_registrations):
    """jax imports every jax_plugins.* package and calls its initialize(): after
    keep_jax_from_registering_it that is a no-op."""
    path = site("jax_plugins.xla_cuda13")
    library.keep_jax_from_registering_it()
    library.keep_jax_from_registering_it()  # a second call keeps the real one
    module = importlib.import_module("jax_plugins.xla_cuda13")  # what jax's discovery does
    assert module.initialize() is None
    assert jax_registrations == [] and module.SEEN_C_API == []
    assert library.find_library() == path  # the library is still found where installed
    assert "jax_plugins.xla_cuda12" not in sys.modules  # absent packages are not imported
    assert list(library._jax_initializers) == ["jax_plugins.xla_cuda13"]


def test_register_runs_jax_own_set_up_once_with_our_library_and_options(
        site, jax_registrations):
    """The library is registered once, ours and with our options, and what jax's package
    does with the C API afterwards (custom calls: linalg on cuSOLVER) gets that one."""
    from jax._src import xla_bridge

    recorder = xla_bridge.register_plugin
    site("jax_plugins.xla_cuda12")
    ours = site("jax_plugins.xla_cuda13")
    library.keep_jax_from_registering_it()
    library.register("cuda", ours, {"allocator": "default", "visible_devices": [1]})
    assert jax_registrations == [{"name": "cuda", "priority": 500, "library_path": ours,
                                  "options": {"allocator": "default", "visible_devices": [1]}}]
    assert sys.modules["jax_plugins.xla_cuda13"].SEEN_C_API == ["c_api #1"]
    assert sys.modules["jax_plugins.xla_cuda12"].SEEN_C_API == []  # one package, the match
    assert xla_bridge.register_plugin is recorder  # put back


def test_register_uses_the_package_that_ships_the_library(site, jax_registrations):
    cuda12 = site("jax_plugins.xla_cuda12")
    site("jax_plugins.xla_cuda13")
    library.keep_jax_from_registering_it()
    library.register("cuda", cuda12, {})  # GPU_LIBRARY_PATH pointing at the CUDA 12 one
    assert sys.modules["jax_plugins.xla_cuda12"].SEEN_C_API == ["c_api #1"]
    assert sys.modules["jax_plugins.xla_cuda13"].SEEN_C_API == []
    assert [c["library_path"] for c in jax_registrations] == [cuda12]


def test_register_without_a_jax_package_registers_plainly(site, jax_registrations, tmp_path):
    custom = tmp_path / "custom" / library.LIBRARY_FILE
    library.keep_jax_from_registering_it()  # nothing installed
    library.register("cuda", os.fspath(custom), {"allocator": "default"})
    assert jax_registrations == [{"name": "cuda", "priority": 400,
                                  "library_path": os.fspath(custom),
                                  "options": {"allocator": "default"}}]


def test_a_failing_jax_set_up_is_a_plugin_error_that_says_what_to_do(site, jax_registrations):
    """jax's package asserts when its CUDA version check has no jax-cuda1x-plugin to
    ask, and raises on outdated CUDA libraries: the user gets what failed and the fix."""
    from jax._src import xla_bridge

    recorder = xla_bridge.register_plugin
    ours = site("jax_plugins.xla_cuda13",
                failure="RuntimeError('Outdated cuDNN installation found')")
    library.keep_jax_from_registering_it()
    with pytest.raises(PluginError) as error:
        library.register("cuda", ours, {})
    message = str(error.value)
    assert "Outdated cuDNN installation found" in message and ours in message
    assert "torch-xla-cuda[cuda13]" in message and "JAX_SKIP_CUDA_CONSTRAINTS_CHECK" in message
    assert xla_bridge.register_plugin is recorder


def test_configuring_the_plugin_keeps_jax_from_registering_cuda(site, jax_registrations):
    from torch_xla_cuda import CudaPlugin

    path = site("jax_plugins.xla_cuda12")
    CudaPlugin().configure_single_process()
    assert importlib.import_module("jax_plugins.xla_cuda12").initialize() is None
    sys.modules.pop("jax_plugins.xla_cuda12")
    library._jax_initializers.clear()
    plugin = CudaPlugin()
    plugin.configure_multiprocess(0, 2)
    assert importlib.import_module("jax_plugins.xla_cuda12").initialize() is None
    assert jax_registrations == []
    plugin.register_library("cuda", path, plugin.client_create_options())
    assert [c["options"]["visible_devices"] for c in jax_registrations] == [[0]]
