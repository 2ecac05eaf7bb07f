"""A pure PyTorch function recorded once per signature, as one JAX function.

`torch_xla.experimental.assume_pure` makes a `Recording` the first time a function meets a
signature (its arguments' tree, non-tensor values, tensor shapes, dtypes and device).
The function runs once on placeholders (leaves with a shape and no value), so its ops
record IR as a step would; `compiler.graph_function` turns that IR into one JAX
function of the placeholders and of the device data the function read besides them (its
constants: lifted scalars, tensors it made from host data, and, with a warning, tensors
it read from a closure). Every later call with that signature records a single `call_jax` node
of that JAX function (`jax_call.py`) instead of one node per op, which is what makes
it cheap: the host cost no longer grows with the number of ops inside.

The backward is recorded with autograd on and the results' cotangents as further
placeholders: `torch.autograd.grad` records PyTorch's own backward formulas, the same IR a
lazy step records, and they become the backward's JAX function. When the first call of a
signature wants gradients, one run of the function under autograd gives both JAX functions
(the function is traced once); a signature first met without gradients runs the function
once more, under autograd, when a later call wants them. The backward recomputes the
forward from the arguments, so nothing else is kept for it; when forward and backward land
in one program (a training step) the two copies of the forward are the same HLO, which
XLA's common-subexpression pass merges.

What "pure" has to mean for the recording to stay true, each checked with a clear
error: the function reads no tensor value (`.item()`, printing, a data-dependent
branch), changes no argument in place, keeps no tensor computed from its arguments
(a module buffer, a global), draws no random numbers unless seeded (the recording would
replay the same ones) and runs no collective.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from torch_xla.lazy import (
    compiler,
    dump,
    eager,
    functional,
    graph,
    ir,
    jax_call,
    loop,
    rng,
    sharding,
    tensor,
)
from torch_xla.lazy.tensor import XLATensor, device_mismatch_error, not_xla_error

PURE_INPUT_OP = "xla::pure_function_input"

_TENSOR = object()  # a tensor's place among a pytree's leaves


class ImpureFunctionError(RuntimeError):
    """A function given to `assume_pure` did something a recording cannot replay."""


class PureInput(loop.Placeholder):
    """An argument of a pure function while the function is recorded: it has no value."""

    __slots__ = ()

    def __init__(self, aval: ir.Aval, device: int) -> None:
        ir.NoBuffer.__init__(self, PURE_INPUT_OP, aval, device)

    def missing(self) -> Exception:
        return ImpureFunctionError(
            "assume_pure: the function read the value of a tensor computed from its "
            "arguments (.item(), .cpu(), print, or a branch on a tensor's value). It is "
            "recorded once per signature and replayed as one XLA computation, so no value "
            "exists while it is recorded: keep such reads outside the function."
        )


class Traced:
    """A recorded graph as a JAX function of its placeholders' arrays, then of the arrays
    of the device data it captured (lifted scalars, tensors the function made)."""

    __slots__ = ("fn", "constants")

    def __init__(self, fn: Callable, constants: list[XLATensor]) -> None:
        self.fn = fn
        self.constants = constants

    def call(self, tensors: tuple, name: str) -> tuple:
        """The graph's results for `tensors`, recorded as one node."""
        return jax_call.call(_apply, (self.fn, tensors, tuple(self.constants)), name=name)


def _apply(fn: Callable, tensors: tuple, constants: tuple) -> tuple:
    return fn(*tensors, *constants)


