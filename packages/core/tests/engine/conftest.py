"""Engine tests: eager CPU PyTorch is the oracle for everything computed on `xla`.

Files are grouped by what they need: `test_ir.py` needs no device, most files use
one device (the CPU plugin's xla:0), `test_multi_device.py` starts processes with
CPU_NUM_DEVICES.
"""

from __future__ import annotations

import pytest
import torch

import torch_xla
import torch_xla.debug.metrics as met


@pytest.fixture(scope="session")
def device() -> torch.device:
    import torch_xla.core.xla_model as xm

    return xm.xla_device()


@pytest.fixture
def metrics():
    """Counters and metrics cleared before the test."""
    torch_xla.sync()
    met.clear_all()
    return met
