"""`torch_xla._internal.pjrt`, the helpers PyTorch/XLA's tests import (the multi-process
path of `run_multiprocess` is tested in test_api_xla_model.py), and the set-up of
processes a launcher of one's own started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

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


def test_initialize_checks_the_started_runtime(monkeypatch):
    for name in ("PJRT_LOCAL_PROCESS_RANK", "PJRT_LOCAL_PROCESS_COUNT", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        # setenv first, so that monkeypatch restores the variable as it was before the
        # test (unset, usually) whatever the calls below set: later tests of this process
        # start runtimes in subprocesses that inherit the environment
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    torch_xla.device()
    pjrt.initialize_singleprocess()  # this process is the job of one it started as
    del os.environ["PJRT_LOCAL_PROCESS_COUNT"]  # set by it; variables already set win
    with pytest.raises(RuntimeError, match="already started as process 0 of 1, not 1 of 2"):
        pjrt.initialize_multiprocess(1, 2)


LAUNCHED = """
import sys
import torch, torch_xla, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
from torch_xla._internal import pjrt
rank = int(sys.argv[1])
pjrt.initialize_multiprocess(rank, 2)
value = (torch.tensor([1.0, 2.0]) * (rank + 1)).to(torch_xla.device())
total = xm.all_reduce(xm.REDUCE_SUM, value)
print(xr.process_index(), xr.process_count(), xr.global_runtime_device_count(),
      *total.cpu().tolist())
"""


def test_initialize_multiprocess_joins_processes_a_launcher_started():
    # Two processes started by hand (no xmp.spawn, no torchrun variables) form one job.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items()
           if k not in ("PJRT_LOCAL_PROCESS_RANK", "PJRT_LOCAL_PROCESS_COUNT", "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE")}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", XLA_COORDINATOR_ADDRESS=f"127.0.0.1:{port}")
    procs = [subprocess.Popen([sys.executable, "-c", LAUNCHED, str(rank)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    assert [out.splitlines()[-1].split() for out, _ in outputs] == [  # after gloo's lines
        ["0", "2", "2", "3.0", "6.0"], ["1", "2", "2", "3.0", "6.0"]]
