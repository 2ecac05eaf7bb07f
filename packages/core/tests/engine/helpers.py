"""Helpers shared by the engine tests (eager CPU is the oracle)."""

from __future__ import annotations

import os
import textwrap

import forked_python
import torch


def assert_close(actual: torch.Tensor, expected: torch.Tensor, **tolerance) -> None:
    """`actual` (on any device) equals the eager CPU `expected`, dtype and shape included."""
    torch.testing.assert_close(actual.cpu(), expected, **tolerance)


def run_python(code: str, env: dict | None = None, timeout: float = 240,
               fresh: bool = False) -> str:
    """Run `code` in a process of its own (for environment flags read at start; forked,
    see forked_python.py, unless `fresh`); its stdout."""
    full = {**os.environ, **(env or {})}
    done = forked_python.run(["-c", textwrap.dedent(code)], env=full, timeout=timeout,
                             fresh=fresh)
    if done.returncode != 0:
        raise AssertionError(
            f"subprocess failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done.stdout
