import os
import sys

import libtpu
import pytest

from torch_xla.plugins import PluginError
from torch_xla_tpu import library


def test_finds_the_installed_libtpu():
    path = library.find_library()
    assert path == libtpu.get_library_path()
    assert os.path.basename(path) == "libtpu.so" and os.path.isfile(path)


def test_env_override_naming_a_file_wins(monkeypatch, tmp_path):
    copy = tmp_path / "libtpu-custom.so"
    copy.write_bytes(b"")
    monkeypatch.setenv("TPU_LIBRARY_PATH", os.fspath(copy))
    assert library.find_library() == os.fspath(copy)


def test_env_override_naming_nothing_warns_and_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv("TPU_LIBRARY_PATH", os.fspath(tmp_path / "missing.so"))
    with pytest.warns(RuntimeWarning, match="missing.so.*is not a file"):
        assert library.find_library() == libtpu.get_library_path()


def test_without_libtpu_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "libtpu", None)  # makes `import libtpu` fail
    monkeypatch.setenv("TPU_LIBRARY_PATH", os.fspath(tmp_path / "missing.so"))
    with pytest.warns(RuntimeWarning), pytest.raises(PluginError) as error:
        library.find_library()
    message = str(error.value)
    assert "pip install libtpu" in message and "missing.so" in message
