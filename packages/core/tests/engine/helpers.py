"""Helpers shared by the engine tests (eager CPU is the oracle)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch


def assert_close(actual: torch.Tensor, expected: torch.Tensor, **tolerance) -> None:
    """`actual` (on any device) equals the eager CPU `expected`, dtype and shape included."""
    torch.testing.assert_close(actual.cpu(), expected, **tolerance)


def run_python(code: str, env: dict | None = None, timeout: float = 240) -> str:
    """Run `code` in a fresh interpreter (for environment flags read at start); its stdout."""
    full = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout
