"""Sharding annotations (PyTorch/XLA's `xs.mark_sharding` & co) over the engine's layouts.

`mark_sharding(t, mesh, spec)` lays `t` out as `spec` on `mesh`: device data is split
over the devices at once, a pending value gets a sharding constraint in its graph. XLA's
partitioner (through jax) shards everything computed from it. See docs/guide/spmd.md.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import numpy as np
import torch
from jax.sharding import Mesh as JaxMesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as JaxSpec
from torch.amp import custom_bwd, custom_fwd
from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla.distributed.spmd.mesh import (  # noqa: F401 (upstream's names here too)
    HybridMesh,
    Mesh,
    PartitionSpec,
    ShardingType,
    get_1d_mesh,
    get_global_mesh,
    job_mesh,
    set_global_mesh,
    spec_sharding,
)
from torch_xla.distributed.spmd.xla_sharded_tensor import (
    XLAShardedTensor,
    on_device,
    relayout,
    sharding_type,
    unwrap_sharded_tensor,
)
from torch_xla.lazy import dispatch, functional, manual, sharding
from torch_xla.lazy.special import optimization_barrier_
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering.manual import MANUAL, ManualSharding
from torch_xla.pjrt.client import client


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
    mesh = job_mesh(mesh, "xs.mark_sharding")
    target = on_device(t, "xs.mark_sharding")
    sharding.mark(target, spec_sharding(mesh, partition_spec, target.shape, "xs.mark_sharding"))
    return _with_layout(t, mesh, partition_spec)


def annotate_custom_sharding(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                             ) -> XLAShardedTensor:
    """Ask the partitioner to lay out `t`'s value as `partition_spec` on `mesh` inside the
    next program, without moving the data `t` holds now (unlike `mark_sharding`, which
    refuses to re-mark sharded data). The program's result, which `t` then holds, keeps
    the new layout. Returns `t` wrapped as an `XLAShardedTensor`.

    >>> xs.mark_sharding(t, mesh_a, (0, 1))             # t's data split as (0, 1)
    >>> xs.annotate_custom_sharding(t, mesh_b, (0, 1))  # laid out anew inside the step
    """
    mesh = relayout(t, mesh, partition_spec, "xs.annotate_custom_sharding")
    return _with_layout(t, mesh, partition_spec)


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    """Drop `t`'s sharding annotation (its data becomes replicated); returns the tensor."""
    target = on_device(t, "xs.clear_sharding")
    sharding.forget(target)
    sharding.relayout(target, sharding.clear)
    return unwrap_sharded_tensor(t)


# --- manual sharding: a region where each device computes on its own shard -------------


def enable_manual_sharding(t: torch.Tensor, partition_spec: PartitionSpec, *,
                           mesh: Mesh | None = None) -> XLAShardedTensor:
    """Shard `t` as `partition_spec` says, then open a manual region: the result holds each
    device's shard (its shape is the shard's), and ops on it run per device, untouched
    by the partitioner. Close the region with `disable_manual_sharding` before the step
    ends.

    >>> xx = xs.enable_manual_sharding(x, (None, "model"))   # x: (8, 8), 4 devices
    >>> xx.shape
    torch.Size([8, 2])
    """
    mesh = job_mesh(mesh, "xs.enable_manual_sharding")
    marked = mark_sharding(unwrap_sharded_tensor(t), mesh, partition_spec)
    inner = functional.unwrap(unwrap_sharded_tensor(marked))
    return wrap_as_sharded_tensor(functional.wrap(manual.full_to_shard(inner)))


def disable_manual_sharding(t: torch.Tensor, partition_spec: PartitionSpec,
                            full_shape: tuple[int, ...], *, mesh: Mesh | None = None
                            ) -> XLAShardedTensor:
    """Close a manual region: the global tensor of `full_shape` whose shards, laid out as
    `partition_spec` on `mesh`, are `t` (one per device)."""
    mesh = job_mesh(mesh, "xs.disable_manual_sharding")
    partition_spec = tuple(partition_spec)
    if len(partition_spec) != len(full_shape):
        raise ValueError(f"xs.disable_manual_sharding: partition spec {partition_spec} has "
                         f"{len(partition_spec)} entries, but full_shape {tuple(full_shape)} "
                         f"has {len(full_shape)} dims: give one entry per dim.")
    t = _mark_manual_sharding(unwrap_sharded_tensor(t))
    inner = functional.unwrap(unwrap_sharded_tensor(t))
    full = manual.shard_to_full(inner, mesh.get_op_sharding(partition_spec), tuple(full_shape),
                                inner.dtype)
    return wrap_as_sharded_tensor(functional.wrap(full))


def _mark_manual_sharding(t: torch.Tensor) -> XLAShardedTensor:
    """Annotate `t`, computed in a manual region, as sharded `{manual}` (in place). Meant
    to be paired with `_spmd_full_to_shard_shape`/`_spmd_shard_to_full_shape`; device
    data cannot be marked."""
    mark_manual(t)
    return wrap_as_sharded_tensor(t)


