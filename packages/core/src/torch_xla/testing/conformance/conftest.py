"""Fixtures of the conformance kit: the plugin under test and its device."""

from __future__ import annotations

import os

import pytest
import torch

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.plugins import registry


@pytest.fixture(scope="session")
def plugin_record():
    """The plugin under test: PJRT_DEVICE's, or the automatic choice."""
    return registry.active()


@pytest.fixture(scope="session")
def plugin(plugin_record):
    return plugin_record.plugin


@pytest.fixture(scope="session")
def device(plugin_record) -> torch.device:
    return xm.xla_device()


def pytest_report_header(config) -> list[str]:
    requested = os.environ.get("PJRT_DEVICE", "(unset: automatic choice)")
    return [f"torch_xla conformance kit: PJRT_DEVICE={requested}, device type "
            f"{xr.device_type()}"]
