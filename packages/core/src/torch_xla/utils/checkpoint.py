"""Activation checkpointing on XLA devices, as PyTorch/XLA's `torch_xla.utils.checkpoint`.

`torch.utils.checkpoint` alone is not enough on XLA: forward and backward land in one
graph, so XLA's common-subexpression elimination merges the recomputed forward with
the original one and keeps every activation alive, undoing the checkpoint. Here the
recomputation reads its inputs (and, reentrant, the incoming gradients; and the
parameters and buffers of the module whose method is checkpointed) through an
XLA optimization barrier, which XLA does not look through: the recomputed ops have
other operands, nothing is merged, and the recomputation runs in backward.

The random ops of the recomputation take the same keys as in the forward (dropout
masks match) when `preserve_rng_state`: the engine's RNG position (state and the
current sync's seed and count, `lazy/rng.py`) and the CPU generator are replayed.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch.utils.checkpoint import check_backward_validity, noop_context_fn

import torch_xla.core.xla_model as xm
from torch_xla.lazy import rng
from torch_xla.lazy.tensor import device_index

__all__ = ["CheckpointFunction", "checkpoint", "checkpoint_sequential"]

_DEFAULT_DETERMINISM_MODE = "default"
_AUTOCAST_DEVICES = ("xla", "cpu")


def _is_xla(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


# --- the random state a checkpointed function saw --------------------------------------


def _rng_devices(args: Sequence[Any]) -> list[int]:
    """The XLA devices whose random ops the function may use: its inputs' and the
    thread's current one."""
    found = {device_index(None)}
    found.update(t.device.index for t in args if _is_xla(t))
    return sorted(found)


def _rng_snapshot(args: Sequence[Any]) -> tuple:
    return torch.get_rng_state(), {d: rng.snapshot(d) for d in _rng_devices(args)}


@contextlib.contextmanager
def _replayed_rng(saved: tuple | None) -> Iterator[None]:
    """Random ops inside the block take the keys they took when `saved` was taken; the
    surrounding random state is back afterwards. `None`: nothing is replayed."""
    if saved is None:
        yield
        return
    cpu_state, xla_states = saved
    current = {d: rng.snapshot(d) for d in xla_states}
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(cpu_state)
        for d, state in xla_states.items():
            rng.restore(d, state)
        try:
            yield
        finally:
            for d, state in current.items():
                rng.restore(d, state)


# --- the optimization barrier on the recomputation's inputs -----------------------------


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """A new leaf holding `t`'s value (the barrier rewrites it in place, not `t`)."""
    return t.detach().clone()


def _module_state(function: Callable) -> list[torch.Tensor]:
    """The XLA parameters and buffers of the module whose bound method `function` is."""
    module = getattr(function, "__self__", None)
    if not isinstance(module, torch.nn.Module):
        return []
    return [t for t in (*module.parameters(), *module.buffers()) if _is_xla(t)]


def _behind_barrier(values: Sequence[Any], state: Sequence[torch.Tensor] = ()) -> list[Any]:
    """`values` with every XLA tensor replaced by a fresh leaf that takes its value through
    one optimization barrier shared by all of them; requires_grad is kept. The module
    `state` (parameters, buffers) passes the same barrier in place, as in PyTorch/XLA:
    the recomputation then shares no operand with the forward at all."""
    out = [_fresh(v) if _is_xla(v) else v for v in values]
    xla = [v for v in out if _is_xla(v)]
    if xla:
        xm.optimization_barrier_([*xla, *state])
    for new, old in zip(out, values, strict=True):
        if _is_xla(new) and old.requires_grad:
            new.requires_grad_(True)
    return out


def _autocast_state() -> dict[str, dict]:
    return {
        d: {"enabled": torch.is_autocast_enabled(d), "dtype": torch.get_autocast_dtype(d),
            "cache_enabled": torch.is_autocast_cache_enabled()}
        for d in _AUTOCAST_DEVICES
    }