def mark_manual(t: torch.Tensor) -> None:
    sharding.relayout(on_device(t, "xs._mark_manual_sharding"), manual.mark_manual)


def check_manual(found: Any, what: str) -> None:
    if found is not None and not isinstance(found, ManualSharding):
        raise ValueError(f"{what}: expected the manual sharding "
                         "(torch_xla._XLAC.OpSharding([], [], [], ShardingType.MANUAL)), got "
                         f"{found!r}.")


def op_sharding(tile_assignment: list, group_assignment: list, replication_groups: list,
                sharding_type: int) -> Any:
    """The sharding PyTorch/XLA's `OpSharding(...)` names: replicated, manual, or tiled
    over the devices `tile_assignment` arranges (global ordinals), as a jax sharding."""
    kind = ShardingType(int(sharding_type))
    if kind is ShardingType.REPLICATED:
        return client().replicated()
    if kind is ShardingType.MANUAL:
        return MANUAL
    if kind is ShardingType.TILED and not group_assignment and not replication_groups:
        ids = np.asarray(tile_assignment, dtype=np.int64)
        devices = client().global_devices
        names = tuple(f"tile_{i}" for i in range(ids.ndim))
        grid = np.array([devices[i] for i in ids.reshape(-1)], dtype=object)
        return NamedSharding(JaxMesh(grid.reshape(ids.shape), names), JaxSpec(*names))
    raise ValueError(f"OpSharding: {kind.name} with group_assignment {group_assignment} and "
                     f"replication_groups {replication_groups} is not supported here: build "
                     "the sharding with mesh.get_op_sharding(partition_spec).")


class MarkShardingFunction(torch.autograd.Function):
    """Shards the value in forward and its gradient in backward alike."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                ) -> torch.Tensor:
        ctx.mesh, ctx.partition_spec = mesh, partition_spec
        return _aot_mark_sharding(t, str(mesh), str(tuple(partition_spec)))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return _aot_mark_sharding(grad, str(ctx.mesh), str(tuple(ctx.partition_spec))), None, None


# A sharded copy as an op of its own, so that AOTAutograd (aot_function, torch.compile)
# traces it into its graph: the mesh and spec travel as strings (op arguments are plain).
@torch.library.custom_op("xla::aot_mark_sharding", mutates_args=())
def _aot_mark_sharding(t: torch.Tensor, mesh: str, partition_spec: str) -> torch.Tensor:
    # Reached only by tensors off the device (an XLA tensor's op goes to the rule below),
    # where mark_sharding says what is wrong.
    out = t.clone()
    mark_sharding(out, _mesh_from_str(mesh), ast.literal_eval(partition_spec))
    return out


@_aot_mark_sharding.register_fake
def aot_mark_sharding_fake(t: torch.Tensor, mesh: str, partition_spec: str) -> torch.Tensor:
    return torch.empty_like(t)


@dispatch.special(torch.ops.xla.aot_mark_sharding.default)
def _aot_mark_sharding_rule(func, args, kwargs):
    t, mesh, partition_spec = args
    out = XLATensor(*t.value)
    spec = _mesh_from_str(mesh).get_op_sharding(ast.literal_eval(partition_spec))
    sharding.annotate(out, spec)
    return out


def _mesh_from_str(text: str) -> Mesh:
    mesh = Mesh.from_str(text)
    if mesh is None:
        raise ValueError(f"xla::aot_mark_sharding: {text!r} is not a mesh written by "
                         "str(mesh) (device ids, mesh shape, axis names).")
    return mesh


def mark_sharding_with_gradients(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                                 ) -> torch.Tensor:
    """`mark_sharding` that autograd sees: the gradient flowing back through the result is
    sharded the same way. Not in place: use the returned tensor."""
    return MarkShardingFunction.apply(unwrap_sharded_tensor(t), mesh, tuple(partition_spec))


class _ShardAlike(torch.autograd.Function):
    """Two tensors laid out alike; their gradients too."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> tuple:
        return _shard_alike_pair(x, y)

    @staticmethod
    def backward(ctx: Any, grad_x: torch.Tensor | None, grad_y: torch.Tensor | None) -> tuple:
        if grad_x is None or grad_y is None:
            return grad_x, grad_y
        return _shard_alike_pair(grad_x, grad_y)


def _shard_alike_pair(x: torch.Tensor, y: torch.Tensor) -> tuple:
    inner = [functional.unwrap(on_device(t, "xs.shard_as")) for t in (x, y)]
    return tuple(functional.wrap(t) for t in sharding.shard_like(*inner))


