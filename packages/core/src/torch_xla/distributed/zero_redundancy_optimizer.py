"""ZeRO-1 for XLA replicas: `ZeroRedundancyOptimizer` shards the optimizer state.

Each replica keeps the full parameters (for forward and backward) but only its shard of
every parameter for the optimizer: a `1/N` slice along dim 0 (padded to a multiple of the
group size `N`) in `optimizer_dtype`, and the wrapped optimizer's state for that slice.
A step

1. reduce-scatters each gradient over the sharding group (averaging it), so each replica
   gets the averaged gradient of its own slice;
2. optionally clips the gradients by their global 2-norm (an all-reduce of the shards'
   squared norms);
3. steps the wrapped optimizer on the slices;
4. all-gathers the updated slices into the full parameters.

Names, arguments and behaviour follow PyTorch/XLA's
`torch_xla.distributed.zero_redundancy_optimizer`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

logger = logging.getLogger("torch_xla")


def _padded(t: torch.Tensor, parts: int) -> torch.Tensor:
    """`t` padded with zeros along dim 0 to a multiple of `parts`."""
    extra = -t.size(0) % parts
    return F.pad(t, [0, 0] * (t.dim() - 1) + [0, extra]) if extra else t


class ZeroRedundancyOptimizer(torch.optim.Optimizer):
    """Wraps `optimizer_class` so that its state is sharded over the replicas (ZeRO-1).

    Args:
        params: the full parameters (or parameter groups), on one XLA device.
        optimizer_class: the optimizer stepping each replica's shards (e.g. `torch.optim.Adam`).
        optimizer_dtype: dtype of the shards and their optimizer state (default float32).
        grad_clipping: clip the gradients by their global 2-norm before the step.
        max_norm: the clipping norm (default 1.0).
        pin_layout: passed to the collectives.
        sharding_groups: replica groups to shard over (default: one group of every replica).
        grad_norm_groups: extra groups whose squared norms are summed into the norm (model
            parallel groups).
        lazy_init: do not shard now; call `init_zero()` later.
        bucket_cap_mb_all_gather, bucket_cap_mb_reduce_scatter: above 0, use the bucketized
            collectives for the parameters / gradients.
        use_grad_acc_hook: accumulate gradients in `optimizer_dtype` (`main_grad`) through
            hooks, freeing each `param.grad` as it arrives.
        save_master_weights: keep the shards themselves in `state_dict()`.
        higher_cc_precision: run the reduce-scatter in `optimizer_dtype`.
        **defaults: the wrapped optimizer's arguments (lr, ...).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        optimizer_class: type[torch.optim.Optimizer],
        optimizer_dtype: torch.dtype | None = None,
        grad_clipping: bool = True,
        max_norm: float | None = None,
        pin_layout: bool = True,
        sharding_groups: list[list[int]] | None = None,
        grad_norm_groups: list[list[int]] | None = None,
        lazy_init: bool = False,
        bucket_cap_mb_all_gather: int = 0,
        bucket_cap_mb_reduce_scatter: int = 0,
        use_grad_acc_hook: bool = False,
        save_master_weights: bool = False,
        higher_cc_precision: bool = False,
        **defaults: Any,
    ) -> None:
        if not save_master_weights:
            logger.warning("ZeroRedundancyOptimizer: without save_master_weights=True a "
                           "checkpoint does not hold the optimizer's own (sharded) weights; "
                           "resuming from it may lose accuracy.")
        super().__init__(params, defaults)
        self.global_world_size = xr.world_size()
        self.global_rank = xr.global_ordinal()
        self._sharding_groups = (
            [list(range(self.global_world_size))] if sharding_groups is None
            else [list(g) for g in sharding_groups]
        )
        self._grad_norm_groups = grad_norm_groups
        self.optimizer_class = optimizer_class
        self.defaults = defaults
        self.optimizer_dtype = optimizer_dtype if optimizer_dtype is not None else torch.float32
        self.grad_clipping = grad_clipping
        self.max_norm = max_norm if max_norm is not None else 1.0
        self.pin_layout = pin_layout
        self.bucket_cap_mb_all_gather = bucket_cap_mb_all_gather
        self.bucket_cap_mb_reduce_scatter = bucket_cap_mb_reduce_scatter
        self.coalesce_cc_all_gather = bucket_cap_mb_all_gather > 0
        self.coalesce_cc_reduce_scatter = bucket_cap_mb_reduce_scatter > 0
        self.use_grad_acc_hook = use_grad_acc_hook
        self.save_master_weights = save_master_weights
        self.higher_cc_precision = higher_cc_precision
        self.grad_accs: list[Any] = []
        self.grad_acc_hooks: list[Any] = []
        self._grad_norm: torch.Tensor | None = None
        self.inited = False
        if not lazy_init:
            self.init_zero()

    # --- sharding -----------------------------------------------------------------------

    @property
    def sharding_groups(self) -> list[list[int]]:
        return self._sharding_groups

    @sharding_groups.setter
    def sharding_groups(self, groups: list[list[int]]) -> None:
        if self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer is already sharded (init_zero() ran); "
                               "set sharding_groups before, with lazy_init=True.")
        self._sharding_groups = [list(g) for g in groups]

    @property
    def grad_norm(self) -> torch.Tensor | None:
        """The global gradient norm of the last clipped step (None before one)."""
        return self._grad_norm

    def init_zero(self) -> None:
        """Shard the parameters and create the wrapped optimizer on the shards."""
        self.remove_hooks()
        self.local_world_size = len(self._sharding_groups[0])
        mine = [g for g in self._sharding_groups if self.global_rank in g]
        if not mine:
            raise ValueError(f"Replica {self.global_rank} is in none of the sharding groups "
                             f"{self._sharding_groups}; every replica must be in one.")
        self.local_rank = mine[0].index(self.global_rank)
        self.base_optimizer = self.optimizer_class(self._shard_parameters(), **self.defaults)
        self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
        self.inited = True

    def _pairs(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """(full parameter, its shard) for every parameter, in order."""
        for group, sharded in zip(self.param_groups, self.base_optimizer.param_groups,
                                  strict=True):
            yield from zip(group["params"], sharded["params"], strict=True)

    def _shard_parameters(self) -> list[dict[str, Any]]:
        params = [p for group in self.param_groups for p in group["params"]]
        devices = {p.device for p in params}
        if len(devices) != 1 or next(iter(devices)).type != "xla":
            raise ValueError(f"ZeroRedundancyOptimizer needs every parameter on one XLA device; "
                             f"they are on {sorted(map(str, devices))}.")
        self.device = next(iter(devices))
        if any(p.dim() == 0 for p in params):
            raise ValueError("ZeroRedundancyOptimizer shards parameters along dim 0; a 0-d "
                             "parameter cannot be sharded (make it shape (1,)).")
        xm.unlazy(params)
        groups = []
        for group in self.param_groups:
            shards = []
            for param in group["params"]:
                shard = nn.Parameter(self._shard_of(param), requires_grad=param.requires_grad)
                if self.use_grad_acc_hook:
                    self._register_hook(param, shard)
                shards.append(shard)
            groups.append({**group, "params": shards})
        return groups

    def _shard_of(self, param: torch.Tensor) -> torch.Tensor:
        """This replica's slice of `param`, in `optimizer_dtype`, on the device."""
        full = _padded(param.detach().to("cpu"), self.local_world_size)
        part = full.chunk(self.local_world_size)[self.local_rank]
        return part.to(self.optimizer_dtype).to(self.device)

    @staticmethod
    def _sync_param_groups(src: list[dict[str, Any]], dst: list[dict[str, Any]]) -> None:
        """Copy every setting but the parameters (lr, schedulers' fields) from src to dst."""
        if len(src) != len(dst):
            raise ValueError(f"{len(src)} parameter groups cannot be synced with {len(dst)}.")
        for source, target in zip(src, dst, strict=True):
            target.update({k: v for k, v in source.items() if k != "params"})

    # --- gradient accumulation hooks --------------------------------------------------------

    def _register_hook(self, param: torch.Tensor, shard: torch.Tensor) -> None:
        accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
        self.grad_acc_hooks.append(accumulator.register_hook(self._accumulate(param, shard)))
        self.grad_accs.append(accumulator)

    def _accumulate(self, param: torch.Tensor, shard: torch.Tensor) -> Callable[..., None]:
        def hook(*unused: Any) -> None:
            if param.grad is None:
                return
            if not hasattr(shard, "main_grad"):
                shard.main_grad = torch.zeros(param.shape, dtype=self.optimizer_dtype,
                                              device=self.device)
                param.main_grad = shard.main_grad
            shard.main_grad.add_(param.grad.detach().to(self.optimizer_dtype))
            param.grad = None

        return hook

    def remove_hooks(self) -> None:
        for hook in self.grad_acc_hooks:
            hook.remove()
        self.grad_acc_hooks, self.grad_accs = [], []

    # --- the step -------------------------------------------------------------------------

    def _has_grad(self, param: torch.Tensor, shard: torch.Tensor) -> bool:
        return param.grad is not None or (self.use_grad_acc_hook and hasattr(shard, "main_grad"))

    def _get_sharding_scheme(self, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        """Stages of sharding (PyTorch/XLA's `sharding_scheme` step argument); one by default."""
        return kwargs.get("sharding_scheme") or [
            {"scale_factor": 1.0, "sharding_group": self._sharding_groups,
             "group_size": self.local_world_size},
        ]

    def _reduce_gradients(self, **kwargs: Any) -> None:
        """Give each shard the averaged gradient of its slice (reduce-scatter)."""
        scheme = self._get_sharding_scheme(kwargs)
        self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
        with_grads = [(p, s) for p, s in self._pairs() if self._has_grad(p, s)]
        grads = [self._padded_grad(p, s) for p, s in with_grads]
        for stage in scheme:
            grads = self._reduce_scatter(grads, stage)
        for (_, shard), grad in zip(with_grads, grads, strict=True):
            shard.grad = grad.to(self.optimizer_dtype)

    def _padded_grad(self, param: torch.Tensor, shard: torch.Tensor) -> torch.Tensor:
        grad = _padded(shard.main_grad if self.use_grad_acc_hook else param.grad,
                       self.local_world_size)
        return grad.to(self.optimizer_dtype) if self.higher_cc_precision else grad

    def _reduce_scatter(self, grads: list[torch.Tensor],
                        stage: dict[str, Any]) -> list[torch.Tensor]:
        args = dict(scale=stage["scale_factor"] / stage["group_size"], scatter_dim=0,
                    shard_count=stage["group_size"], groups=stage["sharding_group"],
                    pin_layout=self.pin_layout)
        if self.coalesce_cc_reduce_scatter and grads:
            return xm.reduce_scatter_bucketized(
                xm.REDUCE_SUM, grads, bucket_cap_mb=self.bucket_cap_mb_reduce_scatter, **args)
        return [xm.reduce_scatter(xm.REDUCE_SUM, g, **args) for g in grads]

    @torch.no_grad()
    def _calc_grad_norm(self, norm_type: float = 2.0) -> torch.Tensor:
        if norm_type != 2.0:
            raise RuntimeError(f"ZeroRedundancyOptimizer clips by the 2-norm only, got "
                               f"norm_type={norm_type}.")
        total = torch.zeros([], dtype=self.optimizer_dtype, device=self.device)
        for group in self.base_optimizer.param_groups:
            for shard in group["params"]:
                if shard.grad is not None:
                    total += (shard.grad * shard.grad).sum()
        xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._sharding_groups,
                      pin_layout=self.pin_layout)
        if self._grad_norm_groups is not None:
            xm.all_reduce(xm.REDUCE_SUM, [total], groups=self._grad_norm_groups,
                          pin_layout=self.pin_layout)
        return torch.pow(total, 1.0 / norm_type)

    @torch.no_grad()
    def _clip_grad_norm(self, max_norm: float, norm_type: float = 2.0) -> None:
        """Scale every shard's gradient so that the global norm is at most `max_norm`."""
        self._grad_norm = self._calc_grad_norm(float(norm_type))
        coefficient = torch.clamp(float(max_norm) / (self._grad_norm + 1e-6), max=1.0)
        for group in self.base_optimizer.param_groups:
            for shard in group["params"]:
                if shard.grad is not None:
                    shard.grad.mul_(coefficient)

    def _update_parameters(self, **kwargs: Any) -> None:
        scheme = self._get_sharding_scheme(kwargs)
        kwargs.pop("sharding_scheme", None)
        self.base_optimizer.step(closure=None, **kwargs)
        self.base_optimizer.zero_grad(set_to_none=True)
        self.allgather_weights_and_update_full_parameter(scheme)
        self._sync_param_groups(self.base_optimizer.param_groups, self.param_groups)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Reduce-scatter the gradients, step the shards, all-gather the parameters."""
        if not self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer was made with lazy_init=True: call "
                               "init_zero() before step().")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._reduce_gradients(**kwargs)
        if self.grad_clipping:
            self._clip_grad_norm(max_norm=self.max_norm)
        self._update_parameters(**kwargs)
        return loss

    @torch.no_grad()
    def allgather_weights_and_update_full_parameter(
        self, sharding_scheme: list[dict[str, Any]] | None = None
    ) -> None:
        """Gather the shards of every parameter that has a gradient into the parameter."""
        scheme = sharding_scheme or self._get_sharding_scheme({})
        pairs = [(p, s) for p, s in self._pairs() if self._has_grad(p, s)]
        parts = [shard.detach().to(param.dtype) for param, shard in pairs]
        for stage in reversed(scheme):
            parts = self._all_gather(parts, stage)
        for (param, _), full in zip(pairs, parts, strict=True):
            param.data.copy_(full[: param.size(0)])

    def _all_gather(self, parts: list[torch.Tensor], stage: dict[str, Any]) -> list[torch.Tensor]:
        groups = stage["sharding_group"]
        if self.coalesce_cc_all_gather and parts:
            return xm.all_gather_bucketized(parts, dim=0, groups=groups, pin_layout=False,
                                            bucket_cap_mb=self.bucket_cap_mb_all_gather)
        return [xm.all_gather(p, dim=0, groups=groups, pin_layout=self.pin_layout)
                for p in parts]

    def zero_grad(self, set_to_none: bool = False) -> None:
        super().zero_grad(set_to_none=set_to_none)
        if self.use_grad_acc_hook:
            for group in self.base_optimizer.param_groups:
                for shard in group["params"]:
                    if hasattr(shard, "main_grad"):
                        shard.main_grad.zero_()

    # --- checkpoints ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The wrapper's state, this replica's shard state (`base_state`), the parameters'
        shapes (`shape_info`) and, with `save_master_weights`, the shards themselves."""
        state = super().state_dict()
        state["base_state"] = self.base_optimizer.state_dict()["state"]
        state["shape_info"] = self.get_shape_info()
        if self.save_master_weights:
            shards = [s for g in self.base_optimizer.param_groups for s in g["params"]]
            state["sharded_master_weights"] = {i: s.data for i, s in enumerate(shards)}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a `state_dict()` of the same replica (its shard state is this replica's)."""
        state_dict = copy.deepcopy(state_dict)
        base_state = state_dict.pop("base_state")
        master_weights = state_dict.pop("sharded_master_weights", None)
        state_dict.pop("shape_info", None)
        super().load_state_dict(state_dict)
        self.init_zero()  # shards the current parameters again
        base = self.base_optimizer.state_dict()
        base["state"] = base_state
        self.base_optimizer.load_state_dict(base)
        if master_weights is not None:
            self._load_master_weights(master_weights)

    def _load_master_weights(self, master_weights: dict[int, torch.Tensor]) -> None:
        with torch.no_grad():
            for index, (param, shard) in enumerate(self._pairs()):
                shard.data.copy_(master_weights[index])
                if self.use_grad_acc_hook:
                    shard.main_grad = torch.zeros(param.shape, dtype=self.optimizer_dtype,
                                                  device=self.device)
                    param.main_grad = shard.main_grad
                else:  # a gradient marks the parameter for the gather below
                    param.grad = torch.zeros_like(param)
        xm.mark_step()
        self.allgather_weights_and_update_full_parameter()
        xm.mark_step()

    def get_shape_info(self) -> dict[int, torch.Size]:
        params = [p for group in self.param_groups for p in group["params"]]
        return {i: p.shape for i, p in enumerate(params)}
