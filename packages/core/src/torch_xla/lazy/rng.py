"""The device RNG: one 64-bit state per process, as PyTorch/XLA keeps it, and the key each
random op takes when it is recorded.

A pending random tensor must have one value, whichever graph computes it and however
often, so its key is an input of its node, fixed at recording: the first random op on a
device after a sync turns the state into a seed (device data, so a new seed never
recompiles) and advances the state; the k-th random op since then takes
`fold_in(seed, k)`, computed inside the graph. `k` restarts at every sync, so a training
step records the same graph, and so hits the same compiled program, every time.
In eager mode every random op takes a fresh seed (so `k` is always 0 and one compiled
key derivation serves every op), and the key is computed at once like any op.
"""

from __future__ import annotations

import threading

import jax
import numpy as np
import torch

from torch_xla.lazy import ir, nodes, tensor
from torch_xla.pjrt.client import client

# The op of the node every random op takes its key from (fold_in(seed, k)).
KEY_OP = "xla::rng_key"

_MASK = (1 << 64) - 1
_MUL, _INC = 6364136223846793005, 1442695040888963407  # Knuth's MMIX LCG
KEY_AVAL: ir.Aval = ((2,), torch.uint32)  # a raw jax PRNG key (threefry), uint32[2]
# The id of an epoch's seed among a graph's device data inputs (PyTorch/XLA's value,
# `_XLAC._get_seed_info_id`), where other leaves have their tensors' ids.
SEED_INFO_ID = -127389

_state = 101
# device -> [the seed node of the current sync epoch, random ops recorded since]
_epoch: dict[int, list] = {}
_lock = threading.Lock()


def get_state() -> int:
    return _state


def set_state(seed: int) -> None:
    global _state
    _state = int(seed) & _MASK
    _epoch.clear()


def snapshot(device: int) -> tuple:
    """Everything that decides the keys of the next random ops on `device` (activation
    checkpointing replays them): the state and the current epoch's (seed, count)."""
    entry = _epoch.get(device)
    return _state, None if entry is None else tuple(entry)


def restore(device: int, saved: tuple) -> None:
    """Make the next random ops on `device` take the keys they took after `snapshot`."""
    global _state
    _state, entry = saved
    if entry is None:
        _epoch.pop(device, None)
    else:
        _epoch[device] = list(entry)


def next_key() -> np.ndarray:
    """A raw key (uint32[2]) made from the state, advancing the state."""
    global _state
    with _lock:  # threads driving several devices share the state
        state = _state
        _state = (state * _MUL + _INC) & _MASK
    return np.array([state >> 32, state & 0xFFFFFFFF], dtype=np.uint32)


def new_epoch(device: int | None = None) -> None:
    """Called at every sync: the next random op (on `device`, default every device)
    starts from a fresh seed."""
    if device is None:
        _epoch.clear()
    else:
        _epoch.pop(device, None)


def _fold_in(seed, index):
    return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(seed), index))


def _epoch_entry(device: int) -> list:
    entry = _epoch.get(device)
    if entry is None:
        seed = nodes.data(client().to_device(next_key(), device), torch.uint32, device)
        entry = _epoch[device] = [seed, 0]
    return entry


def epoch_seed(device: int) -> ir.Data:
    """The seed (a raw key's device data) from which the random ops of the current sync
    epoch on `device` fold their keys, made now if no random op has asked yet."""
    return _epoch_entry(device)[0]


def key_for_next_op(device: int) -> tuple[ir.Node, int]:
    """The IR value of the key of the next random op recorded on `device`."""
    entry = _epoch_entry(device)
    seed, index = entry
    entry[1] = index + 1
    node = nodes.engine_node(KEY_OP, _fold_in, (index,), [(seed, 0)], KEY_AVAL, device)
    if tensor.is_eager():
        del _epoch[device]
        return tensor.eager_value(node, 0)
    return node, 0