def shard_as(a: Any, b: Any) -> tuple[Any, Any]:
    """`a` and `b` (tensors, or pytrees of one structure whose leaves are tensors or None in
    both) as new ones whose corresponding tensors the partitioner lays out alike, without
    naming a layout: use at least one of the results in the computation.

    >>> x = xs.mark_sharding_with_gradients(x, mesh, ("data",))
    >>> x, y = xs.shard_as(x, y)   # y is laid out as x is
    """
    a_leaves, a_tree = tree_flatten(a)
    b_leaves, b_tree = tree_flatten(b)
    if a_tree != b_tree:
        raise ValueError(f"xs.shard_as: a and b must have the same structure, got {a_tree} and "
                         f"{b_tree}.")
    out_a, out_b = [], []
    for x, y in zip(a_leaves, b_leaves, strict=True):
        if x is None or y is None:
            if x is not None or y is not None:
                raise ValueError("xs.shard_as: a leaf is None in one tree and a tensor in the "
                                 "other; put None in both or a tensor in both.")
        else:
            x, y = _ShardAlike.apply(unwrap_sharded_tensor(x), unwrap_sharded_tensor(y))
        out_a.append(x)
        out_b.append(y)
    return tree_unflatten(out_a, a_tree), tree_unflatten(out_b, b_tree)


def wrap_as_sharded_tensor(t: torch.Tensor, mesh_shape: Any = None,
                           partition_spec: Any = None) -> XLAShardedTensor:
    """`t` as an `XLAShardedTensor` (itself if it is one), with the layout given: an XLA
    tensor given a mesh shape (or mesh) and partition spec other than the recorded ones
    is laid out anew from the next program on (as `annotate_custom_sharding`), so that
    its recorded layout stays true; a tensor elsewhere only records them."""
    wrapped = t if isinstance(t, XLAShardedTensor) else XLAShardedTensor(t)
    if mesh_shape is None and partition_spec is None:
        return wrapped
    before = (wrapped.mesh_shape, wrapped.partition_spec)
    wrapped.set_layout(mesh_shape, partition_spec)
    if wrapped.device.type == "xla" and (wrapped.mesh_shape, wrapped.partition_spec) != before:
        relayout(wrapped.global_tensor, wrapped._layout_mesh(), wrapped.partition_spec,
                 "xs.wrap_as_sharded_tensor")
    return wrapped


def _with_layout(t: torch.Tensor, mesh: Mesh, partition_spec: PartitionSpec
                 ) -> XLAShardedTensor:
    wrapped = wrap_as_sharded_tensor(t)
    wrapped.set_layout(mesh, partition_spec)
    return wrapped


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


def backward_optimization_barrier_hook(module: torch.nn.Module, grad_input: tuple,
                                       grad_output: tuple) -> None:
    """A full backward hook: `module`'s parameter gradients (those accumulated when it
    runs) and the gradients flowing out of it take their values through one optimization
    barrier, in place, so XLA does not fuse that backward with the layers' around it
    (keeps peak memory bounded). Gradients off the XLA device are left alone."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    grads += [g for g in grad_input if isinstance(g, torch.Tensor)]
    on_xla = [g for g in grads if g.device.type == "xla"]
    if on_xla:
        optimization_barrier_(on_xla)


def apply_backward_optimization_barrier(m: torch.nn.Module) -> None:
    """Put an optimization barrier on `m`'s backward (`backward_optimization_barrier_hook`)."""
    m.register_full_backward_hook(backward_optimization_barrier_hook)


class XLAPatchedLinear(torch.autograd.Function):
    """`F.linear` as einsums in forward and backward, so XLA's partitioner sees the
    contraction dims directly (no transposed weight copy to shard). Under
    `torch.autocast("xla")` it computes in the autocast dtype, backward too, as
    `nn.Linear` does."""

    @staticmethod
    @custom_fwd(device_type="xla")
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
        if torch.is_autocast_enabled("xla"):  # read per call: the user's autocast dtype
            dtype = torch.get_autocast_dtype("xla")
            input, weight, bias = (t if t is None or not t.is_floating_point() else t.to(dtype)
                                   for t in (input, weight, bias))
        ctx.save_for_backward(input, weight, bias)
        product = torch.einsum("...n,mn->...m", input, weight)
        return product if bias is None else product + bias

    @staticmethod
    @custom_bwd(device_type="xla")
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


class EinsumLinear(torch.nn.Linear):
    """`nn.Linear` computed with einsums (`XLAPatchedLinear`), whose contraction the
    partitioner sees directly instead of behind reshapes and a transposed weight."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return xla_patched_nn_linear_forward(self, input)


def apply_xla_patch_to_nn_linear(module: torch.nn.Module) -> torch.nn.Module:
    """Replace every `nn.Linear` inside `module` (recursively) by an `EinsumLinear` holding
    the same parameter tensors (so shardings marked on them stay); returns `module`."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear) and not isinstance(child, EinsumLinear):
            with torch.device("meta"):
                patched = EinsumLinear(child.in_features, child.out_features,
                                       bias=child.bias is not None)
            patched.load_state_dict(child.state_dict(), strict=True, assign=True)
            setattr(module, name, patched)
        else:
            apply_xla_patch_to_nn_linear(child)
    return module
