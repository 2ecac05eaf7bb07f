"""`assume_pure`: record a pure PyTorch function once per signature, replay it as one op.

PyTorch/XLA's `torch_xla.experimental.assume_pure`. Lazy mode records every op a step
runs, on every step; for a large model that host work is what the step waits on. A
function decorated with `assume_pure` is recorded the first time it meets a signature
(the shapes, dtypes and device of its tensor arguments, and its other arguments'
values) and kept as one JAX function; every later call records a single node, whatever
the number of ops inside:

    from torch_xla.experimental.assume_pure import assume_pure

    @assume_pure
    def block(params, x):
        return torch.func.functional_call(layer, params, x)

    y = block(dict(layer.named_parameters()), x)    # differentiable: y.sum().backward()

Arguments and results may be any pytree (tuples, lists, dicts) of tensors and other
values. Gradients flow to every tensor argument that requires them: a call that needs
them is recorded under autograd (forward and backward from one run of the function; a
signature first recorded without them runs it once more), so the backward node computes
PyTorch's own gradient formulas (the values a lazy step gives). It keeps only the
arguments; it recomputes the forward, which XLA merges with the forward node's copy
when both are in one program, as in a training step.

"Pure" means: the result depends only on the arguments; the function reads no tensor
value (`.item()`, printing, a branch on data), changes no argument in place, stores no
tensor it computes (module buffers such as batch norm's running statistics), draws no
random numbers and runs no collective. Each of these raises
`torch_xla.lazy.region.ImpureFunctionError` when the function is recorded. Parameters
read from a closure (a module's attributes) are recorded as they are at that moment:
pass them as arguments, as `torch.func.functional_call` does above.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import torch
from torch import nn
from torch.utils import _pytree as pytree

import torch_xla.core.xla_builder as xb
from torch_xla.lazy import region
from torch_xla.lazy.region import ImpureFunctionError

__all__ = ["ImpureFunctionError", "PureModule", "assume_pure", "assume_pure_torch",
           "j2t_autograd"]

_MASK32 = 0xFFFFFFFF


def assume_pure(fn: Callable, *, add_rng_seed_argument: bool = False) -> Callable:
    """`fn`, recorded once per signature and replayed as one XLA computation (see the
    module).

    With `add_rng_seed_argument=True` the returned function takes a keyword argument
    `rng_seed` (an int, or an integer XLA tensor holding one) from which the random ops
    inside draw: the same seed gives the same numbers, another seed others, and the
    backward replays the forward's."""
    # Under torch.compile the call is a graph break: dynamo would otherwise compile `fn`
    # itself when the recording runs it over placeholders.
    return torch._dynamo.disable(_replayed(fn, {}, seeded=add_rng_seed_argument))


