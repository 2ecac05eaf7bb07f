"""Shared fixtures of the core tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import forked_python
import pytest
import torch

import torch_xla
from torch_xla.plugins import registry
from torch_xla.utils.utils import get_free_tcp_ports


@pytest.fixture(scope="session", autouse=True)
def client_started_first():
    """Each test process starts the PJRT client (the CPU plugin's) before its first test.

    The CPU plugin sets jax's CPU device count, which jax accepts only before its first
    operation, and the lowering tests run jax directly. In one process the engine tests
    (collected first) always started the client before them; with pytest-xdist a worker
    can get lowering files first, so every process starts it here, whatever its files.
    A test that needs a process without a client runs Python in a subprocess (run_python).
    """
    torch_xla.device()


@pytest.fixture
def clean_registry(monkeypatch):
    """An empty plugin registry for one test; the real one comes back afterwards."""
    monkeypatch.setattr(registry, "_records", {})
    monkeypatch.setattr(registry, "_active", None)
    monkeypatch.setattr(registry, "_discovered", True)  # installed plugins stay out
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    yield registry


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120,
               fresh: bool = False):
    """Run `code` as `python -c` in a process of its own (the PJRT client is one per
    process), forked from torch already imported unless `fresh` (forked_python.py)."""
    full_env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    full_env.update(env or {})
    return forked_python.run(["-c", textwrap.dedent(code)], env=full_env, timeout=timeout,
                             fresh=fresh)


def run_spmd(code: str, devices: int = 4) -> str:
    """Run `code` in a fresh SPMD process over `devices` CPU devices; its stdout (the
    process must succeed: its output is the failure message otherwise)."""
    done = run_python(code, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)},
                      timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def two_hosts(code: str, env: dict[str, str] | None = None, timeout: float = 300
              ) -> list[str]:
    """The stdouts of `code` run as 2 processes x 2 CPU devices, one job over loopback
    (jax's distributed runtime, started with torchrun's variables, MASTER_PORT a free
    port of its own); both must succeed. Past `timeout` both are stopped and the failure
    shows where each stood (faulthandler's stacks). Output goes to files, not pipes: a
    process blocked on a full pipe would hold the other at jax's exit barrier."""
    port, store_port = get_free_tcp_ports(2)
    base = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    with contextlib.ExitStack() as files:
        streams = [[files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(2)]
                   for _ in range(2)]
        procs = [subprocess.Popen(
            [sys.executable, "-c", code], stdout=out, stderr=err, text=True,
            env={**base, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4",
                 "CPU_DEVICES_PER_PROCESS": "2", "RANK": str(r), "WORLD_SIZE": "2",
                 "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
                 "XLA_COORDINATOR_ADDRESS": f"localhost:{port}", "MASTER_ADDR": "localhost",
                 "MASTER_PORT": str(store_port), "PYTHONFAULTHANDLER": "1", **(env or {})})
            for r, (out, err) in enumerate(streams)]
        deadline = time.monotonic() + timeout
        late = False
        for p in procs:
            try:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                late = True
        if late:
            for p in procs:
                p.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
                p.wait()
        texts = []
        for out, err in streams:
            out.seek(0)
            err.seek(0)
            texts.append((out.read(), err.read()))
    if late:
        raise AssertionError(f"the 2 processes did not finish within {timeout} s:\n"
                             + "\n".join(f"--- process {r}:\n{err[-6000:]}"
                                          for r, (_, err) in enumerate(texts)))
    for p, (_, err) in zip(procs, texts, strict=True):
        assert p.returncode == 0, err
    return [out for out, _ in texts]


def small_mlp() -> torch.nn.Module:
    """The seeded 6-8-3 tanh MLP the optimizer tests train (equal weights on every call)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
