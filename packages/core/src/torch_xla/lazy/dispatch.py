"""What happens to one ATen op on XLA tensors: record it, decompose it, or run it on the CPU.

The choice is made once per overload and kept in `_rules`; `choose_rule` is the
whole decision order. The engine's own rules (`special.py`) register into
`SPECIAL` with the `special` decorator. Recording is the hot path: it flattens
the arguments without pytree, looks the output shapes up in a cache keyed by
(op, static args, input shapes/dtypes, scalar types) and only on a miss runs
the op on meta tensors. A random op also takes its key as an input (`rng.py`).

Each op the engine handles itself (a lowering or an engine rule) counts
`xla::<op>` and adds its host time to `LazyTracing`, as PyTorch/XLA does; an op
run on the CPU counts `aten::<op>` instead (`fallback.py`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils import _pytree as pytree

from torch_xla import _metrics, lowering
from torch_xla.lazy import fallback, ir, nodes, rewrites, rng, tensor
from torch_xla.lazy.nodes import Lifted
from torch_xla.lazy.tensor import XLATensor, device_index, device_mismatch_error
from torch_xla.pjrt import threads

aten = torch.ops.aten
Rule = Callable[[OpOverload, tuple, dict], Any]

# The engine's own rules for ops that need the engine itself (transfers, copies, empty,
# host reads), filled by `special.py`; they win over every other rule.
SPECIAL: dict[OpOverload, Rule] = {}

# Overloads run on the CPU although a lowering exists, each with the reason.
ON_CPU: dict[OpOverload, str] = {
    aten.median.default: (
        "PyTorch/XLA has no lowering for median and runs it on the CPU; programs and tests "
        "written for it expect `aten::median` among met.executed_fallback_ops() (the "
        "median.dim overload keeps its lowering)"),
}

# op -> (rule, its xla::<op> counter or None): chosen once per overload.
_rules: dict[OpOverload, tuple[Rule, _metrics.Counter | None]] = {}
_TRACING = _metrics.metric("LazyTracing")
_perf_counter = time.perf_counter
_FALLBACK = object()  # shape-cache entry: the op cannot be recorded for these inputs
_shape_cache: dict[tuple, Any] = {}
_SLOTS = [ir.Slot(i) for i in range(64)]


def special(*ops: OpOverload | None) -> Callable[[Rule], Rule]:
    """Decorator: `fn` is the engine's rule for each of `ops` (None entries skipped)."""

    def decorate(fn: Rule) -> Rule:
        for op in ops:
            if op is None:
                continue
            if op in SPECIAL:
                raise ValueError(f"{op} already has an engine rule {SPECIAL[op]}")
            SPECIAL[op] = fn
        return fn

    return decorate


def run(func: OpOverload, args: tuple, kwargs: dict) -> Any:
    start = _perf_counter()
    entry = _rules.get(func)
    if entry is None:
        entry = _rules[func] = _rule_entry(func)
    rule, counter = entry
    out = rule(func, args, kwargs)
    if counter is not None:
        counter.value += 1
    _TRACING.add_since(start)
    return out


def _rule_entry(func: OpOverload) -> tuple[Rule, _metrics.Counter | None]:
    rule = choose_rule(func)
    own = func in SPECIAL or (rule is not fallback.run_cpu and not _mutates(func)
                              and lowering.lookup(func) is not None)
    name = func._schema.name.partition("::")[2]
    return rule, _metrics.counter(f"xla::{name}") if own else None


def choose_rule(func: OpOverload) -> Rule:
    own = SPECIAL.get(func)
    if own is not None:
        return own
    if func in ON_CPU:
        return fallback.run_cpu
    if _mutates(func):
        inplace = rewrites.inplace_as_functional(func)
        return inplace if inplace is not None else fallback.run_cpu  # out= variants
    entry = lowering.lookup(func)
    if entry is not None:
        lift = nodes.lift_plan(func)
        if lift:
            return lambda f, a, k: record(f, entry, *nodes.lift(lift, a, k))
        return lambda f, a, k: record(f, entry, a, k)
    decomposition = _decompositions().get(func)
    if decomposition is not None:
        return lambda f, a, k: decomposition(*a, **k)
    if func._schema.name.startswith("aten::_foreach_"):
        looped = rewrites.foreach_as_loop(func)
        if looped is not None:
            return looped
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return lambda f, a, k: f.decompose(*a, **k)
    return fallback.run_cpu


@functools.cache
def _decompositions() -> dict:
    return lowering.decompositions()


def _mutates(func: OpOverload) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


# --- recording ----------------------------------------------------------------


def _slot(i: int) -> ir.Slot:
    return _SLOTS[i] if i < len(_SLOTS) else ir.Slot(i)


def _flat(a: Any, tensors: list, types: list) -> Any:
    """`a` with tensors replaced by slots (appended to `tensors`), lists made tuples."""
    if isinstance(a, torch.Tensor):
        tensors.append(a)
        return _slot(len(tensors) - 1)
    t = type(a)
    if t is list or t is tuple:
        return tuple([_flat(x, tensors, types) for x in a])
    if t is Lifted:
        tensors.append(a)
        return _slot(len(tensors) - 1)
    types.append(t)
    return a


