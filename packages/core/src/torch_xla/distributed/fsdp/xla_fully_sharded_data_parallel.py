"""FSDP over XLA replicas (ZeRO-3): `XlaFullyShardedDataParallel`.

Each replica of the sharding group keeps only its `1/N` slice of every parameter (the
shards are the module's parameters, which the optimizer steps). A forward all-gathers the
full parameters it needs, a backward reduce-scatters their gradients (averaged over the
group) into the shards' `.grad`, so no replica ever holds the whole model's parameters
between steps, nor its gradients.

How the pieces map onto the lazy engine, where one step is one XLA program:

- Gathering: each sharded parameter ("unit": one per parameter, or one flat one for all
  with `flatten_parameters`) is all-gathered into a new leaf tensor, and the module's
  attributes (`linear.weight`, ...) are set to views of it for the forward. Gradients
  reach the leaf through autograd; a hook on it reduce-scatters them into the shard.
- Between steps the attributes are meta tensors of the right shapes: the gathered values
  are not kept, so a sync never makes them outputs of the step's program (that would keep
  the full parameters on the device, defeating the sharding).
- `reshard_after_forward`: the tensors autograd saves for backward that are (views of)
  gathered parameters are not kept; they are gathered again when the module's backward
  starts, behind an optimization barrier with the incoming gradient, so XLA neither
  merges the two gathers nor schedules the second one early.
- `optimization_barrier_in_forward`: the module's inputs and its shards pass one barrier
  before the gather, so XLA does not hoist every layer's gather to the program's start.

Names, arguments, the sharded parameters' names and `get_shard_metadata()` follow
PyTorch/XLA's `torch_xla.distributed.fsdp`, so its checkpoints consolidate with
`consolidate_sharded_model_checkpoints` (`state_dict_utils.py`).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp.wrap import recursive_wrap

SEPARATOR = "_FSDP_SHARD_SEPARATOR_"  # stands for "." in a shard's parameter name
WRAPPED = "_fsdp_wrapped_module"
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_state = threading.local()  # depth: FSDP forwards running on this thread


@dataclass(eq=False)
class _Entry:
    """One original parameter: where it lives and where it sits in its unit's gather."""
    module: nn.Module
    attr: str
    name: str  # relative to the wrapped module, e.g. "fc1.weight"
    shape: torch.Size
    offset: int  # in the flat gather (units of one parameter: 0)


@dataclass(eq=False)
class _Unit:
    """One sharded parameter and what it gathers into."""
    shard: nn.Parameter
    entries: list[_Entry]
    numel: int  # elements of the unpadded whole
    dim0: int | None  # shard_param_on_dim_0: the unpadded size of dim 0
    full: torch.Tensor | None = None  # the gathered leaf of this forward
    regathered: torch.Tensor | None = None  # the one gathered again for backward
    pending: torch.Tensor | None = None  # gradients held back by no_sync()


