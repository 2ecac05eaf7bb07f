import os
import sys

import pytest

from torch_xla.plugins import PluginError
from torch_xla_neuron import library


def test_reports_the_path_libneuronxla_gives(libneuronxla, tmp_path):
    so = tmp_path / "libneuronpjrt.so"
    so.write_bytes(b"")
    libneuronxla(os.fspath(so))
    assert library.find_library() == os.fspath(so)


def test_env_override_wins(libneuronxla, monkeypatch, tmp_path):
    libneuronxla("/nonexistent/libneuronpjrt.so")
    custom = tmp_path / "custom.so"
    custom.write_bytes(b"")
    monkeypatch.setenv("NEURON_LIBRARY_PATH", os.fspath(custom))
    assert library.find_library() == os.fspath(custom)


def test_env_override_naming_nothing_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURON_LIBRARY_PATH", os.fspath(tmp_path / "missing.so"))
    with pytest.raises(PluginError, match="missing.so.*is not a file"):
        library.find_library()


def test_reported_path_that_does_not_exist(libneuronxla):
    libneuronxla("/nonexistent/libneuronpjrt.so")
    with pytest.raises(PluginError, match="/nonexistent/libneuronpjrt.so.*does not exist"):
        library.find_library()


def test_without_libneuronxla_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "libneuronxla", None)  # as on this machine
    with pytest.raises(PluginError, match="pip install libneuronxla.*NEURON_LIBRARY_PATH"):
        library.find_library()
