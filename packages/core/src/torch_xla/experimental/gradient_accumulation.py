"""Gradient accumulation as one XLA While loop, as PyTorch/XLA's
`torch_xla.experimental.gradient_accumulation`.

`gradient_accumulation(train_step, (data, target), model)` records `train_step`
(and its backward) once, over one slice of the iterated tensors, and runs it over
their leading dimension inside a single XLA `while`: the program does not grow
with the number of accumulation steps, and the same step hits the same compiled
program. The engine side is `torch_xla.lazy.loop`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from torch_xla.experimental.eager import eager_mode_context
from torch_xla.lazy import functional, graph, loop, nodes
from torch_xla.lazy.tensor import XLATensor, common_device

__all__ = ["GradientAccumulationContext", "gradient_accumulation"]


@dataclass(frozen=True)
class GradientAccumulationContext:
    """The sizes of one accumulation loop (PyTorch/XLA's name).

    Attributes:
      num_gradient_steps: iterations, the leading dimension of the iterated tensors
      num_iterable_tensors: tensors iterated over
      num_carried_tensors: tensors carried from one iteration to the next
      num_model_params: parameters whose gradients are accumulated
      num_internal_tensors: the loop's own values (iteration counter and loss)
    """

    num_gradient_steps: int
    num_iterable_tensors: int
    num_carried_tensors: int
    num_model_params: int
    num_internal_tensors: int = 2


def gradient_accumulation(
    train_step: Callable[..., Any],
    iterable_tensors: Sequence[torch.Tensor],
    model: torch.nn.Module,
    *carried_tensors: torch.Tensor,
) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Accumulate `model`'s gradients over the leading dimension of `iterable_tensors`
    in one XLA While loop.

    `train_step(*slices, *carried)` gets one slice of each iterable tensor (without the
    leading dimension) and the carried tensors, passed unpacked after `model`; it returns
    the loss, or `(loss, *new_carried)` when carried tensors are given. Each loss is
    divided by the number of steps and back-propagated inside the loop; the parameters'
    `.grad` then hold their previous value (zero if None) plus the gradients of all
    steps. A parameter the step does not use keeps its `.grad` as it was.

    The step is recorded once, not run step by step: it must not read values (`.item()`,
    printing, syncing), nor update tensors in place (its inputs and the parameters raise
    AssertionError, buffers such as batch norm's running statistics
    NotImplementedError); random ops draw other numbers at every step.

    Returns the summed (so averaged) loss, or `(loss, *carried)` with carried tensors.
    """
    _check_iterables(iterable_tensors)
    _check_carried(carried_tensors)
    steps = iterable_tensors[0].size(0)
    result = _accumulate(steps, train_step, list(iterable_tensors), model, carried_tensors)
    return result if carried_tensors else result[0]


def _check_iterables(iterable_tensors: Sequence[torch.Tensor]) -> None:
    if not iterable_tensors:
        raise ValueError("iterable_tensors cannot be empty")
    steps = iterable_tensors[0].size(0) if isinstance(iterable_tensors[0], torch.Tensor) else 0
    for i, t in enumerate(iterable_tensors):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"Element {i} of iterable_tensors is not a tensor: {type(t).__name__}")
        if t.numel() == 0:
            raise ValueError(f"Element {i} of iterable_tensors is empty (shape {tuple(t.shape)})")
        if t.size(0) != steps:
            raise ValueError(f"Element {i} of iterable_tensors has inconsistent first dimension: "
                             f"{t.size(0)}, while element 0 has {steps}")


def _check_carried(carried_tensors: tuple) -> None:
    for i, t in enumerate(carried_tensors):
        if isinstance(t, (tuple, list)):
            raise TypeError(
                f"carried tensor {i} is a {type(t).__name__}: carried tensors are passed "
                "unpacked after the model, as in PyTorch/XLA: write "
                "gradient_accumulation(train_step, iterables, model, *carried)")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"carried tensor {i} is not a tensor: {type(t).__name__}")


