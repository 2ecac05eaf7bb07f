"""Auto-wrap policies for FSDP (PyTorch/XLA's `torch_xla.distributed.fsdp.wrap`).

A policy is called as `policy(module=, recurse=, unwrapped_params=)`. With
`recurse=True` it says whether to look into `module`'s children; with `recurse=False`
whether to wrap `module` itself (`unwrapped_params`: its parameters not yet wrapped
further down). `recursive_wrap` walks a module tree with one and wraps what it picks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch.nn as nn


def always_wrap_policy(*args: Any, **kwargs: Any) -> bool:
    """Wrap every submodule."""
    return True


def lambda_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                            lambda_fn: Callable[[nn.Module], bool]) -> bool:
    """Always look inside; wrap the modules for which `lambda_fn(module)` is true."""
    return True if recurse else bool(lambda_fn(module))


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                 transformer_layer_cls: Collection[type[nn.Module]]) -> bool:
    """Always look inside; wrap the instances of `transformer_layer_cls` (e.g. the
    decoder layer class), so each layer becomes its own FSDP unit."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, unwrapped_params: int,
                                min_num_params: int = int(1e8),
                                force_leaf_modules: Collection[type[nn.Module]] | None = None,
                                exclude_wrap_modules: Collection[type[nn.Module]] | None = None
                                ) -> bool:
    """Wrap (and look inside) modules holding at least `min_num_params` unwrapped
    parameters; never look inside `force_leaf_modules`, never wrap
    `exclude_wrap_modules` (defaults: the function attributes of the same names)."""
    if force_leaf_modules is None:
        force_leaf_modules = size_based_auto_wrap_policy.FORCE_LEAF_MODULES
    if exclude_wrap_modules is None:
        exclude_wrap_modules = size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES
    if unwrapped_params < min_num_params:
        return False
    avoided = force_leaf_modules if recurse else exclude_wrap_modules
    return not isinstance(module, tuple(avoided))


size_based_auto_wrap_policy.EXCLUDE_WRAP_MODULES = {nn.ModuleList, nn.ModuleDict}
size_based_auto_wrap_policy.FORCE_LEAF_MODULES = {nn.MultiheadAttention}


def _wrap(module: nn.Module, wrapper_cls: Callable, **kwargs: Any) -> nn.Module:
    # A module may carry `_wrap_overrides`: wrapper arguments that win for it alone.
    return wrapper_cls(module, **{**kwargs, **getattr(module, "_wrap_overrides", {})})


def _check_not_wrapped(module: nn.Module, wrapper_cls: Callable,
                       ignored_modules: Collection[nn.Module]) -> None:
    if not isinstance(wrapper_cls, type):
        return  # a factory function: nothing to recognise wrapped modules by
    for name, child in module.named_modules():
        if child not in ignored_modules and isinstance(child, wrapper_cls):
            raise ValueError(f"recursive_wrap: submodule {name or '<root>'!r} is already a "
                             f"{wrapper_cls.__name__}; auto-wrap an unwrapped module tree.")


def recursive_wrap(module: nn.Module, auto_wrap_policy: Callable, wrapper_cls: Callable,
                   ignored_modules: Collection[nn.Module],
                   ignored_params: Collection[nn.Parameter],
                   only_wrap_children: bool = False,
                   **kwargs: Any) -> tuple[nn.Module, int]:
    """Wrap the submodules of `module` that `auto_wrap_policy` picks, deepest first, as
    `wrapper_cls(child, **kwargs)`; `only_wrap_children` leaves `module` itself unwrapped.
    Returns (the module, wrapped or not; the number of parameters wrapped)."""
    if auto_wrap_policy is None or wrapper_cls is None:
        raise ValueError("recursive_wrap: both auto_wrap_policy and wrapper_cls are needed, "
                         f"got {auto_wrap_policy!r} and {wrapper_cls!r}.")
    _check_not_wrapped(module, wrapper_cls, ignored_modules)
    ignored = {id(p) for p in ignored_params}  # by identity: `in` on tensors compares values
    num_params = sum(p.numel() for p in module.parameters() if id(p) not in ignored)
    if not auto_wrap_policy(module=module, recurse=True, unwrapped_params=num_params):
        return module, 0
    wrapped = 0
    for name, child in module.named_children():
        if child in ignored_modules:
            continue
        new_child, count = recursive_wrap(child, auto_wrap_policy, wrapper_cls,
                                          ignored_modules, ignored_params, **kwargs)
        setattr(module, name, new_child)
        wrapped += count
    if not only_wrap_children and auto_wrap_policy(
            module=module, recurse=False, unwrapped_params=num_params - wrapped):
        return _wrap(module, wrapper_cls, **kwargs), num_params
    return module, wrapped
