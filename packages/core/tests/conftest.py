"""Shared fixtures of the core tests."""

from __future__ import annotations

import os
import textwrap

import forked_python
import pytest
import torch

import torch_xla
from torch_xla.plugins import registry


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


def small_mlp() -> torch.nn.Module:
    """The seeded 6-8-3 tanh MLP the optimizer tests train (equal weights on every call)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
