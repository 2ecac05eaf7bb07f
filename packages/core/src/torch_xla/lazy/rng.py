"""The device RNG state: one 64-bit integer per process, as PyTorch/XLA keeps it.

Each graph that draws random numbers receives a key made from the current state
as a runtime input (so the graph stays cached) and advances the state once;
inside the graph every random op folds in its position.
"""

from __future__ import annotations

import numpy as np

_MASK = (1 << 64) - 1
_MUL, _INC = 6364136223846793005, 1442695040888963407  # Knuth's MMIX LCG

_state = 101


def get_state() -> int:
    return _state


def set_state(seed: int) -> None:
    global _state
    _state = int(seed) & _MASK


def next_key() -> np.ndarray:
    """The key for the next graph (uint32[2]), advancing the state."""
    global _state
    key = np.array([_state >> 32, _state & 0xFFFFFFFF], dtype=np.uint32)
    _state = (_state * _MUL + _INC) & _MASK
    return key
