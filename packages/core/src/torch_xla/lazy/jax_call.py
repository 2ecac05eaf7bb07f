"""A JAX function called on XLA tensors, recorded as one node of the lazy graph.

PyTorch/XLA's `torch_xla.core.xla_builder.call_jax(jax_func, args, kwargs)`: the
tensors among `args` and `kwargs` (any pytree of them) reach `jax_func` as jax
arrays, every other leaf as itself, and the arrays it returns come back as XLA
tensors in the same pytree. Here the engine already lowers every graph as one JAX
function, so the node's lowering is `jax_func` itself: it is inlined into the
program of the step that computes its results, and XLA fuses it with the ops
around it. Nothing runs when it is called.

Each signature (the function, the arguments' tree, the non-tensor leaves, the
tensors' shapes and stored dtypes) is traced once, with `jax.eval_shape`, and kept
in `COMPUTATIONS`; later calls with that signature record the node from the kept
entry. The non-tensor leaves are part of the computation (a new value is a new
computation), so they must be hashable.

The node's hash covers a fingerprint of the computation: the SHA-256 of its
StableHLO text, or the caller's `override_hash`. Equal computations therefore share
compiled programs, in memory and in the persistent cache, and a changed function
never loads a stale one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import torch

from torch_xla.lazy import dtype_policy, functional, ir
from torch_xla.lazy.tensor import XLATensor, device_mismatch_error, not_xla_error
from torch_xla.lowering import dtypes
from torch_xla.pjrt import threads
from torch_xla.pjrt.client import client

CALL_OP = "xla::call_jax"

_TENSOR = object()  # a tensor's place among the flattened leaves


class Computation:
    """One signature of a JAX function, traced: what recording a call of it needs."""

    __slots__ = ("fn", "out_tree", "out_avals", "fingerprint")

    def __init__(self, fn: Callable, out_tree: Any, out_avals: tuple, fingerprint: str) -> None:
        self.fn = fn  # flat arrays in, flat arrays out
        self.out_tree = out_tree
        self.out_avals = out_avals
        self.fingerprint = fingerprint

    def __call__(self, *arrays, computation: str) -> tuple:
        """The node's lowering (`computation`, the fingerprint, only keys the node)."""
        return self.fn(*arrays)


# Signature -> Computation: PyTorch/XLA's `xb._JAX_TO_XLA_COMPUTATION_CACHE`.
COMPUTATIONS: dict[tuple, Computation] = {}


def call(jax_func: Callable, args: Any, kwargs: Any = None, name: str | None = None,
         override_hash: Any = None) -> Any:
    """Record `jax_func(*args, **kwargs)` on the XLA tensors in them (see the module)."""
    if not callable(jax_func):
        raise TypeError(f"call_jax: expected a JAX function, got {type(jax_func).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"call_jax: args must be a tuple of arguments, got "
                        f"{type(args).__name__}; pass one argument as (x,)")
    leaves, in_tree = jax.tree_util.tree_flatten((tuple(args), dict(kwargs or {})))
    tensors: list[XLATensor] = []
    slots: list = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            if leaf.device.type != "xla":
                raise not_xla_error(leaf)
            tensors.append(functional.unwrap(leaf))
            slots.append(_TENSOR)
        else:
            slots.append(leaf)
    device = _device_of(tensors)
    values = [t.value for t in tensors]
    storage = dtype_policy.STORAGE
    specs = tuple((shape, storage[dtype]) for shape, dtype in (n.avals[i] for n, i in values))
    # the values' types too: 2, 2.0 and True are equal keys but trace apart
    key = (jax_func, in_tree, tuple(slots), tuple(map(type, slots)), specs, name,
           override_hash)
    try:
        computation = COMPUTATIONS.get(key)
    except TypeError:
        bad = next(s for s in slots if not _hashable(s))
        raise TypeError(
            f"call_jax: the non-tensor argument {bad!r} ({type(bad).__name__}) is not "
            "hashable. Non-tensor arguments are part of the traced computation; pass arrays "
            "as XLA tensors, and other values as hashable ones (numbers, strings, tuples)."
        ) from None
    if computation is None:
        computation = COMPUTATIONS[key] = _trace(jax_func, in_tree, slots, specs, name,
                                                 override_hash)
    template = (tuple(ir.Slot(i) for i in range(len(values))),
                (("computation", computation.fingerprint),))
    in_avals = tuple(n.avals[i] for n, i in values)
    node = ir.Node(CALL_OP, computation, template, values, computation.out_avals, device,
                   hash((CALL_OP, computation.fingerprint, in_avals, computation.out_avals)))
    outputs = [functional.wrap(XLATensor(node, i)) for i in range(len(computation.out_avals))]
    return jax.tree_util.tree_unflatten(computation.out_tree, outputs)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _device_of(tensors: list[XLATensor]) -> int:
    if not tensors:
        return threads.current_index()
    device = tensors[0]._node.device
    for t in tensors[1:]:
        if t._node.device != device:
            raise device_mismatch_error(device, t._node.device)
    return device


def _trace(jax_func: Callable, in_tree: Any, slots: list, specs: tuple, name: str | None,
           override_hash: Any) -> Computation:
    client()  # tracing starts jax's backends: the plugin must configure them first

    def structured(*arrays):
        args, kwargs = jax.tree_util.tree_unflatten(in_tree, _filled(slots, arrays))
        return jax_func(*args, **kwargs)

    def flat_fn(*arrays):
        return tuple(jax.tree_util.tree_leaves(structured(*arrays)))

    shapes = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs]
    try:
        out = jax.eval_shape(structured, *shapes)
    except TypeError as error:
        raise TypeError(f"call_jax: {function_name(jax_func)} failed on arrays of "
                        f"{list(specs)}; it may return only arrays (in any pytree). "
                        f"{error}") from error
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    out_avals = tuple(_aval(leaf, jax_func) for leaf in out_leaves)
    if override_hash is not None:
        fingerprint = f"override:{override_hash!r}"
    else:
        text = jax.jit(flat_fn).lower(*shapes).as_text()
        fingerprint = hashlib.sha256(text.encode()).hexdigest()
    if name:
        fingerprint = f"{name}:{fingerprint}"
    return Computation(flat_fn, out_tree, out_avals, fingerprint)


def _filled(slots: list, arrays: tuple) -> list:
    it = iter(arrays)
    return [next(it) if s is _TENSOR else s for s in slots]


def _aval(leaf: Any, jax_func: Callable) -> ir.Aval:
    if not isinstance(leaf, jax.ShapeDtypeStruct):
        raise TypeError(f"call_jax: {function_name(jax_func)} returned {type(leaf).__name__}; "
                        "it may return only arrays (in any pytree)")
    dtype = dtypes.JAX_TO_TORCH.get(np.dtype(leaf.dtype))
    if dtype is None:
        raise TypeError(f"call_jax: {function_name(jax_func)} returned an array of dtype "
                        f"{leaf.dtype}, which no torch dtype matches")
    return tuple(leaf.shape), dtype


def function_name(fn: Callable) -> str:
    """How an error message names the function `fn`."""
    return getattr(fn, "__qualname__", None) or repr(fn)
