"""`torch_xla._internal.jax_workarounds`: jax code run beside torch_xla uses torch_xla's
runtime client, started first; torchax only when it is installed."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import run_python

from torch_xla._internal import jax_workarounds

FAKE_TORCHAX = {  # a torchax package with the modules maybe_get_torchax imports
    "torchax/__init__.py": "NAME = 'fake torchax'\n",
    "torchax/tensor.py": "",
    "torchax/interop.py": "",
    "torchax/ops/__init__.py": "",
    "torchax/ops/mappings.py": "",
}


@pytest.fixture
def torchax_dir(tmp_path, monkeypatch):
    """A folder on sys.path to write a torchax package into; its modules are forgotten
    afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n == "torchax" or n.startswith("torchax.")]:
        del sys.modules[name]


def _write(root, files: dict[str, str]) -> None:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_import_keeps_jax_out_and_the_guard_starts_the_runtime_first():
    result = run_python("""
        import sys
        sys.modules["torchax"] = None  # not installed, whatever this machine has
        from torch_xla._internal import jax_workarounds
        assert jax_workarounds.maybe_get_torchax() is None
        assert "jax" not in sys.modules, "importing jax_workarounds imported jax"
        from torch_xla import pjrt
        assert pjrt.started() is None  # no torchax: nothing was started for it
        jax_workarounds.jax_import_guard()
        assert pjrt.started() is not None
        import jax
        assert jax.config.jax_platforms == "cpu" and jax.config.jax_enable_x64
        print("ok")
    """, env={"PJRT_DEVICE": "CPU"}, fresh=True)
    assert result.stdout.strip() == "ok", result.stderr


def test_requires_jax_runs_the_guard_then_the_function(monkeypatch):
    calls = []
    monkeypatch.setattr(jax_workarounds, "jax_import_guard", lambda: calls.append("guard"))

    def scaled(x, *, by):
        """doc"""
        calls.append("call")
        return x * by

    wrapped = jax_workarounds.requires_jax(scaled)
    assert wrapped(3, by=2) == 6
    assert calls == ["guard", "call"]
    assert (wrapped.__name__, wrapped.__doc__) == ("scaled", "doc")


def test_requires_jax_says_what_import_failed(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'jax'")

    monkeypatch.setattr(jax_workarounds, "jax_import_guard", missing)
    with pytest.raises(ImportError, match=r"uses jax.*No module named 'jax'.*Install jax"):
        jax_workarounds.requires_jax(lambda: 1)()


def test_jax_env_context_leaves_the_environment_as_it_is(monkeypatch):
    monkeypatch.delenv("SKIP_MEGASCALE_PJRT_CLIENT", raising=False)
    before = dict(os.environ)
    with jax_workarounds.jax_env_context():
        assert dict(os.environ) == before  # jax's client is ours: it must not skip anything
    assert dict(os.environ) == before


def test_maybe_get_torchax_imports_an_installed_torchax(torchax_dir):
    _write(torchax_dir, FAKE_TORCHAX)
    torchax = jax_workarounds.maybe_get_torchax()
    assert torchax.NAME == "fake torchax"
    assert {"torchax.tensor", "torchax.interop", "torchax.ops.mappings"} <= set(sys.modules)


def test_maybe_get_torchax_raises_the_error_of_a_broken_torchax(torchax_dir):
    _write(torchax_dir, {**FAKE_TORCHAX, "torchax/interop.py": "import no_such_module_here\n"})
    with pytest.raises(ImportError, match="no_such_module_here"):
        jax_workarounds.maybe_get_torchax()