def _accumulate(steps: int, train_step: Callable, iterables: list[torch.Tensor],
                model: torch.nn.Module, carried: tuple) -> tuple:
    params = [p for p in model.parameters() if p.requires_grad]
    device = common_device([*iterables, *carried, *params])
    state = _ModelState.of(model)
    try:
        with eager_mode_context(False) as was_eager:  # the step is recorded, never run
            outs, trained = _loop(steps, train_step, iterables, carried, params, state, device)
    except BaseException:
        loop.discard_recorded()
        _restore([*state.params, *state.buffers])
        raise
    if was_eager:
        graph.materialize(outs)
    n = 1 + len(carried)
    for p, grad in zip(trained, outs[n:], strict=True):
        p.grad = functional.wrap(grad)
    return tuple(functional.wrap(t) for t in outs[:n])


def _loop(steps: int, train_step: Callable, iterables: list[torch.Tensor], carried: tuple,
          params: list[torch.Tensor], state: _ModelState,
          device: int) -> tuple[list[XLATensor], list]:
    """The loop's outputs (loss, carried, gradients) and the parameters those gradients
    belong to (the ones the step gave a gradient)."""
    slots = [loop.placeholder(t.shape[1:], t.dtype, device) for t in iterables]
    slots += [loop.placeholder(t.shape, t.dtype, device) for t in carried]
    loss, carried_out, grads = _record_step(steps, train_step, slots, carried, params, state)
    used = [i for i, g in enumerate(grads) if g is not None]
    outs = loop.accumulation_loop(
        steps, slots, [functional.unwrap(t) for t in iterables],
        [functional.unwrap(t) for t in carried],
        [_initial_grad(params[i], device) for i in used],
        loss, carried_out, [grads[i] for i in used])
    recorded = [loss, *carried_out, *(grads[i] for i in used)]
    del loss, carried_out, grads
    loop.forget_recorded(recorded)
    return outs, [params[i] for i in used]


def _record_step(steps: int, train_step: Callable, slots: list[XLATensor], carried: tuple,
                 params: list[torch.Tensor], state: _ModelState) -> tuple:
    """Run `train_step` and its backward over the placeholders `slots`; the engine tensors
    of the loss (divided by `steps`), the new carried values and each parameter's
    gradient (None where the step gave none). The parameters' `.grad` are left as found."""
    inputs = [functional.wrap(s) for s in slots]
    n_iterables = len(inputs) - len(carried)
    for t, c in zip(inputs[n_iterables:], carried, strict=True):
        t.requires_grad_(c.requires_grad)
    names = ([f"the slice of iterable tensor {i}" for i in range(n_iterables)]
             + [f"carried tensor {i}" for i in range(len(carried))])
    before = _snapshot(zip(names, inputs, strict=True))
    saved = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        result = train_step(*inputs)
        _check_not_updated([*before, *state.params], state.buffers)
        loss, carried_out = _results(result, carried)
        loss = loss / steps
        if loss.requires_grad:
            torch.autograd.backward(loss)
        grads = [None if p.grad is None else functional.unwrap(p.grad) for p in params]
    finally:
        for p, g in zip(params, saved, strict=True):
            p.grad = g
    return functional.unwrap(loss), [functional.unwrap(t) for t in carried_out], grads


# --- the step may not update its inputs, the parameters or the buffers in place -------


@dataclass(frozen=True)
class _Before:
    """A tensor as it was before the step."""

    name: str  # how an error message names it
    tensor: torch.Tensor
    inner: XLATensor  # the engine tensor it held
    value: tuple  # that engine tensor's value
    version: int  # torch's count of in-place updates to `tensor`