def _replayed(fn: Callable, recordings: dict | None, seeded: bool = False) -> Callable:
    """`fn` replayed from its recording for the call's signature, kept in `recordings`
    under (fn, tree, signature); None: recorded afresh on every call."""
    try:
        bind = inspect.signature(fn).bind
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        bind = None
    name = getattr(fn, "__qualname__", None) or type(fn).__name__

    @functools.wraps(fn)
    def pure(*args: Any, **kwargs: Any) -> Any:
        seed = _pop_seed(kwargs, name) if seeded else None
        if bind is not None:
            bound = bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        leaves, spec = pytree.tree_flatten((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        recording = _recording(recordings, fn, name, spec, leaves, seed is not None,
                               wants_grad)
        if seed is not None:
            tensors.append(_seed_key(seed, recording.device))
        if wants_grad:
            recording.record_backward()
            outputs = _PureFunction.apply(recording, *tensors)
        else:
            outputs = recording.call(tensors)
        return recording.result(list(outputs))

    return pure


def _recording(recordings: dict | None, fn: Callable, name: str, spec: Any, leaves: list,
               seeded: bool, wants_grad: bool) -> region.Recording:
    """The kept recording of this call's signature, made (with its backward when
    `wants_grad`) if there is none."""
    if recordings is None:
        return region.Recording(fn, spec, leaves, seeded=seeded, differentiable=wants_grad,
                                kept=False)
    key = (fn, spec, region.signature(leaves))
    try:
        recording = recordings.get(key)
    except TypeError:
        raise TypeError(
            f"assume_pure: an argument of {name} that is not a tensor is not hashable; "
            "non-tensor arguments are part of the recording, so pass hashable ones "
            "(tuples, numbers, strings)."
        ) from None
    if recording is None:
        recording = recordings[key] = region.Recording(fn, spec, leaves, seeded=seeded,
                                                       differentiable=wants_grad)
    return recording


def _pop_seed(kwargs: dict, name: str) -> int | torch.Tensor:
    if "rng_seed" not in kwargs:
        raise TypeError(f"{name} (assume_pure with add_rng_seed_argument=True) needs the "
                        "keyword argument rng_seed: an int the random ops inside draw from")
    seed = kwargs.pop("rng_seed")
    if isinstance(seed, bool) or not isinstance(seed, (int, torch.Tensor)):
        raise TypeError(f"{name}: rng_seed must be an int or an integer tensor, got "
                        f"{type(seed).__name__}")
    return seed


def _seed_key(seed: int | torch.Tensor, device: int) -> torch.Tensor:
    """The raw key (uint32[2]) the seeded recording's random ops fold from."""
    if isinstance(seed, torch.Tensor):
        if seed.dtype.is_floating_point or seed.dtype.is_complex or seed.numel() != 1:
            raise TypeError(f"rng_seed must hold one integer, got a {seed.dtype} tensor of "
                            f"shape {tuple(seed.shape)}")
        seed = seed.reshape(()).to(device=f"xla:{device}", dtype=torch.int64)
        return torch.stack([seed >> 32, seed]).bitwise_and(_MASK32).to(torch.uint32)
    seed = int(seed) & ((1 << 64) - 1)
    key = torch.tensor([seed >> 32, seed & _MASK32], dtype=torch.int64).to(torch.uint32)
    return key.to(f"xla:{device}")


class PureModule(nn.Module):
    """`module` whose forward is known to be pure: recorded once per signature of its
    inputs and replayed as one op (and its backward as another), with the module's current
    parameters and buffers as arguments, so training it updates what the replay reads."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self._module = module
        self._pure_forward = assume_pure(functools.partial(_functional_forward, module))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        params = dict(self._module.named_parameters())
        buffers = dict(self._module.named_buffers())
        return self._pure_forward(params, buffers, args, kwargs)


def _functional_forward(module: nn.Module, params: dict, buffers: dict, args: tuple,
                        kwargs: dict) -> Any:
    return torch.func.functional_call(module, (params, buffers), args, kwargs)


_XLA_COMPUTATION_CACHE: dict[tuple, region.Recording] = {}
"""`assume_pure_torch(use_cache=True)`'s recordings, one per (function, argument tree,
signature); it keeps the functions alive. Clearing it makes the next call record again."""


def assume_pure_torch(func: Callable | None = None, use_cache: bool = False) -> Callable:
    """PyTorch/XLA's forward-only variant of `assume_pure`: call it with autograd off.
    Used as `@assume_pure_torch` or `@assume_pure_torch(use_cache=True)`.

    `use_cache=True`: each signature's recording is kept in `_XLA_COMPUTATION_CACHE` and
    replayed (upstream keys it by the function's name alone, whatever the shapes; here a
    new signature is recorded anew). `use_cache=False`: recorded on every call, so tensors
    read from a closure are read as they are at that call."""
    if func is None:
        return functools.partial(assume_pure_torch, use_cache=use_cache)
    pure = _replayed(func, _XLA_COMPUTATION_CACHE if use_cache else None)

    @functools.wraps(func)
    def forward_only(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            raise RuntimeError(
                f"assume_pure_torch({getattr(func, '__qualname__', func)}) is forward-only: "
                "call it under torch.no_grad(), or use assume_pure, which differentiates."
            )
        return pure(*args, **kwargs)

    return torch._dynamo.disable(forward_only)


def j2t_autograd(fn: Callable) -> Callable:
    """A JAX function `fn` as a differentiable PyTorch function: its arguments may be any
    pytree holding XLA tensors, its result any pytree of floating arrays (returned as XLA
    tensors). Forward and backward are one `call_jax` node each; the backward is JAX's
    `vjp`, its residuals kept as autograd's saved tensors."""

    @functools.wraps(fn)
    def differentiable(*args: Any, **kwargs: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
        spots = tuple(k for k, x in enumerate(leaves) if isinstance(x, torch.Tensor))
        statics = tuple(None if isinstance(x, torch.Tensor) else x for x in leaves)
        box: list = []  # the result's tree, which only the forward learns
        outputs = _JaxFunction.apply(fn, tree, statics, spots, box,
                                     *(leaves[k] for k in spots))
        return jax.tree_util.tree_unflatten(box[0], list(outputs))

    return differentiable


def _jax_forward(fn: Callable, tree: Any, statics: tuple, spots: tuple, wanted: tuple,
                 arrays: tuple) -> tuple:
    def chosen_only(*chosen):
        it = iter(chosen)
        leaves = list(statics)
        for k, a, w in zip(spots, arrays, wanted, strict=True):
            leaves[k] = next(it) if w else a
        args, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
        return fn(*args, **kwargs)

    return jax.vjp(chosen_only, *(a for a, w in zip(arrays, wanted, strict=True) if w))


def _jax_backward(pull: Callable, cotangents: Any) -> tuple:
    return pull(cotangents)


class _JaxFunction(torch.autograd.Function):
    """`j2t_autograd`'s node: the JAX function's forward with its vjp residuals, and the
    vjp as the backward."""

    @staticmethod
    def forward(ctx: Any, fn: Callable, tree: Any, statics: tuple, spots: tuple, box: list,
                *tensors: torch.Tensor) -> tuple:
        wanted = tuple(t.dtype.is_floating_point or t.dtype.is_complex for t in tensors)
        out, pull = xb.call_jax(_jax_forward, (fn, tree, statics, spots, wanted, tensors))
        outputs, out_tree = jax.tree_util.tree_flatten(out)
        for o in outputs:
            if not (o.dtype.is_floating_point or o.dtype.is_complex):
                raise TypeError(f"j2t_autograd: {getattr(fn, '__qualname__', fn)} returned "
                                f"a {o.dtype} array; only floating results are differentiable")
        residuals, ctx.pull_tree = jax.tree_util.tree_flatten(pull)
        ctx.save_for_backward(*residuals)
        ctx.out_tree, ctx.wanted = out_tree, wanted
        box.append(out_tree)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        pull = jax.tree_util.tree_unflatten(ctx.pull_tree, ctx.saved_tensors)
        cotangents = jax.tree_util.tree_unflatten(ctx.out_tree, list(grads))
        found = iter(xb.call_jax(_jax_backward, (pull, cotangents)))
        return (None,) * 5 + tuple(next(found) if w else None for w in ctx.wanted)


class _PureFunction(torch.autograd.Function):
    """A recorded function as an autograd node: forward and backward are one node each."""

    @staticmethod
    def forward(ctx: Any, recording: region.Recording, *tensors: torch.Tensor) -> tuple:
        outputs = recording.call(list(tensors))
        taken = set(recording.grad_outputs)
        ctx.mark_non_differentiable(*(o for k, o in enumerate(outputs) if k not in taken))
        ctx.recording = recording
        ctx.save_for_backward(*tensors)
        return tuple(outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        recording = ctx.recording
        # autograd materializes the gradient of an unused result as zeros
        cotangents = [grads[k] for k in recording.grad_outputs]
        found = recording.pullback(list(ctx.saved_tensors), cotangents)
        return (None, *(g if need else None
                        for g, need in zip(found, ctx.needs_input_grad[1:], strict=True)))
