"""The minimum torch version: declared, enforced with a clear error, and met by CI's torch."""

import pathlib
import re

import pytest
import torch

import torch_xla
from torch_xla.version import MIN_TORCH_VERSION

PYPROJECT = pathlib.Path(__file__).parents[1] / "pyproject.toml"


def test_pyproject_declares_the_same_minimum():
    declared = re.search(r'"torch>=(\d+)\.(\d+)"', PYPROJECT.read_text())
    assert declared is not None
    assert tuple(map(int, declared.groups())) == MIN_TORCH_VERSION


def test_installed_torch_meets_the_minimum():
    torch_xla.check_torch_version(torch.__version__)  # raises if not


@pytest.mark.parametrize("old", ["2.12.1", "2.4.0+cpu", "1.13.0"])
def test_older_torch_is_refused_with_the_upgrade_command(old):
    with pytest.raises(ImportError, match=f"needs torch>=2.13.*found torch {re.escape(old)}.*pip"):
        torch_xla.check_torch_version(old)


@pytest.mark.parametrize("new", ["2.13.0", "2.13.0+cpu", "2.14.1", "3.0.0a0"])
def test_supported_torch_versions_pass(new):
    torch_xla.check_torch_version(new)


def test_the_privateuse1_api_the_device_needs_exists():
    assert callable(torch.utils.rename_privateuse1_backend)
    assert callable(torch._register_device_module)
    assert hasattr(torch._C, "_acc")
