"""Loops as JAX: the body of a traced step run over a leading dimension in one XLA While.

`accumulate` is the lowering of the engine's gradient-accumulation node, `scan` of its
scan node and `while_` of its while-loop node (all recorded in `lazy/loop.py`): the
body is a JAX function built from the recorded step, and the loop is
`jax.lax.fori_loop`, `jax.lax.scan` or `jax.lax.while_loop`, which XLA receives as one
`while` whatever the number of steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax


@dataclass(frozen=True)
class AccumulationLayout:
    """How the loop's operands and the body's arguments and results are laid out.

    Operands: iterables (stacked along dimension 0), carried values, gradient
    accumulators, random keys, loop invariants. Body arguments: one slice of each
    iterable, the carried values, each key folded with the iteration, the
    invariants. Body results: the loss, the carried values, one gradient per
    accumulator whose `has_grad` is True. Loop results: the summed loss, the last
    carried values, the accumulators."""

    steps: int
    iterables: int
    carried: int
    has_grad: tuple[bool, ...]
    keys: int
    invariants: int
    loss_shape: tuple[int, ...]
    loss_dtype: str  # numpy name of the loss's storage dtype


def _fold_in(key, i):
    """A raw key (uint32[2]) for iteration `i`, so each step draws other random numbers."""
    return jax.random.key_data(jax.random.fold_in(jax.random.wrap_key_data(key), i))


def _split(arrays: tuple, sizes: list[int]) -> list[tuple]:
    out, start = [], 0
    for size in sizes:
        out.append(tuple(arrays[start:start + size]))
        start += size
    return out


def accumulate(*arrays, body: Callable, layout: AccumulationLayout) -> tuple:
    """Run `body` once per slice of the iterables, summing the losses and gradients."""
    sizes = [layout.iterables, layout.carried, len(layout.has_grad), layout.keys,
             layout.invariants]
    iterables, carried, accumulators, keys, invariants = _split(arrays, sizes)

    def step(i, state):
        loss, carried, accumulators = state
        slices = [lax.dynamic_index_in_dim(x, i, 0, keepdims=False) for x in iterables]
        out = body(*slices, *carried, *(_fold_in(k, i) for k in keys), *invariants)
        grads = iter(out[1 + layout.carried:])
        summed = tuple(a + next(grads) if has else a
                       for a, has in zip(accumulators, layout.has_grad, strict=True))
        return loss + out[0], tuple(out[1:1 + layout.carried]), summed

    zero = jnp.zeros(layout.loss_shape, layout.loss_dtype)
    loss, carried, accumulators = lax.fori_loop(
        0, layout.steps, step, (zero, carried, accumulators))
    return (loss, *carried, *accumulators)


@dataclass(frozen=True)
class ScanLayout:
    """How a scan's operands and its body's arguments and results are laid out.

    Operands: initial carried values, iterables (stacked along dimension 0), random
    keys, loop invariants. Body arguments: the carried values, one slice of each
    iterable, each key folded with the iteration, the invariants. Body results: the new
    carried values, then one slice of each output. Loop results: the last carried
    values, then the outputs stacked along a new dimension 0."""

    steps: int
    carried: int
    iterables: int
    keys: int
    invariants: int
    reverse: bool  # iterate from the last slice to the first


def scan(*arrays, body: Callable, layout: ScanLayout) -> tuple:
    """Run `body` once per slice of the iterables, as `jax.lax.scan` (one XLA `while`)."""
    sizes = [layout.carried, layout.iterables, layout.keys, layout.invariants]
    carried, iterables, keys, invariants = _split(arrays, sizes)

    def step(state, slices):
        i, carried = state
        out = body(*carried, *slices, *(_fold_in(k, i) for k in keys), *invariants)
        return (i + 1, tuple(out[:layout.carried])), tuple(out[layout.carried:])

    (_, carried), ys = lax.scan(step, (jnp.int32(0), carried), iterables,
                                length=layout.steps, reverse=layout.reverse)
    return (*carried, *ys)


@dataclass(frozen=True)
class WhileLayout:
    """How a while loop's operands are laid out: the carried values, then the condition's
    random keys and invariants, then the body's. The condition and the body take the
    carried values, their keys folded with the iteration, their invariants; the
    condition returns one boolean, the body the new carried values."""

    carried: int
    cond_keys: int
    cond_invariants: int
    body_keys: int
    body_invariants: int


def while_(*arrays, cond: Callable, body: Callable, layout: WhileLayout) -> tuple:
    """Run `body` while `cond` holds, as `jax.lax.while_loop` (one XLA `while`)."""
    sizes = [layout.carried, layout.cond_keys, layout.cond_invariants, layout.body_keys,
             layout.body_invariants]
    carried, cond_keys, cond_invariants, body_keys, body_invariants = _split(arrays, sizes)

    def test(state):
        i, values = state
        (pred,) = cond(*values, *(_fold_in(k, i) for k in cond_keys), *cond_invariants)
        return jnp.reshape(pred, ())

    def step(state):
        i, values = state
        out = body(*values, *(_fold_in(k, i) for k in body_keys), *body_invariants)
        return i + 1, tuple(out)

    _, carried = lax.while_loop(test, step, (jnp.int32(0), carried))
    return tuple(carried)