class Recording:
    """One signature of a pure function: its forward (and, once gradients are asked for,
    its backward) as JAX functions, and how to rebuild its result."""

    __slots__ = ("fn", "spec", "seeded", "slots", "avals", "device", "name", "forward",
                 "out_spec", "out_slots", "out_avals", "backward", "grad_outputs",
                 "grad_inputs")

    def __init__(self, fn: Callable, spec: Any, leaves: list, seeded: bool = False,
                 differentiable: bool = False, kept: bool = True) -> None:
        """`seeded`: the random ops inside draw from a key passed as one more tensor
        argument, after the others (`assume_pure(..., add_rng_seed_argument=True)`).
        `differentiable`: gradients are wanted now, so the forward and the backward are
        recorded from one run of the function. `kept`: the recording is replayed by later
        calls (so tensors the function reads from a closure are fixed: warned about)."""
        self.fn, self.spec, self.seeded = fn, spec, seeded
        self.name = getattr(fn, "__qualname__", None) or type(fn).__name__
        self.slots = []  # the leaves, _TENSOR where a tensor argument goes
        self.avals: list[ir.Aval] = []
        self.device = None
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                self.slots.append(leaf)
                continue
            if leaf.device.type != "xla":
                raise not_xla_error(leaf)
            index = tensor.device_index(leaf.device)
            if self.device is None:
                self.device = index
            elif index != self.device:
                raise device_mismatch_error(self.device, index)
            self.slots.append(_TENSOR)
            self.avals.append((tuple(leaf.shape), leaf.dtype))
        if self.device is None:
            self.device = tensor.device_index(None)
        if seeded:
            self.avals.append(rng.KEY_AVAL)
        self.backward: Traced | None = None
        self.grad_outputs: tuple[int, ...] = ()  # the results that take a cotangent
        self.grad_inputs: tuple[int, ...] = ()  # the arguments the backward returns for
        held = {id(t._node) for t in tensor.live_tensors()}  # what existed before the call
        if differentiable:
            self._record_both()
        else:
            self._record_forward()
        if kept:
            _warn_captured(self.name, [t._node for t in self.forward.constants], held)

    def call(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The function's result tensors, recorded as one node on `tensors`."""
        return list(self.forward.call(tuple(tensors), self.name))

    def record_backward(self) -> None:
        """Record the backward (once) of a recording made without gradients: the
        function runs once more, under autograd."""
        if self.backward is not None:
            return
        wrappers, placeholders = self._placeholders(self.avals)
        with _recording(), self._keys_from(placeholders):
            floating = self._differentiable(wrappers)
            with torch.enable_grad():
                outputs = [x for x in pytree.tree_leaves(self._run(wrappers))
                           if isinstance(x, torch.Tensor)]
            grads, cot_placeholders = self._gradients(outputs, wrappers, floating)
            for t in outputs:  # the forward's results: only the gradients are kept
                tensor.uninitialized(functional.unwrap(t))
            # the user tensors may hold views' bases alive: drop them before the escape check
            del outputs, wrappers
            self.backward = self._function(grads, placeholders + cot_placeholders,
                                           self._seed_of(placeholders))
            # not checked: the forward's recording already checked the function
            loop.forget_results(grads, PureInput)
            loop.discard_recorded(PureInput)

    def pullback(self, tensors: list[torch.Tensor], cotangents: list[torch.Tensor]) -> list:
        """The gradient of each argument (None where it has none), given the cotangents of
        the results in `grad_outputs`: one node."""
        found = iter(self.backward.call((*tensors, *cotangents), f"{self.name}.backward"))
        grads: list = [None] * len(tensors)
        for k in self.grad_inputs:
            grads[k] = next(found)
        return grads

    def result(self, outputs: list[torch.Tensor]) -> Any:
        it = iter(outputs)
        return pytree.tree_unflatten(
            [next(it) if s is _TENSOR else s for s in self.out_slots], self.out_spec)

    # --- recording ---------------------------------------------------------------

    def _record_forward(self) -> None:
        wrappers, placeholders = self._placeholders(self.avals)
        with _recording(), self._keys_from(placeholders):
            with torch.no_grad():
                result = self._run(wrappers)
            outputs, self.out_spec, self.out_slots = self._results(result)
            del result  # may hold views' bases alive: dropped before the escape check
            _check_arguments_unchanged(self.name, wrappers, placeholders)
            del wrappers  # an argument laid out inside (mark_sharding) holds its constraint
            self.out_avals = [t._node.avals[t._index] for t in outputs]
            self.forward = self._function(outputs, placeholders, self._seed_of(placeholders))
            _forget(self.name, outputs)

    def _record_both(self) -> None:
        """Forward and backward from one run of the function under autograd: the forward
        is what its results were computed from, the backward what `autograd.grad` added."""
        try:
            self._record_under_autograd()
        except ImpureFunctionError:
            raise
        except Exception:
            # Autograd refuses some impurities before the checks here see them (an argument
            # that requires grad changed in place): recording without autograd names the
            # impurity; if it finds none, autograd's error stands.
            self._record_forward()
            raise

    def _record_under_autograd(self) -> None:
        wrappers, placeholders = self._placeholders(self.avals)
        with _recording(), self._keys_from(placeholders):
            floating = self._differentiable(wrappers)
            with torch.enable_grad():
                result = self._run(wrappers)
            outputs, self.out_spec, self.out_slots = self._results(result)
            _check_arguments_unchanged(self.name, wrappers, placeholders)
            self.out_avals = [t._node.avals[t._index] for t in outputs]
            returned = [x for x in pytree.tree_leaves(result) if isinstance(x, torch.Tensor)]
            grads, cot_placeholders = self._gradients(returned, wrappers, floating)
            # autograd's graph and the user tensors may hold views' bases alive: dropped
            # before the escape check
            del result, returned, wrappers
            seed = self._seed_of(placeholders)
            self.forward = self._function(outputs, placeholders, seed)
            self.backward = self._function(grads, placeholders + cot_placeholders, seed)
            _forget(self.name, outputs + grads)

    def _differentiable(self, wrappers: list) -> list[int]:
        """Make the floating arguments require grad (whichever the caller's do: the
        backward serves every call of the signature); their indices."""
        floating = [k for k, (_, dtype) in enumerate(self.avals)
                    if dtype.is_floating_point or dtype.is_complex]
        for k in floating:
            wrappers[k].requires_grad_(True)
        return floating

    def _gradients(self, outputs: list[torch.Tensor], wrappers: list,
                   floating: list[int]) -> tuple[list[XLATensor], list]:
        """PyTorch's gradients of the arguments in `floating` for the cotangents (new
        placeholders, returned) of the results that depend on them; sets `grad_outputs`
        and `grad_inputs`."""
        self.grad_outputs = tuple(k for k, t in enumerate(outputs) if t.requires_grad)
        cotangents, cot_placeholders = self._placeholders(
            [self.out_avals[k] for k in self.grad_outputs])
        grads = torch.autograd.grad(
            [outputs[k] for k in self.grad_outputs], [wrappers[k] for k in floating],
            cotangents, allow_unused=True) if self.grad_outputs else [None] * len(floating)
        self.grad_inputs = tuple(k for k, g in zip(floating, grads, strict=True)
                                 if g is not None)
        return [functional.unwrap(g) for g in grads if g is not None], cot_placeholders

    def _placeholders(self, avals: list) -> tuple[list, list]:
        placeholders = [PureInput(aval, self.device) for aval in avals]
        return [functional.wrap(XLATensor(p)) for p in placeholders], placeholders

    @contextlib.contextmanager
    def _keys_from(self, placeholders: list):
        """While the function records, a seeded recording's random ops take their keys
        from its last placeholder (the seed argument), as the first ops after a sync."""
        if not self.seeded:
            yield
            return
        saved = rng.snapshot(self.device)
        rng.restore(self.device, (saved[0], (self._seed_of(placeholders), 0)))
        try:
            yield
        finally:
            rng.restore(self.device, saved)

    def _run(self, wrappers: list) -> Any:
        it = iter(wrappers)
        args, kwargs = pytree.tree_unflatten(
            [next(it) if s is _TENSOR else s for s in self.slots], self.spec)
        return self.fn(*args, **kwargs)

    def _results(self, result: Any) -> tuple[list[XLATensor], Any, list]:
        leaves, out_spec = pytree.tree_flatten(result)
        outputs, out_slots = [], []
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                out_slots.append(leaf)
                continue
            if leaf.device.type != "xla":
                raise ImpureFunctionError(
                    f"assume_pure: {self.name} returned a tensor on {leaf.device}; a pure "
                    "function's tensors must all be XLA tensors")
            # an XLAShardedTensor (mark_sharding's result) holds the tensor it describes
            outputs.append(functional.unwrap(getattr(leaf, "global_tensor", leaf)))
            out_slots.append(_TENSOR)
        return outputs, out_spec, out_slots

    def _seed_of(self, placeholders: list) -> PureInput | None:
        """The placeholder of the seed argument (the last of the arguments' ones)."""
        return placeholders[len(self.avals) - 1] if self.seeded else None

    def _function(self, outputs: list[XLATensor], placeholders: list,
                  seed: PureInput | None) -> Traced:
        """`outputs` (computed over `placeholders`) as a JAX function."""
        values = [t.value for t in outputs]
        order, position, leaves, _ = graph.walk(values)
        _check_replayable(self.name, order, seed)
        constants = [n for n in leaves if type(n) is not PureInput]
        fn = compiler.graph_function(order, position, [*placeholders, *constants], values)
        return Traced(fn, [XLATensor(n) for n in constants])


def _warn_captured(name: str, constants: list[ir.Data], held: set[int]) -> None:
    """Warn about tensors the function read without taking them as arguments (a closure's
    module parameters): the recording keeps their values of now, whatever happens later."""
    captured = [n for n in constants if id(n) in held and n.avals[0][0]]
    if captured:
        shapes = ", ".join(str(tuple(n.avals[0][0])) for n in captured[:3])
        warnings.warn(
            f"assume_pure: {name} reads {len(captured)} tensor(s) it does not take as "
            f"arguments (shapes {shapes}{', ...' if len(captured) > 3 else ''}). Their "
            "current values are fixed into the recording: if they change (parameters an "
            "optimizer updates), pass them as arguments, e.g. with torch.func.functional_call "
            "or PureModule.", stacklevel=5)


@contextlib.contextmanager
def _recording():
    """Ops record (eager mode off) while a function runs over placeholders; on failure,
    nothing computed from a placeholder is left for a sync to read."""
    with eager.disabled():
        try:
            yield
        except BaseException:
            loop.discard_recorded(PureInput)
            raise


def signature(leaves: list) -> tuple:
    """What decides a recording: the non-tensor leaves and each tensor's shape, dtype and
    device (the caller adds the pytree spec)."""
    return tuple((tuple(x.shape), x.dtype, x.device) if isinstance(x, torch.Tensor)
                 else (type(x), x) for x in leaves)


def _check_arguments_unchanged(name: str, wrappers: list, placeholders: list) -> None:
    for k, (wrapper, placeholder) in enumerate(zip(wrappers, placeholders, strict=True)):
        node = functional.unwrap(wrapper)._node
        if node.op == sharding.CONSTRAINT_OP and node.inputs[0][0] is placeholder:
            continue  # only laid out (mark_sharding): a constraint inside the recording
        if node is not placeholder:
            raise ImpureFunctionError(
                f"assume_pure: {name} changed its tensor argument {k} in place. A pure "
                "function's recording cannot write to its caller's tensors: return the new "
                "value instead (`y = x + 1`, not `x.add_(1)`)."
            )


def _check_replayable(name: str, order: list[ir.Node], seed: PureInput | None) -> None:
    for n in order:
        if n.op == rng.KEY_OP and (seed is None or n.inputs[0][0] is not seed):
            raise ImpureFunctionError(
                f"assume_pure: {name} draws random numbers (dropout, torch.rand...). Its "
                "recording would replay the same numbers on every call: decorate it with "
                "assume_pure(fn, add_rng_seed_argument=True) and pass rng_seed=, or make "
                "the random tensors outside and pass them in. (torch.manual_seed inside "
                "the function is not supported.)"
            )
        if getattr(n.rule, "collective", False):
            raise ImpureFunctionError(
                f"assume_pure: {name} runs a collective ({dump.op_name(n.op)}); collectives "
                "inside a pure function are not supported: call them outside it."
            )


def _forget(name: str, outputs: list[XLATensor]) -> None:
    """Leave the recorded tensors out of syncs; fail if the function kept one elsewhere."""
    found = loop.forget_results(outputs, PureInput)
    if found:
        t = found[0]
        raise ImpureFunctionError(
            f"assume_pure: after {name} returned, {len(found)} live tensor(s) hold values "
            f"computed from its arguments that it did not return, e.g. one of shape "
            f"{tuple(t.shape)} (from {dump.op_name(t._node.op)}): the function stored them "
            "(a module buffer such as batch norm's running statistics, a global, a list "
            "it appends to). A pure function may only return what it computes."
        )
