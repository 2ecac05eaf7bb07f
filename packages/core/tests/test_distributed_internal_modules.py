"""`torch_xla._internal.<name>` modules that plugin packages provide (entry-point group
`torch_xla.internal_modules`), with fake installed distributions."""

from __future__ import annotations

import pytest
from conftest import run_python

from torch_xla.plugins import modules


def install_fake(root, name: str, module: str, source: str) -> None:
    """A distribution under `root` declaring `name = module`, and that module's source."""
    info = root / f"fake_{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-{name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[torch_xla.internal_modules]\n{name} = {module}\n")
    (root / f"{module}.py").write_text(source)


def test_a_declared_module_is_loaded(tmp_path, monkeypatch):
    install_fake(tmp_path, "mychip", "mychip_internal", "def version():\n    return 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert modules.declared_internal_modules([str(tmp_path)]) == {"mychip": "mychip_internal"}
    module = modules.load_internal_module("torch_xla._internal", "mychip", [str(tmp_path)])
    assert module.version() == 7


def test_an_undeclared_module_names_the_package_to_install(tmp_path):
    with pytest.raises(ImportError, match=r"torch_xla\._internal\.otherchip.*"
                                          r"pip install torch-xla-otherchip"):
        modules.load_internal_module("torch_xla._internal", "otherchip", [str(tmp_path)])


def test_a_failing_module_carries_its_cause(tmp_path, monkeypatch):
    install_fake(tmp_path, "badchip", "badchip_internal", "raise OSError('no driver')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"fake-badchip 1\.0.*OSError: no driver") as caught:
        modules.load_internal_module("torch_xla._internal", "badchip", [str(tmp_path)])
    assert isinstance(caught.value.__cause__, OSError)


def test_an_entry_point_naming_an_object_is_refused(tmp_path, monkeypatch):
    install_fake(tmp_path, "objchip", "objchip_internal", "thing = 3\n")
    (tmp_path / "fake_objchip-1.0.dist-info" / "entry_points.txt").write_text(
        "[torch_xla.internal_modules]\nobjchip = objchip_internal:thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match="not a module"):
        modules.load_internal_module("torch_xla._internal", "objchip", [str(tmp_path)])


def test_torch_xla_internal_resolves_plugin_modules_and_its_own(tmp_path):
    install_fake(tmp_path, "mychip", "mychip_internal", "def version():\n    return 7\n")
    result = run_python(
        """
        import sys
        from torch_xla._internal import pjrt, mychip   # ours, then the plugin's
        import torch_xla._internal.mychip as again
        assert again is mychip and mychip.version() == 7, mychip
        assert pjrt.__name__ == "torch_xla._internal.pjrt"
        try:
            from torch_xla._internal import nochip
        except ImportError as error:
            print("ERROR", error)
        """,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ERROR torch_xla._internal.nochip is provided by a plugin package" in result.stdout
    assert "pip install torch-xla-nochip" in result.stdout