def input_values(tensors: list, device: int | None) -> tuple[list, int]:
    """The IR values of the op's tensor arguments and the device they live on."""
    if device is None:
        for t in tensors:
            if type(t) is XLATensor:
                device = t._node.device
                break
        else:
            device = threads.current_index()
    values = []
    for t in tensors:
        if type(t) is XLATensor:
            if t._node.device != device:
                raise device_mismatch_error(device, t._node.device)
            values.append((t._node, t._index))
        elif type(t) is Lifted:
            values.append((nodes.lifted_data(t.value, _scalar_dtype(tensors), device), 0))
        else:
            values.append(nodes.as_value(t, device))
    return values, device


def _scalar_dtype(tensors: list) -> torch.dtype:
    """A lifted scalar computes in its op's floating dtype (float32 for halves), as ATen does."""
    for t in tensors:
        if type(t) is XLATensor:
            dtype = t.dtype
            if dtype.is_floating_point or dtype.is_complex:
                return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
            break
    return torch.get_default_dtype()


def _device_arg(kwargs: dict) -> int | None:
    device = kwargs.get("device")
    if device is None:
        return None
    return device_index(device)


def record(func: OpOverload, entry: lowering.Lowering, args: tuple, kwargs: dict) -> Any:
    tensors: list = []
    types: list = []
    template = _flat(args, tensors, types)
    kw_template = tuple([(k, _flat(v, tensors, types)) for k, v in kwargs.items()])
    values, device = input_values(tensors, _device_arg(kwargs) if "device" in kwargs else None)
    key = (func, template, kw_template, tuple([n.avals[i] for n, i in values]), tuple(types))
    shapes = _shape_cache.get(key)
    if shapes is None:
        shapes = _shape_cache[key] = _infer(func, args, kwargs, key)
    if shapes is _FALLBACK:
        return fallback.run_cpu(func, args, kwargs)
    avals, structure, key_hash = shapes
    if entry.needs_rng:  # the key is an input, fixed now: one value in every graph
        kw_template += (("rng", _slot(len(values))),)
        values.append(rng.key_for_next_op(device))
    node = ir.Node(func, entry, (template, kw_template), values, avals, device, key_hash)
    return wrap(node, structure)


def wrap(node: ir.Node, structure: Any) -> Any:
    if structure is None:
        return XLATensor(node, 0)
    return structure(None if a is None else XLATensor(node, i) for i, a in enumerate(node.avals))


def _to_meta(a: Any) -> Any:
    if type(a) is Lifted:
        return a.value
    if isinstance(a, torch.Tensor):
        return torch.empty(a.shape, dtype=a.dtype, device="meta")
    if isinstance(a, torch.device):
        return torch.device("meta")
    return a


def _infer(func: OpOverload, args: tuple, kwargs: dict, key: tuple) -> Any:
    """(output avals, output container type or None, hash) from running on meta tensors."""
    margs, mkwargs = pytree.tree_map(
        _to_meta, (args, kwargs), is_leaf=lambda a: type(a) is Lifted
    )
    if "device" in mkwargs:
        mkwargs["device"] = torch.device("meta")
    try:
        out = func(*margs, **mkwargs)
    except Exception:  # data-dependent shape, no meta kernel, or a user error the CPU reports
        return _FALLBACK
    if isinstance(out, torch.Tensor):
        return ((tuple(out.shape), out.dtype),), None, hash(key)
    if isinstance(out, (tuple, list)) and all(
        o is None or isinstance(o, torch.Tensor) for o in out
    ):
        avals = tuple(None if o is None else (tuple(o.shape), o.dtype) for o in out)
        return avals, type(out), hash(key)
    if isinstance(out, tuple) and all(isinstance(o, (torch.Tensor, list)) for o in out):
        # (Tensor[], Tensor) returns (_amp_foreach_non_finite_check_and_unscale, the fused
        # optimizers): one aval per tensor, the lists rebuilt around the node's outputs
        sizes = tuple(len(o) if isinstance(o, list) else None for o in out)
        flat = [t for o in out for t in (o if isinstance(o, list) else [o])]
        if all(isinstance(t, torch.Tensor) for t in flat):
            avals = tuple((tuple(t.shape), t.dtype) for t in flat)
            return avals, functools.partial(_nest, sizes), hash(key)
    return _FALLBACK


def _nest(sizes: tuple, values: Any) -> tuple:
    """Flat outputs grouped as the op returns them: `sizes[i]` values as a list, None: one."""
    values = iter(values)
    return tuple(next(values) if n is None else [next(values) for _ in range(n)] for n in sizes)


def record_lowered(func: OpOverload, args: tuple, kwargs: dict) -> Any:
    """Record `func` if it has a lowering, else run it on the CPU (a factory called with an
    xla `device=`, or an op whose special rule found nothing special to do)."""
    entry = lowering.lookup(func)
    if entry is None:
        return fallback.run_cpu(func, args, kwargs)
    return record(func, entry, args, kwargs)


tensor.set_dispatcher(run)