class XlaFullyShardedDataParallel(nn.Module):
    """Shards `module`'s parameters over the replicas and trains it as the whole module.

    Build the optimizer on this wrapper's `parameters()` (the shards) after wrapping, and
    call `optimizer.step()` itself: the gradients are already averaged over the group
    (`xm.optimizer_step` would average them again).

    Args:
        module: the module to shard (on the CPU, the XLA device or the meta device).
        reshard_after_forward: gather the parameters again for backward instead of keeping
            the forward's gather alive until then.
        flatten_parameters: shard one flat tensor of all parameters (one for those that
            require grad, one for the others) instead of one per parameter.
        execute_sharding_on_init: sync at the end of `__init__`, so the shards are data
            and nothing of the full parameters stays pending.
        optimization_barrier_in_forward: the inputs and the shards pass one barrier before
            the gather (keeps each layer's gather in its place in the program).
        optimization_barrier_in_backward: the incoming gradient and the shards pass one
            barrier before the backward's gather.
        mark_step_on_finalization: `xm.mark_step()` once the backward pass ends (root only).
        disable_reshard_on_root: the root instance keeps its gather until backward.
        compute_dtype: dtype of the gathered parameters and of floating inputs (default:
            the parameters' own).
        buffer_dtype: dtype of floating buffers (default: `compute_dtype`).
        fp32_reduce_scatter: reduce-scatter gradients in float32.
        sharding_groups, sharding_rank, sharding_world_size: shard over these replica
            groups (this replica's rank in its group, and the group size); default one
            group of every replica.
        shard_param_on_dim_0: shard each parameter along dim 0 (padded to a multiple of the
            group size) instead of flat.
        pin_layout_in_collective_ops: passed to the collectives as `pin_layout`.
        auto_wrap_policy: wrap the submodules it picks in FSDP instances of their own
            (`torch_xla.distributed.fsdp.wrap`).
        auto_wrapper_callable: what wraps them (default this class), called as
            `auto_wrapper_callable(module, **kwargs)`.
        param_init_fn: initializes a module built on the meta device (default:
            `to_empty()` on the XLA device, then each submodule's `reset_parameters()`).
        _shard_size_multiple: flat shards are padded to a multiple of it (default 128).
    """

    def __init__(
        self,
        module: nn.Module,
        reshard_after_forward: bool = True,
        flatten_parameters: bool = False,
        execute_sharding_on_init: bool = True,
        optimization_barrier_in_forward: bool = True,
        optimization_barrier_in_backward: bool = True,
        mark_step_on_finalization: bool = False,
        disable_reshard_on_root: bool = True,
        compute_dtype: torch.dtype | None = None,
        buffer_dtype: torch.dtype | None = None,
        fp32_reduce_scatter: bool = False,
        sharding_groups: list[list[int]] | None = None,
        sharding_rank: int | None = None,
        sharding_world_size: int | None = None,
        shard_param_on_dim_0: bool = False,
        pin_layout_in_collective_ops: bool = True,
        auto_wrap_policy: Callable | None = None,
        auto_wrapper_callable: Callable | None = None,
        param_init_fn: Callable[[nn.Module], None] | None = None,
        _shard_size_multiple: int = 128,
        **unknown: Any,
    ) -> None:
        if unknown:
            raise TypeError(f"XlaFullyShardedDataParallel got unexpected arguments "
                            f"{sorted(unknown)}.")
        if isinstance(module, XlaFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP. For "
                               "nested FSDP, first wrap the inner child modules before "
                               "wrapping the outer parent module.")
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            raise RuntimeError(f"The module wrapped by FSDP must define a `forward` method "
                               f"and call it during the module's forward pass; "
                               f"{type(module).__name__} has none. Wrap the module that "
                               "holds it.")
        for arg, dtype in (("compute_dtype", compute_dtype), ("buffer_dtype", buffer_dtype)):
            if dtype is not None and dtype not in FLOAT_DTYPES:
                raise ValueError(f"{arg} must be one of {FLOAT_DTYPES}, not {dtype}")
        super().__init__()
        self.rank, self.world_size = _sharding_group(sharding_groups, sharding_rank,
                                                     sharding_world_size)
        self.sharding_groups = sharding_groups
        self.reshard_after_forward = reshard_after_forward
        self.flatten_parameters = flatten_parameters
        self.optimization_barrier_in_forward = optimization_barrier_in_forward
        self.optimization_barrier_in_backward = optimization_barrier_in_backward
        self.mark_step_on_finalization = mark_step_on_finalization
        self.disable_reshard_on_root = disable_reshard_on_root
        self.compute_dtype = compute_dtype
        self.buffer_dtype = buffer_dtype if buffer_dtype is not None else compute_dtype
        self.fp32_reduce_scatter = fp32_reduce_scatter
        self.shard_param_on_dim_0 = shard_param_on_dim_0 and not flatten_parameters
        self.pin_layout = pin_layout_in_collective_ops
        self._multiple = 1 if self.shard_param_on_dim_0 else _shard_size_multiple
        self._require_backward_grad_sync = True
        self._is_root: bool | None = None  # decided by the first forward
        self._regathered = False
        self._finalize_queued = False
        self.buffer_info: dict[str, dict[str, torch.dtype]] = {}
        device = torch_xla.device()

        _initialize(module, param_init_fn, device)
        if auto_wrap_policy is not None:
            config = dict(
                reshard_after_forward=reshard_after_forward,
                flatten_parameters=flatten_parameters,
                execute_sharding_on_init=False,
                optimization_barrier_in_forward=optimization_barrier_in_forward,
                optimization_barrier_in_backward=optimization_barrier_in_backward,
                disable_reshard_on_root=disable_reshard_on_root,
                compute_dtype=compute_dtype, buffer_dtype=buffer_dtype,
                fp32_reduce_scatter=fp32_reduce_scatter, sharding_groups=sharding_groups,
                sharding_rank=sharding_rank, sharding_world_size=sharding_world_size,
                shard_param_on_dim_0=shard_param_on_dim_0,
                pin_layout_in_collective_ops=pin_layout_in_collective_ops,
                _shard_size_multiple=_shard_size_multiple)
            recursive_wrap(module, auto_wrap_policy,
                           auto_wrapper_callable or XlaFullyShardedDataParallel, (), (),
                           only_wrap_children=True, **config)
        self.units = self._shard(module, device)
        self._move_buffers(module, device)
        self._fsdp_wrapped_module = module
        self.sharded_params = [u.shard for u in self.units]
        if execute_sharding_on_init:
            torch_xla.sync()

    # --- set-up -----------------------------------------------------------------------

    def _shard(self, module: nn.Module, device: torch.device) -> list[_Unit]:
        """Replace `module`'s own parameters (those no nested FSDP holds) by shards."""
        found: dict[int, tuple[nn.Parameter, list[_Entry]]] = {}
        for prefix, owner in _own_modules(module):
            for attr, param in list(owner._parameters.items()):
                if param is None:
                    continue
                name = prefix + attr
                if getattr(param, "_fsdp_sharded", False):
                    raise ValueError(
                        f"parameter {name!r} is also held by a nested FSDP instance (tied "
                        "weights across FSDP units): wrap the modules that share it in one "
                        "unit (e.g. leave one of them out of the auto-wrap policy).")
                if not param.is_floating_point():
                    raise TypeError(f"FSDP shards floating-point parameters; {name!r} is "
                                    f"{param.dtype}.")
                entry = _Entry(owner, attr, name, param.shape, 0)
                found.setdefault(id(param), (param, []))[1].append(entry)
        units = []
        if self.flatten_parameters:
            groups = [[(p, es) for p, es in found.values() if p.requires_grad],
                      [(p, es) for p, es in found.values() if not p.requires_grad]]
            for group in (g for g in groups if g):
                units.append(self._unit(group, f"flat_param_{len(units)}", device))
        else:
            for param, entries in found.values():
                units.append(self._unit([(param, entries)], entries[0].name, device))
        for param, entries in found.values():
            param._fsdp_sharded = True  # noqa: SLF001 (a marker for outer instances)
            for e in entries:
                del e.module._parameters[e.attr]
        for unit in units:
            _release(unit)
        return units

    def _unit(self, params: list[tuple[nn.Parameter, list[_Entry]]], name: str,
              device: torch.device) -> _Unit:
        dtypes = {p.dtype for p, _ in params}
        if len(dtypes) > 1:
            raise ValueError(f"flatten_parameters needs one dtype per flat parameter; "
                             f"{[e.name for _, es in params for e in es]} have "
                             f"{sorted(map(str, dtypes))}.")
        with torch.no_grad():
            if self.shard_param_on_dim_0 and params[0][0].dim() > 0:
                whole = params[0][0].detach()
                dim0, numel = whole.shape[0], whole.numel()
                rows = -(-dim0 // self.world_size)
                extra = rows * self.world_size - dim0
                padded = F.pad(whole, [0, 0] * (whole.dim() - 1) + [0, extra])
                shard = padded[self.rank * rows:(self.rank + 1) * rows]
            else:
                dim0, offset, pieces = None, 0, []
                for param, entries in params:
                    for e in entries:
                        e.offset = offset
                    pieces.append(param.detach().reshape(-1).to(device))
                    offset += param.numel()
                numel = offset
                step = self.world_size * self._multiple
                padded = F.pad(torch.cat(pieces), [0, -numel % step])
                size = padded.numel() // self.world_size
                shard = padded[self.rank * size:(self.rank + 1) * size]
            shard = nn.Parameter(shard.to(device).clone(),
                                 requires_grad=params[0][0].requires_grad)
        orig_name = f"{WRAPPED}.{name}"
        shard._is_sharded = True
        shard._orig_size = params[0][0].shape if len(params) == 1 and not self.flatten_parameters \
            else torch.Size([numel])
        shard._orig_name = orig_name
        shard._name = f"_fsdp_shard.{orig_name}".replace(".", SEPARATOR)
        self.register_parameter(shard._name, shard)
        return _Unit(shard, [e for _, es in params for e in es], numel, dim0)

    def _move_buffers(self, module: nn.Module, device: torch.device) -> None:
        for prefix, owner in _own_modules(module):
            for attr, buf in list(owner._buffers.items()):
                if buf is None:
                    continue
                if self.buffer_dtype is not None and buf.is_floating_point() and \
                        buf.dtype != self.buffer_dtype:
                    self.buffer_info[f"{WRAPPED}.{prefix}{attr}"] = {"_orig_dtype": buf.dtype}
                    buf = buf.to(self.buffer_dtype)
                owner._buffers[attr] = buf.to(device)

    # --- forward and backward ---------------------------------------------------------

    @property
    def module(self) -> nn.Module:
        """The wrapped module."""
        return self._fsdp_wrapped_module

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            wrapped = self.__dict__.get("_modules", {}).get(WRAPPED)
            if wrapped is None:
                raise
            return getattr(wrapped, name)

    def __getitem__(self, key: int) -> Any:
        return self.module.__getitem__(key)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_state, "depth", 0)
        if self._is_root is None:
            self._is_root = depth == 0
            if self._is_root:
                for inner in self.module.modules():
                    if isinstance(inner, XlaFullyShardedDataParallel):
                        inner._is_root = False
        if self._is_root:
            self._finalize_queued = False  # also after a backward that raised
        if self.compute_dtype is not None:
            args, kwargs = tree_map(self._cast_input, (args, kwargs))
        if self.optimization_barrier_in_forward:
            args, kwargs, shards = _Barrier.through(self._shard_values(), (args, kwargs))
        else:
            shards = self._shard_values()
        for unit, shard in zip(self.units, shards, strict=True):
            unit.full = self._gather(unit, shard)
            _attach(unit, unit.full)
        reshard = self.reshard_after_forward and not (self._is_root and
                                                      self.disable_reshard_on_root)
        saving = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack) \
            if reshard and self.units and torch.is_grad_enabled() else contextlib.nullcontext()
        _state.depth = depth + 1
        try:
            with saving:
                outputs = self.module(*args, **kwargs)
        finally:
            _state.depth = depth
        waiting = [t for t in _tensors(outputs) if t.requires_grad]
        for t in waiting:
            t.register_hook(self._pre_backward)
        if reshard or not waiting:
            for unit in self.units:
                _release(unit)
        return outputs

    def _cast_input(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.to(self.compute_dtype)
        return value

    def _shard_values(self) -> list[torch.Tensor]:
        values = [u.shard.detach() for u in self.units]
        if self.compute_dtype is not None:
            values = [v.to(self.compute_dtype) for v in values]
        return values

    def _gather(self, unit: _Unit, shard: torch.Tensor) -> torch.Tensor:
        """The whole (padded) parameter as a new leaf whose gradient goes to the shard."""
        with torch.no_grad():
            full = xm.all_gather(shard, dim=0, groups=self.sharding_groups,
                                 pin_layout=self.pin_layout)
        full.requires_grad_(unit.shard.requires_grad)
        if full.requires_grad:  # the hook lives and dies with the leaf
            full.register_post_accumulate_grad_hook(
                lambda leaf, unit=unit: self._reduce_gradient(unit, leaf))
        return full

    def _pack(self, saved: torch.Tensor) -> Any:
        """Keep a gathered parameter (or a view of one) as where to find it again."""
        base = saved if saved._base is None else saved._base
        for index, unit in enumerate(self.units):
            if base is unit.full:
                return _Saved(index, saved.shape, saved.stride(), saved.storage_offset())
        return saved

    def _unpack(self, saved: Any) -> torch.Tensor:
        if not isinstance(saved, _Saved):
            return saved
        unit = self.units[saved.unit]
        if unit.regathered is None:
            self._regather(None)
        return unit.regathered.detach().as_strided(saved.shape, saved.stride, saved.offset)

    def _pre_backward(self, grad: torch.Tensor) -> torch.Tensor | None:
        """First gradient reaching this module's outputs: its backward starts."""
        if self._is_root and not self._finalize_queued:
            self._finalize_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
        if self._regathered or any(u.full is not None for u in self.units) or not self.units:
            return None  # kept its forward's gathers, or gathered again already
        return self._regather(grad)

    def _regather(self, grad: torch.Tensor | None) -> torch.Tensor | None:
        """Gather the parameters again for backward (after `grad` arrives, if given)."""
        self._regathered = True
        shards = self._shard_values()
        if self.optimization_barrier_in_backward:
            grad, _, shards = _Barrier.through(shards, (grad, {}))
        for unit, shard in zip(self.units, shards, strict=True):
            unit.regathered = self._gather(unit, shard)
            _attach(unit, unit.regathered)  # what a recomputing (checkpointed) forward reads
        return grad

    def _reduce_gradient(self, unit: _Unit, leaf: torch.Tensor) -> None:
        """Average `leaf`'s gradient over the group and add this replica's part to the
        shard's gradient."""
        grad, leaf.grad = leaf.grad, None
        if grad is None:
            return
        with torch.no_grad():
            if unit.pending is not None:
                grad, unit.pending = grad + unit.pending, None
            if not self._require_backward_grad_sync:
                unit.pending = grad
                return
            if self.fp32_reduce_scatter:
                grad = grad.float()
            part = xm.reduce_scatter(xm.REDUCE_SUM, grad, scale=1.0 / self.world_size,
                                     scatter_dim=0, shard_count=self.world_size,
                                     groups=self.sharding_groups, pin_layout=self.pin_layout)
            part = part.to(unit.shard.dtype)
            shard = unit.shard
            shard.grad = part if shard.grad is None else shard.grad + part

    def _finalize(self) -> None:
        """End of a backward pass (root): drop every instance's gathers."""
        self._finalize_queued = False
        for inner in self.modules():
            if isinstance(inner, XlaFullyShardedDataParallel):
                inner._regathered = False
                for unit in inner.units:
                    _release(unit)
        if self.mark_step_on_finalization:
            xm.mark_step()

    # --- the rest of the API ----------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally (unreduced, full size) inside the block; the first
        backward after it reduces them together with its own."""
        if self._is_root is False:
            raise RuntimeError("no_sync on an inner (nested) FSDP instance is not supported; "
                               "call it on the root.")
        instances = [m for m in self.modules() if isinstance(m, XlaFullyShardedDataParallel)]
        for m in instances:
            m._require_backward_grad_sync = False
        try:
            yield
        finally:
            for m in instances:
                m._require_backward_grad_sync = True

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0,
                        groups: list[list[int]] | None = None) -> torch.Tensor:
        """Clip the gradients of all shards (of this instance and the nested ones) by their
        total norm over the sharding group; returns that norm."""
        if self._is_root is False:
            raise RuntimeError("clip_grad_norm_ should only be called on the root (parent) "
                               "FSDP instance.")
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:
            return torch.tensor(0.0, device=torch_xla.device())
        norm_type = float(norm_type)
        groups = groups if groups is not None else self.sharding_groups
        if math.isinf(norm_type):
            local = torch.stack([g.abs().max() for g in grads]).max()
            total = xm.all_reduce(xm.REDUCE_MAX, local, groups=groups, pin_layout=self.pin_layout)
        else:
            local = sum(g.float().norm(norm_type) ** norm_type for g in grads)
            total = xm.all_reduce(xm.REDUCE_SUM, local, groups=groups,
                                  pin_layout=self.pin_layout) ** (1.0 / norm_type)
        coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coefficient.to(g.dtype))
        return total

    @property
    def params_with_grad(self) -> list[nn.Parameter]:
        """The shards (of this instance and the nested ones) that have a gradient."""
        return [p for p in self.parameters() if p.grad is not None]

    def get_original_names_and_sharded_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """(the original module's name of each parameter, the shard holding it), over this
        instance and the nested ones; a flat shard is named by its instance's path and
        `flat_param_<i>`."""
        for path, inner in self.named_modules():
            if isinstance(inner, XlaFullyShardedDataParallel):
                prefix = f"{path}." if path else ""
                for u in inner.units:
                    name = u.shard._orig_name if inner.flatten_parameters else \
                        f"{WRAPPED}.{u.entries[0].name}"
                    yield prefix.replace(f"{WRAPPED}.", "") + name.replace(f"{WRAPPED}.", ""), \
                        u.shard

    def get_shard_metadata(self) -> dict[str, Any]:
        """What `consolidate_sharded_state_dicts` needs to rebuild the full state dict from
        every rank's `state_dict()`: each instance's shards (original names and sizes),
        the flat parameters' parts, the buffers cast by `buffer_dtype`, the tied
        parameters' other names (`alias_info`, which PyTorch/XLA's metadata lacks), and
        the group."""
        shard_info, flatten_info, buffer_info, alias_info = {}, {}, {}, {}
        for path, inner in self.named_modules():
            if not isinstance(inner, XlaFullyShardedDataParallel):
                continue
            prefix = f"{path}." if path else ""
            shard_info[path] = {u.shard._name: {"_orig_size": u.shard._orig_size,
                                                "_orig_name": u.shard._orig_name}
                                for u in inner.units}
            for u in inner.units:
                primary: dict[int, _Entry] = {}  # tied parameters share an offset
                for e in u.entries:
                    first = primary.setdefault(e.offset, e)
                    if first is not e:
                        alias = f"{prefix}{WRAPPED}.{e.name}"
                        alias_info[alias] = f"{prefix}{WRAPPED}.{first.name}"
                if inner.flatten_parameters:
                    parts = list(primary.values())
                    flatten_info[prefix + u.shard._orig_name] = (
                        [e.name for e in parts], [e.shape for e in parts],
                        [math.prod(e.shape) for e in parts])
            for name, info in inner.buffer_info.items():
                buffer_info[prefix + name] = info
        return {"shard_info": shard_info, "flatten_info": flatten_info,
                "buffer_info": buffer_info, "alias_info": alias_info,
                "world_size": self.world_size, "rank": self.rank}

    def extra_repr(self) -> str:
        return (f"world_size={self.world_size}, rank={self.rank}, "
                f"flatten_parameters={self.flatten_parameters}, "
                f"reshard_after_forward={self.reshard_after_forward}")


@dataclass(frozen=True)
class _Saved:
    """A saved gathered parameter, kept as where it sits in its unit's gather."""
    unit: int
    shape: torch.Size
    stride: tuple[int, ...]
    offset: int


class _Barrier(torch.autograd.Function):
    """Identity through one XLA optimization barrier, differentiable."""

    @staticmethod
    def forward(ctx: Any, *values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = [v.detach().clone() for v in values]
        xm.optimization_barrier_(out)
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return grads

    @staticmethod
    def through(shards: list[torch.Tensor], tree: Any) -> tuple[Any, Any, list[torch.Tensor]]:
        """`shards` and the XLA tensors in `tree` (args, kwargs) through one barrier."""
        found = [v for v in tree_leaves(tree)
                 if isinstance(v, torch.Tensor) and v.device.type == "xla"]
        values = _Barrier.apply(*shards, *found)
        new = dict(zip(map(id, found), values[len(shards):], strict=True))
        first, second = tree_map(lambda v: new.get(id(v), v), tree)
        return first, second, list(values[:len(shards)])


def _sharding_group(groups: list[list[int]] | None, rank: int | None,
                    world_size: int | None) -> tuple[int, int]:
    if groups is not None:
        if rank is None or world_size is None:
            raise ValueError("sharding_rank and sharding_world_size must be provided when "
                             "sharding_groups is specified")
        return rank, world_size
    return (xr.global_ordinal() if rank is None else rank,
            xr.world_size() if world_size is None else world_size)


def _initialize(module: nn.Module, param_init_fn: Callable | None,
                device: torch.device) -> None:
    """Materialize a module built on the meta device, its tied parameters still tied."""
    if not any(t.is_meta for t in [*module.parameters(), *module.buffers()]):
        return
    if param_init_fn is not None:
        param_init_fn(module)
        return
    holders: dict[int, list[tuple[nn.Module, str]]] = {}
    for sub in module.modules():
        for name, param in sub._parameters.items():
            if param is not None:
                holders.setdefault(id(param), []).append((sub, name))
    module.to_empty(device=device)  # gives each holder of a tied parameter its own copy
    for (first, first_name), *others in holders.values():
        for sub, name in others:
            sub._parameters[name] = first._parameters[first_name]
    with torch.no_grad():
        for sub in module.modules():
            if callable(getattr(sub, "reset_parameters", None)):
                sub.reset_parameters()


def _own_modules(module: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
    """(prefix, submodule) for `module` and its submodules outside nested FSDP instances."""
    yield prefix, module
    for name, child in module._modules.items():
        if child is not None and not isinstance(child, XlaFullyShardedDataParallel):
            yield from _own_modules(child, f"{prefix}{name}.")


def _attach(unit: _Unit, gathered: torch.Tensor) -> None:
    """Set the module attributes of `unit` to their views of `gathered` (views that
    autograd records, also in backward, where a checkpointed forward recomputes)."""
    with torch.enable_grad() if gathered.requires_grad else contextlib.nullcontext():
        _attach_views(unit, gathered)


def _attach_views(unit: _Unit, gathered: torch.Tensor) -> None:
    for e in unit.entries:
        if unit.dim0 is not None:
            value = gathered[:unit.dim0]
        else:
            value = gathered[e.offset:e.offset + math.prod(e.shape)].view(e.shape)
        setattr(e.module, e.attr, value)


def _release(unit: _Unit) -> None:
    """Drop the gathers: the attributes become meta tensors of the parameters' shapes."""
    dtype = unit.shard.dtype
    for e in unit.entries:
        setattr(e.module, e.attr, torch.empty(e.shape, dtype=dtype, device="meta"))
    unit.full = unit.regathered = None


def _tensors(value: Any) -> list[torch.Tensor]:
    return [v for v in tree_leaves(value) if isinstance(v, torch.Tensor)]
