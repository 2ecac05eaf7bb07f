"""Sharding annotations (PyTorch/XLA's `xs.mark_sharding` & co) over the engine's layouts.

`mark_sharding(t, mesh, spec)` lays `t` out as `spec` on `mesh`: device data is split
over the devices at once, a pending value gets a sharding constraint in its graph. XLA's
partitioner (through jax) shards everything computed from it. See docs/guide/spmd.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from torch_xla.distributed.spmd.mesh import Mesh, PartitionSpec, ShardingType, get_global_mesh
from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShardedTensor, sharding_type
from torch_xla.lazy import sharding
from torch_xla.lazy.special import optimization_barrier_
from torch_xla.pjrt.client import client


def _xla_tensor(t: torch.Tensor, what: str) -> torch.Tensor:
    t = unwrap_sharded_tensor(t)
    if not isinstance(t, torch.Tensor) or t.device.type != "xla":
        where = t.device if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{what}: expected a tensor on the XLA device, got one on {where}; "
                        "move it first with `t.to(torch_xla.device())`.")
    return t


def _checked_mesh(mesh: Mesh | None, what: str) -> Mesh:
    mesh = get_global_mesh() if mesh is None else mesh
    if mesh is None:
        raise ValueError(f"{what}: no mesh given and no global mesh set "
                         "(xs.set_global_mesh(mesh)).")
    devices = len(client().global_devices)
    if mesh.size() != devices:
        raise ValueError(f"{what}: mesh {mesh.mesh_shape} spans {mesh.size()} devices, but "
                         f"the job has {devices} (xr.global_runtime_device_count()).")
    return mesh


def mark_sharding(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                  ) -> XLAShardedTensor:
    """Shard `t` over `mesh` as `partition_spec` says: one entry per dim of `t`, each a mesh
    axis (index or name), a tuple of axes, or None to replicate that dim. In place; returns
    `t` wrapped as an `XLAShardedTensor`.

    >>> mesh = xs.Mesh(np.arange(8), (4, 2), ("data", "model"))
    >>> xs.mark_sharding(batch, mesh, ("data", None))   # 4-way data parallel
    >>> xs.mark_sharding(linear.weight, mesh, (None, "model"))
    """
    sharding.check_spmd("xs.mark_sharding")
    mesh = _checked_mesh(mesh, "xs.mark_sharding")
    target = _xla_tensor(t, "xs.mark_sharding")
    partition_spec = tuple(partition_spec)
    if len(target.shape) != len(partition_spec):
        raise ValueError(f"xs.mark_sharding: partition spec {partition_spec} has "
                         f"{len(partition_spec)} entries, but the tensor has {len(target.shape)} "
                         f"dims (shape {tuple(target.shape)}): give one entry per dim.")
    layout = mesh.get_op_sharding(partition_spec)
    sharding.relayout(target, lambda inner: sharding.annotate(inner, layout))
    return wrap_as_sharded_tensor(t)


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    """Drop `t`'s sharding annotation (its data becomes replicated); returns the tensor."""
    sharding.relayout(_xla_tensor(t, "xs.clear_sharding"), sharding.clear)
    return unwrap_sharded_tensor(t)


class MarkShardingFunction(torch.autograd.Function):
    """Shards the value in forward and its gradient in backward alike."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                ) -> torch.Tensor:
        ctx.mesh, ctx.partition_spec = mesh, partition_spec
        out = t.clone()
        mark_sharding(out, mesh, partition_spec)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        grad = grad.clone()
        mark_sharding(grad, ctx.mesh, ctx.partition_spec)
        return grad, None, None


def mark_sharding_with_gradients(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                                 ) -> torch.Tensor:
    """`mark_sharding` that autograd sees: the gradient flowing back through the result is
    sharded the same way. Not in place: use the returned tensor."""
    return MarkShardingFunction.apply(unwrap_sharded_tensor(t), mesh, tuple(partition_spec))


def wrap_as_sharded_tensor(t: torch.Tensor) -> XLAShardedTensor:
    return t if isinstance(t, XLAShardedTensor) else XLAShardedTensor(t)


def unwrap_sharded_tensor(t: Any) -> Any:
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def wrap_if_sharded(x: Any) -> Any:
    """`x` as an `XLAShardedTensor` if it is an XLA tensor with a sharding, else `x`."""
    if (isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor)
            and x.device.type == "xla" and sharding_type(x) is not None):
        return XLAShardedTensor(x)
    return x


@dataclasses.dataclass
class ShardingSpec:
    """A mesh and a partition spec, applied later (e.g. to each batch by `MpDeviceLoader`'s
    `input_sharding`). `minibatch`: each process loads only its part of the batch
    (multi-host data loading)."""

    mesh: Mesh
    partition_spec: PartitionSpec
    minibatch: bool | None = False

    def __post_init__(self) -> None:
        self.partition_spec = tuple(self.partition_spec)
        self.mesh.translate(self.partition_spec)  # checks names and indices now

    @property
    def sharding_type(self) -> ShardingType:
        return self.mesh.sharding_type(self.partition_spec)

    def can_apply(self, t: torch.Tensor) -> bool:
        return len(t.shape) == len(self.partition_spec)

    def apply(self, t: torch.Tensor) -> None:
        mark_sharding(t, self.mesh, self.partition_spec)

    def sharding(self) -> Any:
        """The jax sharding this spec names over the job's devices."""
        return self.mesh.get_op_sharding(self.partition_spec)


def apply_backward_optimization_barrier(m: torch.nn.Module) -> None:
    """Put an optimization barrier on the gradients flowing out of `m`'s backward, so XLA
    does not fuse that backward with the layers' around it (keeps peak memory bounded)."""

    def barrier(module: torch.nn.Module, grad_input: tuple, grad_output: tuple) -> tuple:
        grads = [g.clone() if g is not None else None for g in grad_input]
        present = [g for g in grads if g is not None]
        if present:
            optimization_barrier_(present)
        return tuple(grads)

    m.register_full_backward_hook(barrier)


class XLAPatchedLinear(torch.autograd.Function):
    """`F.linear` as einsums in forward and backward, so XLA's partitioner sees the
    contraction dims directly (no transposed weight copy to shard)."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        ctx.save_for_backward(input, weight, bias)
        product = torch.einsum("...n,mn->...m", input, weight)
        return product if bias is None else product + bias

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = torch.einsum("...m,mn->...n", grad_output, weight)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.einsum("...m,...n->mn", grad_output, input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = torch.einsum("...m->m", grad_output)
        return grad_input, grad_weight, grad_bias


def xla_patched_nn_linear_forward(m: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    return XLAPatchedLinear.apply(input, m.weight, m.bias)
