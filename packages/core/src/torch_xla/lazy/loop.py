"""A step recorded once and run as one XLA While loop (gradient accumulation, scan).

The caller records its step over `placeholder` tensors (leaves with no value: one
slice of each iterated tensor, the carried values). `accumulation_loop` then
splits the recorded graph: values that do not depend on a placeholder (the
parameters, constants, anything computed before the loop) are computed once
outside and enter the loop as invariants; the rest is cloned into the body, whose
JAX function `compiler.graph_function` builds. One node, lowered by
`lowering.loops.accumulate`, runs that body in `jax.lax.fori_loop`. A random op's
key is the exception to hoisting: it is folded with the iteration number inside
the loop, so each step draws its own numbers (dropout masks differ per step).
`scan_loop` records the same kind of body as a scan node (`lowering.loops.scan`,
`jax.lax.scan`): a carry threaded from one step to the next and outputs stacked
along a new leading dimension; the API on top is `torch_xla.experimental.scan`.
There every random op stays in the body, even one that reads no loop input: the
body is a traced function that reads only its arguments, so each of its random ops
must draw anew at every step. `while_loop` (torch's `while_loop` on XLA tensors, and
`torch_xla.experimental.fori_loop`) records a condition and a body the same way and
runs them in `jax.lax.while_loop`.

The node's hash covers the body's structure (`Body.fingerprint`), so the same step
recorded again hits the compiled program, however many steps it iterates.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._higher_order_ops.while_loop import while_loop_op, while_loop_stack_output_op

from torch_xla.lazy import compiler, dtype_policy, eager, graph, ir, rng, tensor
from torch_xla.lazy.tensor import XLATensor
from torch_xla.lowering import loops

LOOP_OP = "xla::gradient_accumulation_loop"
SCAN_OP = "xla::scan"
WHILE_OP = "xla::while_loop"
PLACEHOLDER_OP = "xla::loop_input"


class ValueOfLoopInputError(RuntimeError):
    """A traced loop body asked for the value of a tensor that depends on a loop input."""


class Placeholder(ir.NoBuffer):
    """A leaf standing for a loop input while the body is recorded: it has no value."""

    __slots__ = ()

    def __init__(self, aval: ir.Aval, device: int) -> None:
        super().__init__(PLACEHOLDER_OP, aval, device)

    def missing(self) -> Exception:
        return ValueOfLoopInputError(
            "The loop body read the value of a tensor computed from a loop input (.item(), "
            ".cpu(), print, a sync inside the step, or a value-dependent branch). The body is "
            "recorded once and runs inside one XLA While loop, so no value exists while it is "
            "recorded: keep such reads outside the step."
        )


def placeholder(shape: Sequence[int], dtype: torch.dtype, device: int) -> XLATensor:
    """An engine tensor standing for a loop input of this shape and dtype."""
    return XLATensor(Placeholder((tuple(shape), dtype), device))


class Body:
    """The recorded step as a JAX function; equal (and hashed, and printed) by its
    structure, which is all a compiled program depends on."""

    __slots__ = ("fn", "fingerprint")

    def __init__(self, fn, fingerprint: str) -> None:
        self.fn = fn
        self.fingerprint = fingerprint

    def __call__(self, *arrays):
        return self.fn(*arrays)

    def __eq__(self, other) -> bool:
        return type(other) is Body and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"Body({self.fingerprint})"


# --- splitting the recorded graph ------------------------------------------------------


def _depends(order: list[ir.Node], kind: type | None = None,
             random: bool = False) -> dict[int, bool]:
    """id(node) -> whether it is or reads a placeholder (of class `kind`, default any;
    `order`: a post-order). With `random`, a random op (a reader of a key) counts as
    reading one too: it must draw again at every iteration, so it stays in the loop."""
    kind = kind or Placeholder
    found: dict[int, bool] = {}
    for n in order:
        found[id(n)] = isinstance(n, kind) or any(
            found[id(c)] or (random and c.op == rng.KEY_OP) for c, _ in n.inputs)
    return found


class _Split:
    """The body's clone of each placeholder-dependent node; every value it reads from
    outside becomes a new placeholder (a key or an invariant of the loop)."""

    def __init__(self, depends: dict[int, bool]) -> None:
        self.depends = depends
        self.clones: dict[int, ir.Node] = {}
        self.keys: list[tuple[tuple[ir.Node, int], Placeholder]] = []
        self.invariants: list[tuple[tuple[ir.Node, int], Placeholder]] = []
        self._outside: dict[tuple[int, int], Placeholder] = {}

    def value(self, node: ir.Node, index: int) -> tuple[ir.Node, int]:
        if self.depends[id(node)]:
            return self.clones.get(id(node), node), index
        key = (id(node), index)
        found = self._outside.get(key)
        if found is None:
            found = self._outside[key] = Placeholder(node.avals[index], node.device)
            (self.keys if node.op == rng.KEY_OP else self.invariants).append(((node, index), found))
        return found, 0

    def clone(self, n: ir.Node) -> None:
        if type(n) is Placeholder:
            return
        if getattr(n.rule, "collective", False):
            raise NotImplementedError(
                f"gradient_accumulation: the step holds a collective ({n.op}) that depends on "
                "the iterated tensors; collectives inside the accumulation loop are not "
                "supported yet. Reduce the accumulated gradients after the loop instead."
            )
        inputs = [self.value(c, i) for c, i in n.inputs]
        clone = ir.Node(n.op, n.rule, n.template, inputs, n.avals, n.device, n.hash)
        clone.location = n.location
        self.clones[id(n)] = clone


def _fingerprint(device: int, order, position, values, leaves: list) -> str:
    """The body's structure, independent of process and device: each node as the
    compiler keys it, plus which loop operand each leaf of the walk is."""
    leaf_index = {id(leaf): k for k, leaf in enumerate(leaves)}
    roles = [leaf_index[id(n)] for n in order if n.rule is None]
    text = compiler.stable_key(device, order, position, values, replica=True) + repr(roles)
    return hashlib.sha256(text.encode()).hexdigest()


# --- the loop node ---------------------------------------------------------------------


def _record_body(device: int, slots: Sequence[XLATensor], roots: list[tuple[ir.Node, int]],
                 random: bool = False) -> tuple[Body, _Split]:
    """The part of the recorded graph under `roots` that depends on a placeholder (or,
    with `random`, draws random numbers), as one JAX function of (the `slots`, then the
    keys and invariants `_Split` found)."""
    order, _, _, _ = graph.walk(roots)
    split = _Split(_depends(order, random=random))
    for n in order:
        if split.depends[id(n)]:
            split.clone(n)
    body_values = [split.value(n, i) for n, i in roots]
    outside = [p for _, p in split.keys] + [p for _, p in split.invariants]
    leaves = [t._node for t in slots] + outside
    body_order, position, _, _ = graph.walk(body_values)
    fn = compiler.graph_function(body_order, position, leaves, body_values)
    return Body(fn, _fingerprint(device, body_order, position, body_values, leaves)), split


def _loop_node(op: str, rule, device: int, inputs: list, splits: Sequence[_Split],
               attributes: tuple, avals: tuple) -> list[XLATensor]:
    """One node running a loop over `inputs`, then each split's keys and invariants."""
    for split in splits:
        inputs = inputs + [v for v, _ in split.keys] + [v for v, _ in split.invariants]
    template = (tuple(ir.Slot(i) for i in range(len(inputs))), attributes)
    in_avals = tuple(n.avals[i] for n, i in inputs)
    node = ir.Node(op, rule, template, inputs, avals, device,
                   hash((op, attributes, in_avals, avals)))
    return [XLATensor(node, i) for i in range(len(avals))]


