"""`torch_xla._internal.pjrt`, the helpers PyTorch/XLA's tests import (the multi-process
path of `run_multiprocess` is tested in test_api_xla_model.py)."""

from __future__ import annotations

import pytest

import torch_xla
from torch_xla._internal import pjrt


def _record(index, seen):
    seen.append(index)


def test_spawn_with_one_process_runs_here():
    seen = []
    assert pjrt.spawn(_record, nprocs=1, args=(seen,)) is None
    assert seen == [0]


def test_run_multiprocess_refuses_a_started_runtime():
    torch_xla.device()
    with pytest.raises(RuntimeError, match="Runtime is already initialized"):
        pjrt.run_multiprocess(print)
