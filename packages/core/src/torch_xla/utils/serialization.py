"""Checkpoints that bound host memory: tensors are moved and written one at a time.

`save` writes the object's structure to `path` with each tensor replaced by a
reference, and each tensor to its own file in a folder beside it; `load`
reads them back as CPU tensors. The structure file is replaced atomically and
last, and names the tensor folder it belongs to, so an interrupted save leaves
the previous checkpoint complete and readable.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map_only

from torch_xla._atomic import atomic_open

_FORMAT = "torch_xla.serialization/1"


@dataclasses.dataclass(frozen=True)
class TensorReference:
    index: int


def _tensor_folder_prefix(path: str) -> str:
    return os.path.basename(path) + ".tensors-"


def save(data: Any, path: str, master_only: bool = True, global_master: bool = False) -> None:
    """Write `data` (any nesting of tensors and picklable values) to `path`."""
    from torch_xla.core import xla_model as xm

    if not master_only or xm.is_master_ordinal(local=not global_master):
        _write(data, os.fspath(path))
    xm.rendezvous("torch_xla.utils.serialization.save")


def _write(data: Any, path: str) -> None:
    folder = f"{path}.tensors-{uuid.uuid4().hex[:12]}"
    os.makedirs(folder)
    count = 0

    def write_one(tensor: torch.Tensor) -> TensorReference:
        nonlocal count
        host = tensor.detach().to("cpu")  # only this tensor is on the host at a time
        with atomic_open(os.path.join(folder, f"tensor_{count}.pt")) as f:
            torch.save(host, f)
        count += 1
        return TensorReference(count - 1)

    try:
        compute_pending(data)
        structure = tree_map_only(torch.Tensor, write_one, data)
        with atomic_open(path) as f:
            torch.save({"format": _FORMAT, "tensors": os.path.basename(folder),
                        "structure": structure}, f)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    _remove_stale_folders(path, keep=os.path.basename(folder))


def compute_pending(data: Any) -> None:
    """Run the pending computations of all of `data`'s XLA tensors as one graph, instead of
    one graph per tensor as each is moved (device memory holds them all anyway)."""
    from torch_xla.lazy import functional, rules

    rules.materialize([
        functional.unwrap(t)
        for t in tree_leaves(data)
        if isinstance(t, torch.Tensor) and t.device.type == "xla"
    ])


def _remove_stale_folders(path: str, keep: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _tensor_folder_prefix(path)
    for name in os.listdir(directory):
        if name.startswith(prefix) and name != keep:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def load(path: str) -> Any:
    """Read what `save` wrote; tensors come back on the CPU."""
    path = os.fspath(path)
    header = torch.load(path, weights_only=False)
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ValueError(
            f"{path} was not written by torch_xla.utils.serialization.save; "
            "load it with torch.load instead."
        )
    folder = os.path.join(os.path.dirname(os.path.abspath(path)), header["tensors"])

    def read_one(ref: TensorReference) -> torch.Tensor:
        return torch.load(os.path.join(folder, f"tensor_{ref.index}.pt"), weights_only=True)

    return tree_map_only(TensorReference, read_one, header["structure"])