def _aval(t: XLATensor) -> ir.Aval:
    return t._node.avals[t._index]


def accumulation_loop(
    steps: int,
    slots: Sequence[XLATensor],
    iterables: Sequence[XLATensor],
    carried: Sequence[XLATensor],
    accumulators: Sequence[XLATensor],
    loss: XLATensor,
    carried_out: Sequence[XLATensor],
    grads: Sequence[XLATensor | None],
) -> list[XLATensor]:
    """Record one node running the step recorded over `slots` (placeholders: one slice of
    each iterable, then one per carried value) `steps` times.

    The step produced `loss`, `carried_out` and one gradient per accumulator (None where
    it produced none). Returns the summed loss, the final carried values and the
    accumulators plus the summed gradients."""
    device = loss._node.device
    present = [g for g in grads if g is not None]
    roots = [loss.value, *(t.value for t in carried_out), *(g.value for g in present)]
    body, split = _record_body(device, slots, roots)
    layout = loops.AccumulationLayout(
        steps=steps, iterables=len(iterables), carried=len(carried),
        has_grad=tuple(g is not None for g in grads), keys=len(split.keys),
        invariants=len(split.invariants), loss_shape=tuple(loss.shape),
        loss_dtype=str(dtype_policy.STORAGE[loss.dtype]),
    )
    inputs = [t.value for t in (*iterables, *carried, *accumulators)]
    avals = (_aval(loss), *map(_aval, carried), *map(_aval, accumulators))
    return _loop_node(LOOP_OP, loops.accumulate, device, inputs, [split],
                      (("body", body), ("layout", layout)), avals)