@dataclass(frozen=True)
class _ModelState:
    """The model's parameters and buffers before the step."""

    params: list[_Before]
    buffers: list[_Before]

    @classmethod
    def of(cls, model: torch.nn.Module) -> _ModelState:
        return cls(_snapshot((f"parameter {n!r}", p) for n, p in model.named_parameters()),
                   _snapshot((f"buffer {n!r}", b) for n, b in model.named_buffers()))


def _snapshot(named: Iterable[tuple[str, torch.Tensor]]) -> list[_Before]:
    """The XLA tensors among `named` as they are now (the step does not record the others)."""
    out = []
    for name, t in ((n, t) for n, t in named if t.device.type == "xla"):
        inner = functional.unwrap(t)
        out.append(_Before(name, t, inner, inner.value, t._version))
    return out


def _updated(before: list[_Before]) -> list[str]:
    return [b.name for b in before if b.tensor._version != b.version]


def _check_not_updated(inputs_and_params: list[_Before], buffers: list[_Before]) -> None:
    """Raise where the step updated a tensor in place: the loop passes on only what the step
    returns, so the update would be lost, or made once instead of at every step.
    AssertionError for an input or a parameter, as PyTorch/XLA."""
    updated = _updated(inputs_and_params)
    if updated:
        raise AssertionError(
            f"gradient_accumulation: train_step updated {', '.join(updated)} in place. The "
            "step is recorded once and runs inside one XLA While loop that passes from one "
            "step to the next only what the step returns, so the update would be lost or "
            "made once. Compute a new tensor instead (`counter = counter + 1`, not "
            "`counter += 1`) and return it as a carried tensor; update parameters after the "
            "call (the optimizer's step).")
    updated = _updated(buffers)
    if updated:
        raise NotImplementedError(
            f"gradient_accumulation: train_step updates buffers in place ({', '.join(updated)}"
            "), e.g. batch norm's running statistics in training mode. The loop returns only "
            "the loss, the carried tensors and the parameters' gradients, so it cannot carry "
            "them: put such modules in eval mode, or pass the state as carried tensors and "
            "return its new value.")


def _restore(before: list[_Before]) -> None:
    """Point each tensor back at its value before a step that failed (an update inside the
    step left it computed from the loop's placeholders, which have no value)."""
    for b in before:
        b.inner._set(*b.value)
        if functional.unwrap(b.tensor) is not b.inner:  # an in-place op swapped it
            torch._functionalize_replace(b.tensor, b.inner)
            torch._functionalize_commit_update(b.tensor)


def _results(result: Any, carried: tuple) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(loss, new carried tensors) from what the step returned, checked against `carried`."""
    if carried:
        if not isinstance(result, (tuple, list)) or len(result) != 1 + len(carried):
            raise ValueError(
                f"train_step must return (loss, *carried) with {len(carried)} carried "
                f"tensor(s), got {type(result).__name__}"
                + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""))
        loss, *carried_out = result
    else:
        loss, carried_out = result, []
    if not isinstance(loss, torch.Tensor) or loss.device.type != "xla":
        raise ValueError(f"train_step must return the loss as an XLA tensor, got {loss!r:.80}")
    for i, (new, old) in enumerate(zip(carried_out, carried, strict=True)):
        if not isinstance(new, torch.Tensor) or (new.shape, new.dtype) != (old.shape, old.dtype):
            got = (f"shape {tuple(new.shape)} and dtype {new.dtype}"
                   if isinstance(new, torch.Tensor) else type(new).__name__)
            raise ValueError(
                f"carried tensor {i} returned by train_step has {got}, but it came in with "
                f"shape {tuple(old.shape)} and dtype {old.dtype}: a carried tensor keeps its "
                "shape and dtype from one step to the next")
    return loss, carried_out


def _initial_grad(p: torch.Tensor, device: int) -> XLATensor:
    """What the accumulation starts from: the parameter's gradient, zero if it has none."""
    if p.grad is not None:
        return functional.unwrap(p.grad)
    return nodes.full(tuple(p.shape), p.dtype, 0, device)