@contextlib.contextmanager
def _autocast(state: dict[str, dict]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for device, kwargs in state.items():
            stack.enter_context(torch.autocast(device, **kwargs))
        yield


def _tensors(outputs: Any) -> tuple:
    return (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)


# --- reentrant checkpointing ------------------------------------------------------------


class CheckpointFunction(torch.autograd.Function):
    """Runs `run_function` without autograd in forward and again, with autograd, in
    backward, behind an optimization barrier with the incoming gradients."""

    @staticmethod
    def forward(ctx, run_function: Callable, preserve_rng_state: bool, *args: Any) -> Any:
        check_backward_validity(args)
        ctx.run_function = run_function
        ctx.rng = _rng_snapshot(args) if preserve_rng_state else None
        ctx.autocast = _autocast_state()
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ctx.inputs = [None if isinstance(a, torch.Tensor) else a for a in args]
        ctx.save_for_backward(*(args[i] for i in ctx.tensor_indices))
        with torch.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grad_outputs: Any) -> tuple:
        if not torch.autograd._is_checkpoint_valid():
            raise RuntimeError(
                "Reentrant checkpointing works with .backward() only, not with "
                "torch.autograd.grad() or .backward(inputs=...). Use .backward() without "
                "`inputs`, or checkpoint(..., use_reentrant=False)."
            )
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors, strict=True):
            inputs[i] = t
        # One barrier over inputs and gradients: the recomputation can start only once
        # backward reached it, and shares no operand with the forward.
        fenced = _behind_barrier([*inputs, *grad_outputs], _module_state(ctx.run_function))
        inputs, grad_outputs = fenced[: len(inputs)], fenced[len(inputs):]
        # Leaves of their own for the other tensors too (CPU ones): the gradients below
        # must not accumulate into the caller's tensors as well as being returned.
        inputs = [t.detach().requires_grad_(t.requires_grad)
                  if isinstance(t, torch.Tensor) and not _is_xla(t) else t for t in inputs]
        with _replayed_rng(ctx.rng), torch.enable_grad(), _autocast(ctx.autocast):
            outputs = _tensors(ctx.run_function(*inputs))
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs, strict=False)
                 if isinstance(o, torch.Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError(
                "none of the checkpointed function's outputs requires grad, so checkpoint() "
                "is not needed here: call the function directly"
            )
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        grads = tuple(t.grad if isinstance(t, torch.Tensor) else None for t in inputs)
        return (None, None, *grads)


# --- non-reentrant checkpointing --------------------------------------------------------


class _Recomputable:
    """`function` for `torch.utils.checkpoint`'s non-reentrant checkpoint: the first call
    is the forward; every later call is a recomputation, which reads its inputs through
    an optimization barrier and replays the forward's random state."""

    def __init__(self, function: Callable, preserve_rng_state: bool) -> None:
        self.function = function
        self.preserve_rng_state = preserve_rng_state
        self.rng: tuple | None = None
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            if self.preserve_rng_state:
                self.rng = _rng_snapshot(args)
            return self.function(*args, **kwargs)
        with _replayed_rng(self.rng):
            return self.function(*_behind_barrier(args, _module_state(self.function)),
                                 **kwargs)


# --- public API ---------------------------------------------------------------------------


def checkpoint(
    function: Callable,
    *args: Any,
    use_reentrant: bool | None = None,
    context_fn: Callable[[], tuple[Any, Any]] = noop_context_fn,
    determinism_check: str = _DEFAULT_DETERMINISM_MODE,
    debug: bool = False,
    **kwargs: Any,
) -> Any:
    """Run `function(*args)` without keeping its activations; backward recomputes them.

    As `torch.utils.checkpoint.checkpoint`, with the recomputation kept apart from the
    forward on XLA (see the module docstring). `preserve_rng_state` (a keyword, default
    True) replays the forward's random numbers in the recomputation. `use_reentrant`
    defaults to True with a warning, as in PyTorch/XLA; `context_fn`, `debug` and extra
    keyword arguments for `function` need `use_reentrant=False`.
    """
    if use_reentrant is None:
        warnings.warn(
            "torch_xla.utils.checkpoint: use_reentrant was not passed, so it defaults to "
            "True; pass use_reentrant=True or False explicitly to silence this warning.",
            stacklevel=2,
        )
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if not use_reentrant:
        return torch_checkpoint.checkpoint(
            _Recomputable(function, preserve), *args, use_reentrant=False,
            context_fn=context_fn, determinism_check=determinism_check, debug=debug,
            preserve_rng_state=False,  # replayed by _Recomputable, XLA's RNG included
            **kwargs,
        )
    if kwargs:
        raise ValueError(f"Unexpected keyword arguments {sorted(kwargs)}: reentrant "
                         "checkpoint passes only positional arguments to the function; use "
                         "use_reentrant=False to pass keyword arguments.")
    if context_fn is not noop_context_fn or debug:
        raise ValueError("Passing `context_fn` or `debug` is only supported when "
                         "use_reentrant=False.")
    return CheckpointFunction.apply(function, preserve, *args)


def checkpoint_sequential(
    functions: torch.nn.Sequential | Sequence[Callable],
    segments: int,
    input: torch.Tensor,
    use_reentrant: bool | None = None,
    **kwargs: Any,
) -> Any:
    """Run `functions` one after another in `segments` chunks, each checkpointed except the
    last (whose activations backward needs at once), as `torch.utils.checkpoint`'s."""
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError(f"Unexpected keyword arguments {sorted(kwargs)}; checkpoint_sequential "
                         "takes only preserve_rng_state and use_reentrant.")
    if isinstance(functions, torch.nn.Sequential):
        functions = list(functions.children())
    functions = list(functions)
    if segments < 1:
        raise ValueError(f"segments must be at least 1, got {segments}")
    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(_run_range(functions, start, end), input,
                           use_reentrant=use_reentrant, preserve_rng_state=preserve)
    return _run_range(functions, end + 1, len(functions) - 1)(input)


def _run_range(functions: list[Callable], start: int, end: int) -> Callable:
    def forward(x: Any) -> Any:
        for fn in functions[start:end + 1]:
            x = fn(x)
        return x

    return forward