def scan_loop(
    steps: int,
    slots: Sequence[XLATensor],
    init: Sequence[XLATensor],
    xs: Sequence[XLATensor],
    carry_out: Sequence[XLATensor],
    ys: Sequence[XLATensor],
    reverse: bool = False,
) -> tuple[list[XLATensor], list[XLATensor]]:
    """Record one node scanning the function recorded over `slots` (placeholders: one per
    carried value, then one slice of each of `xs`) along the leading dimension of `xs`
    (`steps` long; last to first when `reverse`).

    The function produced `carry_out` (one per `init`, same shapes and dtypes) and `ys`.
    Returns the final carry and each of `ys` stacked along a new leading dimension."""
    device = slots[0]._node.device
    # the body reads only the slots and its own constants: every random op is its own
    body, split = _record_body(device, slots, [t.value for t in (*carry_out, *ys)],
                               random=True)
    layout = loops.ScanLayout(steps=steps, carried=len(init), iterables=len(xs),
                              keys=len(split.keys), invariants=len(split.invariants),
                              reverse=reverse)
    inputs = [t.value for t in (*init, *xs)]
    stacked = tuple(((steps, *shape), dtype) for shape, dtype in map(_aval, ys))
    outs = _loop_node(SCAN_OP, loops.scan, device, inputs, [split],
                      (("body", body), ("layout", layout)), (*map(_aval, init), *stacked))
    return outs[:len(init)], outs[len(init):]


def while_loop(cond_fn: Callable, body_fn: Callable, carried: Sequence[XLATensor],
               additional: Sequence[Any] = ()) -> tuple[XLATensor, ...]:
    """`torch._higher_order_ops.while_loop` on engine tensors: `cond_fn` and `body_fn`
    recorded once each over placeholders of the `carried` values (`additional` passed
    after them, unchanged), run as one XLA While node (`lowering.loops.while_`). The
    body's random ops draw anew at each iteration."""
    for k, t in enumerate(carried):
        if type(t) is not XLATensor:
            raise TypeError(f"while_loop on XLA tensors: carried input {k} is "
                            f"{type(t).__name__}; every carried input must be an XLA tensor")
    if not carried:
        raise ValueError("while_loop needs at least one carried input")
    device = tensor.common_device(carried)
    slots = [placeholder(t.shape, t.dtype, device) for t in carried]
    try:
        with eager.disabled():
            return _record_while(cond_fn, body_fn, carried, slots, tuple(additional), device)
    except BaseException:
        discard_recorded()
        raise


def _record_while(cond_fn: Callable, body_fn: Callable, carried: Sequence[XLATensor],
                  slots: list[XLATensor], additional: tuple, device: int
                  ) -> tuple[XLATensor, ...]:
    pred = cond_fn(*slots, *additional)
    if not isinstance(pred, torch.Tensor) or pred.dtype != torch.bool or pred.numel() != 1:
        raise TypeError(f"while_loop: cond_fn must return a boolean tensor of one element, "
                        f"got {_describe(pred)}")
    new = body_fn(*slots, *additional)
    new = tuple(new) if isinstance(new, (tuple, list)) else (new,)
    if len(new) != len(carried):
        raise TypeError(f"while_loop: body_fn returned {len(new)} values for "
                        f"{len(carried)} carried inputs; it returns the new carried values")
    for k, (out, before) in enumerate(zip(new, carried, strict=True)):
        if not isinstance(out, torch.Tensor) or (out.shape, out.dtype) != (before.shape,
                                                                              before.dtype):
            raise TypeError(f"while_loop: body_fn's value {k} is {_describe(out)}, but carried "
                            f"input {k} has shape {tuple(before.shape)} and dtype "
                            f"{before.dtype}: a carried value keeps its shape and dtype")
    cond, cond_split = _record_body(device, slots, [pred.value], random=True)
    body, body_split = _record_body(device, slots, [t.value for t in new], random=True)
    layout = loops.WhileLayout(
        carried=len(carried), cond_keys=len(cond_split.keys),
        cond_invariants=len(cond_split.invariants), body_keys=len(body_split.keys),
        body_invariants=len(body_split.invariants))
    outs = _loop_node(WHILE_OP, loops.while_, device, [t.value for t in carried],
                      [cond_split, body_split],
                      (("cond", cond), ("body", body), ("layout", layout)),
                      tuple(map(_aval, carried)))
    recorded = [pred, *new]
    del new, pred
    if forget_results(recorded):
        raise NotImplementedError(
            "while_loop: after recording cond_fn and body_fn, live tensors hold values "
            "computed inside the loop that it does not return: a function stored a tensor "
            "outside (a global, a module buffer). Return such values as carried values.")
    return tuple(outs)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"{type(value).__name__} {value!r:.60}"


