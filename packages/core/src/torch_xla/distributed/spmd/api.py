"""PyTorch's DTensor API on the xla device: `torch.distributed.tensor.distribute_tensor` and
`distribute_module` with a `DeviceMesh("xla", ...)` call `xla_distribute_tensor` and
`xla_distribute_module` here (torch imports them from `torch_xla.distributed.spmd`).

A DTensor mesh becomes an `xs.Mesh` over the same device ids and axis names, and its
placements (one per mesh dim) a partition spec (one entry per tensor dim); the tensor is
then marked with `xs.mark_sharding` and comes back as an `XLAShardedTensor`: one global
tensor that XLA's partitioner shards, not a DTensor of local shards. Like PyTorch/XLA,
these functions turn SPMD mode on (`xr.use_spmd()`) when it is off.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.placement_types import Placement, Replicate

from torch_xla import runtime as xr
from torch_xla.distributed.spmd.mesh import Mesh, ShardingType
from torch_xla.distributed.spmd.placements import to_partition_spec, xla_mesh
from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor
from torch_xla.distributed.spmd.xla_sharding import mark_sharding


def _spmd() -> None:
    if not xr.is_spmd():
        xr.use_spmd()


def auto_policy(mod_name: str, mod: nn.Module, mesh: DeviceMesh) -> None:
    """A `partition_fn` asking for XLA's auto-sharding (`xr.use_spmd(auto=True)`, which
    says what is not supported here)."""
    xr.use_spmd(auto=True)


def convert_to_xla_mesh(dt_mesh: DeviceMesh) -> Mesh:
    """The `xs.Mesh` of a DTensor `DeviceMesh`: the same device ids, shape and axis names.

    >>> convert_to_xla_mesh(DeviceMesh("xla", [[0, 1, 2, 3]])).mesh_shape
    (1, 4)
    """
    _spmd()
    return xla_mesh(dt_mesh, "convert_to_xla_mesh")


def convert_to_xla_partition_spec(tensor: torch.Tensor, placements: Sequence[Placement]
                                  ) -> tuple:
    """The partition spec (one entry per dim of `tensor`) that DTensor `placements` (one per
    mesh dim) describe: `Shard(d)` on mesh dim k shards tensor dim d over mesh axis k,
    `Replicate()` adds nothing. A tensor dim sharded by several mesh dims gets the tuple of
    them, the first mesh dim major, as DTensor lays it out.

    >>> convert_to_xla_partition_spec(torch.randn(4, 8, 8), [Replicate(), Shard(0)])
    (1, None, None)
    """
    _spmd()
    return to_partition_spec(tensor.dim(), placements, "convert_to_xla_partition_spec")


def xla_distribute_tensor(tensor: torch.Tensor, device_mesh: DeviceMesh,
                          placements: Sequence[Placement] | None = None) -> XLAShardedTensor:
    """`tensor` (moved to the xla device if it is elsewhere) sharded over `device_mesh` as
    `placements` say (one per mesh dim; replicated on every mesh dim if None), as an
    `XLAShardedTensor` holding the global tensor.

    >>> mesh = init_device_mesh("xla", (4,))
    >>> t = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])   # each device: 2 rows
    """
    _spmd()
    mesh = convert_to_xla_mesh(device_mesh)
    if placements is None:
        placements = [Replicate() for _ in range(device_mesh.ndim)]
    if len(placements) != device_mesh.ndim:
        raise ValueError(f"xla_distribute_tensor: {len(placements)} placements for a "
                         f"{device_mesh.ndim}-dim DeviceMesh; give one placement per mesh dim.")
    if type(tensor).__name__ == "DTensor":
        raise ValueError("xla_distribute_tensor: cannot distribute a DTensor (local shards) "
                         "on xla devices; pass the global tensor.")
    if isinstance(tensor, XLAShardedTensor):
        if tensor.sharding_type not in (None, ShardingType.REPLICATED):
            raise ValueError("xla_distribute_tensor: the XLAShardedTensor is already sharded "
                             f"({tensor.sharding_spec}); clear it first with "
                             "torch_xla.distributed.spmd.clear_sharding(t).")
        tensor = tensor.global_tensor
    if tensor.is_meta:
        raise ValueError("xla_distribute_tensor: a meta tensor has no data to distribute; "
                         "materialize it first (e.g. module.to_empty(device='xla') and "
                         "initialize it).")
    if tensor.device.type != "xla":
        tensor = tensor.to(device_mesh.device_type)
    out = mark_sharding(tensor, mesh, convert_to_xla_partition_spec(tensor, placements))
    out.set_layout(device_mesh, placements)  # its `_spec` names the caller's DeviceMesh
    return out


def xla_distribute_module(module: nn.Module, device_mesh: DeviceMesh | None = None,
                          partition_fn: Callable[[str, nn.Module, DeviceMesh], None] | None = None,
                          input_fn: Callable[..., Any] | None = None,
                          output_fn: Callable[..., Any] | None = None) -> nn.Module:
    """Shard `module` over `device_mesh`: `partition_fn(name, submodule, mesh)` is called on
    every submodule (it marks the parameters it wants sharded, e.g. with
    `distribute_tensor`); what it leaves alone stays replicated. `input_fn(module, inputs,
    mesh)` runs before each forward (a pre-forward hook), `output_fn(module, outputs,
    mesh)` after it (a forward hook). Returns `module`."""
    _spmd()
    if partition_fn is not None:
        for name, submodule in module.named_modules():
            partition_fn(name, submodule, device_mesh)
    if input_fn is not None:
        if _arity(input_fn, "input_fn") == 2:
            warnings.warn("input_fn(inputs, device_mesh) is deprecated; take (module, inputs, "
                          "device_mesh).", FutureWarning, stacklevel=2)
            module.register_forward_pre_hook(lambda _, inputs: input_fn(inputs, device_mesh))
        else:
            module.register_forward_pre_hook(
                lambda mod, inputs: input_fn(mod, inputs, device_mesh))
    if output_fn is not None:
        if _arity(output_fn, "output_fn") == 2:
            warnings.warn("output_fn(outputs, device_mesh) is deprecated; take (module, "
                          "outputs, device_mesh).", FutureWarning, stacklevel=2)
            module.register_forward_hook(
                lambda _, inputs, outputs: output_fn(outputs, device_mesh))
        else:
            module.register_forward_hook(
                lambda mod, inputs, outputs: output_fn(mod, outputs, device_mesh))
    return module


def _arity(fn: Callable, what: str) -> int:
    count = len(inspect.signature(fn).parameters)
    if count not in (2, 3):
        raise ValueError(f"{what} should take 3 arguments (module, values, device_mesh), but it "
                         f"takes {count}.")
    return count
