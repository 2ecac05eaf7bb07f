"""Checkpoints that bound host memory: tensors are moved and written one at a time.

`save` writes the object's structure to `path` with each tensor replaced by a
reference, and each tensor to its own file in a folder beside it; `load`
reads them back as CPU tensors. The structure file is replaced atomically and
last, and names the tensor folder it belongs to, so an interrupted save leaves
the previous checkpoint complete and readable; the next save removes what it
left behind. Errors name the checkpoint's path, never one of its parts.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

from torch_xla._atomic import atomic_open, error_naming
from torch_xla.lazy.graph import compute_pending, join_reads
from torch_xla.pjrt import spmd

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
    elif spmd.over_processes():  # join the writer's collectives, one at a time
        compute_pending(data)
        join_reads(data)
    xm.rendezvous("torch_xla.utils.serialization.save")


def _write(data: Any, path: str) -> None:
    folder = f"{path}.tensors-{uuid.uuid4().hex[:12]}"
    try:
        os.mkdir(folder)  # in the checkpoint's folder, which must exist, as for torch.save
    except OSError as error:
        raise error_naming(path, error, folder) from error
    count = 0

    def write_one(tensor: torch.Tensor) -> TensorReference:
        nonlocal count
        host = tensor.detach().to("cpu")  # only this tensor is on the host at a time
        # a fresh folder holds no abandoned temporary files to look for
        with atomic_open(os.path.join(folder, f"tensor_{count}.pt"), clean_stale=False) as f:
            torch.save(host, f)
        count += 1
        return TensorReference(count - 1)

    try:
        compute_pending(data)
        structure = tree_map_only(torch.Tensor, write_one, data)
        with atomic_open(path) as f:
            torch.save({"format": _FORMAT, "tensors": os.path.basename(folder),
                        "structure": structure}, f)
    except BaseException as error:
        shutil.rmtree(folder, ignore_errors=True)
        named = _named_for_checkpoint(path, error, folder)
        if named is error:
            raise
        raise named from error
    _remove_stale_folders(path, keep=os.path.basename(folder))


def _named_for_checkpoint(path: str, error: BaseException, folder: str) -> BaseException:
    """An error about the tensor folder or a file in it, reworded to name `path`."""
    if not isinstance(error, OSError) or error.filename is None:
        return error  # atomic_open has named the path's own errors already
    where = os.fspath(error.filename)
    inside = folder in (where, os.path.dirname(where))
    return error_naming(path, error, where) if inside else error


def _remove_stale_folders(path: str, keep: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _tensor_folder_prefix(path)
    for name in os.listdir(directory):
        if name.startswith(prefix) and name != keep:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def load(path: str) -> Any:
    """Read what `save` wrote; tensors come back on the CPU."""
    path = os.fspath(path)
    header = _load_part(path, path, weights_only=False)
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise ValueError(
            f"{path} was not written by torch_xla.utils.serialization.save; "
            "load it with torch.load instead."
        )
    folder = os.path.join(os.path.dirname(os.path.abspath(path)), header["tensors"])

    def read_one(ref: TensorReference) -> torch.Tensor:
        return _load_part(os.path.join(folder, f"tensor_{ref.index}.pt"), path, weights_only=True)

    return tree_map_only(TensorReference, read_one, header["structure"])


def _load_part(part: str, path: str, weights_only: bool) -> Any:
    """`torch.load` of one file of the checkpoint `path`, its errors naming `path`."""
    try:
        return torch.load(part, weights_only=weights_only)
    except OSError as error:
        if part == path:
            raise  # about the file the user named, and naming it already
        why = os.strerror(error.errno) if error.errno else str(error)
        raise type(error)(
            error.errno,
            f"Checkpoint {path!r} is incomplete: its tensor file {part!r} cannot be read "
            f"({why}). A checkpoint is its file and the folder that file names: copy or "
            "move them together.",
        ) from error
    except Exception as error:
        which = "" if part == path else f" (its tensor file {part!r})"
        raise RuntimeError(
            f"Cannot load checkpoint {path!r}: it is damaged{which}, "
            f"{type(error).__name__}: {error}. Restore it from a copy or save it again."
        ) from error