@while_loop_stack_output_op.py_impl(XLATensor)
def _while_loop_gradient_rule(cond_fn: Callable, body_fn: Callable, carried_inputs: tuple,
                              additional_inputs: tuple) -> None:
    """torch differentiates `while_loop` by stacking each iteration's values, a tensor
    whose size is the data-dependent number of iterations: no XLA program has one."""
    raise NotImplementedError(
        "while_loop on XLA tensors cannot be differentiated: torch's backward for it keeps "
        "every iteration's values in a tensor whose size is the number of iterations, known "
        "only when the loop has run, and an XLA program's shapes are fixed when it is "
        "built. Run the loop under torch.no_grad(), or use torch_xla.experimental.scan "
        "(a fixed number of steps), which differentiates.")


@while_loop_op.py_impl(XLATensor)
def _while_loop_rule(cond_fn: Callable, body_fn: Callable, carried_inputs: tuple,
                     additional_inputs: tuple) -> tuple[XLATensor, ...]:
    """torch's `while_loop` reaches engine tensors here, its functions functionalized."""
    return while_loop(cond_fn, body_fn, carried_inputs, additional_inputs)


# --- nothing recorded over a placeholder may outlive the recording -------------------


def forget_recorded(tensors: Sequence[XLATensor]) -> None:
    """Leave the step's own results out of syncs, and check that no other live tensor
    holds a value computed from a placeholder (a sync would have to read it).

    Raises NotImplementedError naming such a tensor: the step updated state (a buffer,
    a global) that the loop cannot carry."""
    found = forget_results(tensors)
    if found:
        t = found[0]
        discard_recorded()
        raise NotImplementedError(
            f"gradient_accumulation: after the step, {len(found)} live tensor(s) hold "
            f"values computed inside the loop that the loop does not return, e.g. one of "
            f"shape {tuple(t.shape)} and dtype {t.dtype} (from {t._node.op}). The loop "
            "returns only the loss, the carried tensors and the parameters' gradients: a "
            "step that updates buffers (batch norm's running statistics) or stores tensors "
            "outside is not supported; pass such state as carried_tensors and return it."
        )


def forget_results(tensors: Sequence[XLATensor], kind: type | None = None) -> list[XLATensor]:
    """Leave a recording's results out of syncs; return the other live tensors still
    computed from a placeholder (of class `kind`, default any) after a garbage collection:
    state the recorded function stored elsewhere, which the caller reports."""
    for t in tensors:
        tensor.uninitialized(t)
    found = escaped(kind)
    if found:
        gc.collect()  # reference cycles may still hold dead tensors of the recording
        found = escaped(kind)
    return found


def discard_recorded(kind: type | None = None) -> None:
    """Leave every live tensor computed from a placeholder (of class `kind`, default any)
    out of syncs (a recording that failed half-way), so that the next sync does not try
    to read a placeholder."""
    for t in escaped(kind):
        tensor.uninitialized(t)


def escaped(kind: type | None = None) -> list[XLATensor]:
    """The live pending tensors whose values were computed from a placeholder (of class
    `kind`, default any)."""
    pending = tensor.pending_tensors()
    depends = _depends(graph.walk([t.value for t in pending])[0], kind)
    return [t for t in pending if depends[id(t._node)]]
