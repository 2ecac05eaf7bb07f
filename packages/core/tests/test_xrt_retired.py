"""XRT is gone: its variables get one warning naming PJRT_DEVICE, and the old pod
launcher `python -m torch_xla.distributed.xla_dist` explains what replaces it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import forked_python
import pytest

from torch_xla.distributed import xla_dist
from torch_xla.plugins.registry import warn_about_xrt

XRT_VARIABLES = ("XRT_TPU_CONFIG", "XRT_DEVICE_MAP", "XRT_WORKERS")  # upstream's issue names


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return forked_python.run(["-c", textwrap.dedent(code)],
                             env={**os.environ, "PJRT_DEVICE": "CPU", **env}, timeout=120)


@pytest.mark.parametrize("name", XRT_VARIABLES)
def test_each_xrt_variable_gets_one_warning_naming_pjrt_device(name):
    done = _run(
        """
        import torch, torch_xla
        x = torch.ones(2, device=torch_xla.device()) * 2
        y = (x + 1).cpu()
        torch_xla.sync()
        print(y.tolist())
        """,
        {name: "localservice;0;localhost:51011"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3.0, 3.0]"  # the program still runs, on PJRT
    warned = [line for line in done.stderr.splitlines() if "XRT is gone" in line]
    assert len(warned) == 1, done.stderr
    assert name in warned[0] and "PJRT_DEVICE" in warned[0]


def test_no_warning_without_xrt_variables():
    with_none = {name: "" for name in XRT_VARIABLES}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_about_xrt(with_none)  # would raise if it warned


def test_xla_dist_explains_pjrt_and_keeps_the_users_command():
    done = subprocess.run(
        [sys.executable, "-m", "torch_xla.distributed.xla_dist", "--tpu=my-pod", "--",
         "python3", "train.py", "--epochs", "2"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == xla_dist.EXIT_STATUS != 0
    assert "PJRT needs no launcher" in done.stderr
    assert "PJRT_DEVICE=<device type> python3 train.py --epochs 2" in done.stderr
    assert "torchrun" in done.stderr
