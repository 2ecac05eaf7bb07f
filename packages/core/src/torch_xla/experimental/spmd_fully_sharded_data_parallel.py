"""FSDPv2: fully sharded data parallel written with SPMD sharding annotations.

`SpmdFullyShardedDataParallel(module, mesh=...)` shards every parameter of `module`
along the mesh's `'fsdp'` axis (its largest dimension) and the output's batch
dimension along `'fsdp'` (or `(extra_data_axis, 'fsdp')`); XLA's partitioner then
inserts the all-gathers and reduce-scatters of FSDP. Nothing is gathered by hand: the
program stays one SPMD program over the `xr.use_spmd()` virtual device. PyTorch/XLA's
`torch_xla.experimental.spmd_fully_sharded_data_parallel`; see docs/guide/spmd.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

import torch_xla
import torch_xla.distributed.spmd as spmd
from torch_xla.distributed.fsdp.wrap import recursive_wrap
from torch_xla.distributed.spmd.xla_sharding import backward_optimization_barrier_hook

__all__ = ["SpmdFullyShardedDataParallel"]

PartitionSpec = tuple


def _prepare_spmd_partition_spec(param: torch.Tensor, extra_data_axis: str | None = None,
                                 shard_maximal: bool = False) -> PartitionSpec | list:
    """The partition spec putting one dimension of `param` on the `'fsdp'` axis (and
    `extra_data_axis`, outermost, if given): dim 0, or with `shard_maximal` the largest
    (the first of equals). A scalar gets `[]` (replicated)."""
    shape = tuple(param.shape)
    if not shape:
        return []
    index = shape.index(max(shape)) if shard_maximal else 0
    spec: list[Any] = [None] * len(shape)
    spec[index] = (extra_data_axis, "fsdp") if extra_data_axis else "fsdp"
    return tuple(spec)


def _checked_mesh(mesh: spmd.Mesh | None, extra_data_axis: str | None) -> spmd.Mesh:
    if mesh is None:
        mesh = spmd.get_global_mesh()
        if mesh is None:
            raise ValueError("No mesh is provided and no global mesh is set. Please provide "
                             "a mesh (mesh=...) or call xs.set_global_mesh(mesh) first.")
    if "fsdp" not in mesh.axis_names:
        raise ValueError(f"The mesh must have an axis named 'fsdp'; its axes are "
                         f"{mesh.axis_names}.")
    if extra_data_axis and extra_data_axis not in mesh.axis_names:
        raise ValueError(f"The provided {extra_data_axis} axis is not in the mesh "
                         f"(its axes are {mesh.axis_names}).")
    return mesh


def _check_wrappable(module: nn.Module) -> None:
    if isinstance(module, SpmdFullyShardedDataParallel):
        raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP. For nested "
                           "FSDP, wrap the inner child modules first, then the outer parent.")
    forward = getattr(type(module), "forward", None)
    if forward is None or forward is nn.Module.forward:
        raise RuntimeError(
            f"The module wrapped by FSDP must define a `forward` method, and the wrapper must "
            f"be called for its forward pass; {type(module).__name__} has none. Do not wrap "
            "nn.ModuleList or nn.ModuleDict: wrap the modules they hold.")


def _default_shard_output(extra_data_axis: str | None) -> Callable[[Any, spmd.Mesh], None]:
    def shard_output(output: Any, mesh: spmd.Mesh) -> None:
        real_output = None
        if isinstance(output, torch.Tensor):
            real_output = output
        elif isinstance(output, tuple):
            warnings.warn("The output is a tuple, but only its first element is sharded. If "
                          "that is not intended, pass your own shard_output callable.",
                          stacklevel=3)
            if output and isinstance(output[0], torch.Tensor):
                real_output = output[0]
        if real_output is None:
            raise RuntimeError(f"The output type is not supported: {type(output).__name__}. "
                               "Please provide your own shard_output callable "
                               "(shard_output=fn(output, mesh)).")
        spmd.mark_sharding(real_output, mesh,
                           _prepare_spmd_partition_spec(real_output, extra_data_axis))

    return shard_output


class SpmdFullyShardedDataParallel(nn.Module):
    """Wrap `module` for FSDP in SPMD mode (FSDPv2).

    Args:
      module: the module; moved to the XLA device if it is not there yet.
      mesh: the device mesh, with an `'fsdp'` axis; the global mesh when None.
      shard_output: `fn(output, mesh)` annotating the forward's output; by default the
        output's dim 0 (or a tuple output's first element's) is sharded along `'fsdp'`.
      auto_wrap_policy: a policy of `torch_xla.distributed.fsdp.wrap`; the children it
        picks are wrapped first (with `mesh` and `shard_output`).
      auto_wrapper_callable: what wraps those children (default: this class).
      extra_data_axis: another mesh axis the output's batch dim is sharded along too,
        as `(extra_data_axis, 'fsdp')` (e.g. a `'data'` axis across slices).

    Parameters already sharded (by an inner wrapper or by hand) are left as they are.
    """

    def __init__(self, module: nn.Module, *, mesh: spmd.Mesh | None = None,
                 shard_output: Callable | None = None,
                 auto_wrap_policy: Callable | None = None,
                 auto_wrapper_callable: Callable | None = None,
                 extra_data_axis: str | None = None) -> None:
        _check_wrappable(module)
        mesh = _checked_mesh(mesh, extra_data_axis)
        super().__init__()
        if auto_wrap_policy is not None:
            self._auto_wrap(module, auto_wrap_policy,
                            auto_wrapper_callable or SpmdFullyShardedDataParallel,
                            mesh=mesh, shard_output=shard_output)
        self._orig_module = module.to(torch_xla.device())
        self._mesh = mesh
        self._shard_parameters(self._orig_module)
        # The full backward hook needs the module's outputs to carry grad_fns, so it goes on
        # the wrapped module (whose forward we call), as PyTorch/XLA does.
        self._orig_module.register_full_backward_hook(backward_optimization_barrier_hook)
        self._shard_output = shard_output or _default_shard_output(extra_data_axis)

    def _shard_parameters(self, module: nn.Module) -> None:
        """Shard the parameters nobody sharded yet; those whose largest dim does not split
        evenly over the 'fsdp' axis stay replicated (jax arrays cannot hold uneven tiles,
        where PyTorch/XLA pads them), with a warning naming them."""
        fsdp = self._mesh.shape()["fsdp"]
        uneven = []
        for name, param in module.named_parameters():
            if torch_xla._XLAC._get_xla_sharding_spec(param) != "":
                continue
            if param.dim() and max(param.shape) % fsdp:
                uneven.append(f"{name} {tuple(param.shape)}")
                continue
            spmd.mark_sharding(param, self._mesh,
                               _prepare_spmd_partition_spec(param, shard_maximal=True))
        if uneven:
            warnings.warn(f"FSDPv2: these parameters stay replicated, their largest dim does "
                          f"not divide by the 'fsdp' axis size {fsdp}: {', '.join(uneven)}. "
                          "Pad them to a multiple to shard them.", stacklevel=3)

    @staticmethod
    def _auto_wrap(module: nn.Module, policy: Callable, wrapper_cls: Callable,
                   **fsdp_kwargs: Any) -> None:
        for name, sub in module.named_modules():
            if isinstance(sub, SpmdFullyShardedDataParallel):
                raise ValueError(f"Expected {name or '<root>'} to NOT be "
                                 "SpmdFullyShardedDataParallel if using an `auto_wrap_policy`: "
                                 "either wrap by hand or auto-wrap an unwrapped module.")
        recursive_wrap(module, policy, wrapper_cls, ignored_modules=[], ignored_params=[],
                       only_wrap_children=True, **fsdp_kwargs)

    @property
    def module(self) -> nn.Module:
        """The wrapped module (as DDP's `module`)."""
        return self._orig_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name: str) -> Any:
        """Attributes this wrapper lacks are the wrapped module's."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_orig_module":  # not wrapping anything yet (mid-__init__)
                raise
            return getattr(self.module, name)

    def __getitem__(self, key: int) -> nn.Module:
        """Index the wrapped module (when it is an nn.Sequential)."""
        return self.module[key]
