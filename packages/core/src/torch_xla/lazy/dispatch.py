"""What happens to one ATen op on XLA tensors: record it, decompose it, or run it on the CPU.

The choice is made once per overload and kept in `_rules`; `choose_rule` is the
whole decision order. The engine's own rules (`special.py`) register into
`SPECIAL` with the `special` decorator. Recording is the hot path: it walks the
arguments once without pytree, looks the node's template, output shapes and
hash up in the op's cache keyed by (static args, input shapes/dtypes, scalar
types) and only on a miss runs the op on meta tensors. A random op also takes
its key as an input (`rng.py`).

Each op the engine handles itself (a lowering or an engine rule) counts
`xla::<op>` and adds its host time to `LazyTracing`, as PyTorch/XLA does; an op
run on the CPU counts `aten::<op>` instead (`fallback.py`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch
from torch._ops import OpOverload
from torch.utils import _pytree as pytree

from torch_xla import _metrics, lowering
from torch_xla.lazy import fallback, functional, ir, layout, nodes, rewrites, rng, tensor
from torch_xla.lazy.nodes import Lifted
from torch_xla.lazy.tensor import XLATensor, device_mismatch_error, new_tensor
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

# id(op) -> (op, rule, its xla::<op> counter or None): chosen once per overload. Keyed by
# id since an OpOverload hashes in Python, a cost on every op; the entry keeps the op, so
# an id reused by a later op (after a custom op's library is gone) is noticed.
_rules: dict[int, tuple[OpOverload, Rule, _metrics.Counter | None]] = {}
_TRACING = _metrics.metric("LazyTracing")
_perf_counter = time.perf_counter
_FALLBACK = object()  # shape-cache entry: the op cannot be recorded for these inputs
# op -> {cache key -> (template, output avals, output container, hash) or _FALLBACK}
_shape_cache: dict[OpOverload, dict[tuple, Any]] = {}
_SLOTS = [ir.Slot(i) for i in range(64)]  # shared by every template; grown on demand


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
    entry = _rules.get(id(func))
    if entry is None or entry[0] is not func:
        entry = _rules[id(func)] = (func, *_rule_entry(func))
    _, rule, counter = entry
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
    rule = _rule_for(func)
    if rule is not fallback.run_cpu and any(a.name == "generator"
                                            for a in func._schema.arguments):
        return functools.partial(_generator_on_cpu, rule)
    return rule


def _generator_on_cpu(rule: Rule, func: OpOverload, args: tuple, kwargs: dict) -> Any:
    """A random op given a `torch.Generator` (a CPU one: no other exists for this device)
    draws from it on the CPU, as PyTorch/XLA does, so the numbers are the generator's
    (torch's decompositions refuse one); without one, `rule` (the device's own stream)."""
    if kwargs.get("generator") is not None:
        return fallback.run_cpu(func, args, kwargs)
    return rule(func, args, kwargs)


def _rule_for(func: OpOverload) -> Rule:
    own = SPECIAL.get(func)
    if own is not None:
        return own
    kernel = _device_kernel(func)
    if kernel is not None:
        return kernel
    if func in ON_CPU:
        return fallback.run_cpu
    if _mutates(func):
        inplace = rewrites.inplace_as_functional(func)
        return inplace if inplace is not None else fallback.run_cpu  # out= variants
    entry = lowering.lookup(func)
    if entry is not None:
        return _recorder(func, entry)
    decomposition = _decompositions().get(func)
    if decomposition is not None:
        return lambda f, a, k: functional.decomposed(decomposition, a, k)
    if func._schema.name.startswith("aten::_foreach_"):
        looped = rewrites.foreach_as_loop(func)
        if looped is not None:
            return looped
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
        return lambda f, a, k: functional.decomposed(f.decompose, a, k)
    return fallback.run_cpu


# The dispatch keys whose kernels a user-defined op runs on XLA tensors: PyTorch/XLA's
# (`@impl(XLA_LIB, "op", "XLA")`) and the one this device is registered as.
_DEVICE_KEYS = ("XLA", "PrivateUse1")


def _device_kernel(func: OpOverload) -> Rule | None:
    """The rule running a user's kernel for XLA tensors, for an op outside ATen that has one
    (a custom op whose kernel calls `call_jax`, say). The engine's tensors reach only this
    handler, never the dispatcher's backend keys, so the handler calls the kernel itself."""
    if func.namespace == "aten":  # ATen's PrivateUse1 kernels are the engine's own
        return None
    for key in _DEVICE_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key):
            kernel = torch.library.get_kernel(func, key)
            keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
            return functools.partial(_run_kernel, kernel, keys)
    if (func.namespace in _COMPOSITES_RECORDED
            and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _COMPOSITE)):
        # A composite of other ops for every backend: its ops are recorded here, not run
        # on the CPU. (An alias key: its kernel is the one this device's key computes to.)
        kernel = torch.library.get_kernel(func, "PrivateUse1")
        keys = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
        return lambda f, a, k: functional.decomposed(
            functools.partial(kernel.call_boxed, keys), a, k)
    return None


_COMPOSITE = "CompositeExplicitAutograd"
# The namespaces whose composite kernels run on the device: torch's pt2e quantize /
# dequantize ops (arithmetic on their inputs). Others keep the CPU fallback: prims are
# reached only through torch's own references, and c10d's functional collectives have
# rules of their own where the engine supports them.
_COMPOSITES_RECORDED = frozenset({"quantized_decomposed"})


def _run_kernel(kernel: Any, keys: Any, func: OpOverload, args: tuple, kwargs: dict) -> Any:
    out = kernel.call_boxed(keys, *args, **kwargs)
    if func._schema.is_mutable:
        return out
    # A result that is one of the arguments becomes a new tensor of the same value: the
    # op's schema returns a fresh tensor, and functionalization relies on that.
    inputs = {id(a) for a in args if type(a) is XLATensor}
    if type(out) is XLATensor:
        return XLATensor(*out.value) if id(out) in inputs else out
    if isinstance(out, (tuple, list)):
        return type(out)(XLATensor(*o.value) if type(o) is XLATensor and id(o) in inputs else o
                         for o in out)
    return out


@functools.cache
def _decompositions() -> dict:
    return lowering.decompositions()


def _mutates(func: OpOverload) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


# --- recording ----------------------------------------------------------------
#
# The hot path. Per op it walks the arguments once, collecting the tensors and a
# *signature* in which each tensor is the marker `_TENSOR`; the signature, the inputs'
# avals, the scalars' types and torch's default dtype (what `dtype=None` factories and
# integer-to-float promotions give) key the op's shape cache. A hit gives everything the
# node needs (the template with slots, output avals and container, structural hash),
# so meta tensors, slot templates and hashes are made once per key, not per op.

_TENSOR = object()  # a tensor argument in a signature (slot `i` for the i-th tensor)
# Floats whose == misleads a cache key, as markers in a signature: -0.0 == 0.0 but lowers
# otherwise, and NaN != NaN would miss the cache (and grow it) on every op.
_NEG_ZERO, _NAN = object(), object()
_FLOAT_MARKERS = {_NEG_ZERO: -0.0, _NAN: math.nan}
_default_dtype = torch.get_default_dtype


def _recorder(func: OpOverload, entry: lowering.Lowering) -> Rule:
    """The rule recording `func`, with its lifted scalars (if any) and its shape cache (a
    partial: no Python frame of its own)."""
    return functools.partial(_record, nodes.lift_plan(func), entry, _shapes_of(func),
                             layout.VIEWS.get(func))


def recorder(func: OpOverload) -> Rule:
    """The rule recording `func` with its lowering, for an engine rule that adjusts the
    arguments first (`special.py`)."""
    return _recorder(func, lowering.lookup(func))


def _shapes_of(func: OpOverload) -> dict:
    found = _shape_cache.get(func)
    if found is None:
        found = _shape_cache[func] = {}
    return found


def _signature(seq: Any, tensors: list, types: list) -> tuple:
    """`seq` with tensors replaced by `_TENSOR` (appended to `tensors`), lists made tuples;
    each other leaf's type goes to `types` (1, 1.0 and True are equal but lower apart)."""
    out = []
    for a in seq:
        t = type(a)
        if t is XLATensor or t is Lifted:
            tensors.append(a)
            out.append(_TENSOR)
        elif t is list or t is tuple:
            out.append(_signature(a, tensors, types))
        elif isinstance(a, torch.Tensor):  # a functional XLA tensor or a CPU scalar
            tensors.append(a)
            out.append(_TENSOR)
        else:
            if t is float and (a != a or (a == 0.0 and math.copysign(1.0, a) < 0)):
                a = _NAN if a != a else _NEG_ZERO
            types.append(t)
            out.append(a)
    return tuple(out)


def _slotted(signature: Any, count: list) -> Any:
    """The node's template: `signature` with the i-th `_TENSOR` replaced by slot i."""
    if signature is _TENSOR:
        count[0] += 1
        return _slot(count[0] - 1)
    if type(signature) is tuple:
        return tuple([_slotted(a, count) for a in signature])
    if signature is _NEG_ZERO or signature is _NAN:
        return _FLOAT_MARKERS[signature]
    return signature


def _slot(i: int) -> ir.Slot:
    while len(_SLOTS) <= i:
        _SLOTS.append(ir.Slot(len(_SLOTS)))
    return _SLOTS[i]


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
            node = t._node
            if node.device != device:
                raise device_mismatch_error(device, node.device)
            values.append((node, t._index))
        elif type(t) is Lifted:
            dtype = _lifted_dtype(_floating_dtype(tensors), t.value)
            values.append((nodes.lifted_data(t.value, dtype, device), 0))
        else:
            values.append(nodes.as_value(t, device))
    return values, device


def _inputs(tensors: list, device: int | None) -> tuple[list, tuple, int]:
    """`input_values` and the values' avals, inline for the common case: engine tensors on
    one device and lifted scalars."""
    values, avals, lifted = [], [], []
    for t in tensors:
        kind = type(t)
        if kind is XLATensor:
            node, index = t._node, t._index
            if device is None:
                device = node.device
            elif node.device != device:
                raise device_mismatch_error(device, node.device)
            values.append((node, index))
            avals.append(node.avals[index])
        elif kind is Lifted:  # filled below, once the device is known
            lifted.append(len(values))
            values.append(None)
            avals.append(None)
        else:
            values, device = input_values(tensors, device)
            return values, tuple([n.avals[i] for n, i in values]), device
    if device is None:
        device = threads.current_index()
    if lifted:
        floating = _floating_dtype(tensors)
        for i in lifted:
            value = tensors[i].value
            values[i] = (nodes.lifted_data(value, _lifted_dtype(floating, value), device), 0)
            avals[i] = values[i][0].avals[0]
    return values, tuple(avals), device


_HALVES = (torch.float16, torch.bfloat16)


def _floating_dtype(tensors: list) -> torch.dtype | None:
    """The dtype a lifted float computes in when the op's first tensor is floating or
    complex (float32 for halves, as ATen does); None beside an integer or bool tensor."""
    for t in tensors:
        if type(t) is XLATensor:
            dtype = t._node.avals[t._index][1]  # its dtype, without torch's attribute hook
            if dtype.is_floating_point or dtype.is_complex:
                return torch.float32 if dtype in _HALVES else dtype
            return None
    return None


def _lifted_dtype(floating: torch.dtype | None, value: float | int) -> torch.dtype:
    """A lifted scalar's dtype: the op's floating dtype; else a float is of the default
    dtype and an int is an int64, a 0-dim input that by torch's promotion does not widen
    the op's integer tensors."""
    if floating is not None:
        return floating
    return torch.int64 if type(value) is int else torch.get_default_dtype()


def _device_arg(kwargs: dict) -> int | None:
    device = kwargs.get("device")
    if device is None:
        return None
    return nodes.target_device(device)


def record(func: OpOverload, entry: lowering.Lowering, args: tuple, kwargs: dict) -> Any:
    """Record `func` (which has the lowering `entry`) on its XLA arguments."""
    return _record((), entry, _shapes_of(func), layout.VIEWS.get(func), func, args, kwargs)


def _record(lift: tuple, entry: lowering.Lowering, cache: dict, view: Any, func: OpOverload,
            args: tuple, kwargs: dict) -> Any:
    """Record `func`, its floats named by the lift plan `lift` made inputs, its output
    shapes from `cache` (the op's shape cache); `view` is not None for a view-copy op,
    whose outputs take the CPU's layout of the view."""
    given = None  # what the CPU gets if the op cannot be recorded: the numbers unlifted
    if lift:
        given = args, kwargs
        args, kwargs = nodes.lift(lift, args, kwargs)
    tensors: list = []
    types: list = []
    signature = _signature(args, tensors, types)
    if kwargs:
        kw_signature = tuple([(k, _signature((v,), tensors, types)) for k, v in kwargs.items()])
        device = _device_arg(kwargs) if "device" in kwargs else None
    else:
        kw_signature, device = (), None
    values, avals, device = _inputs(tensors, device)
    key = (signature, kw_signature, avals, tuple(types), _default_dtype())
    shapes = cache.get(key)
    if shapes is None:
        shapes = cache[key] = _infer(func, args, kwargs, key, entry.needs_rng)
    if shapes is _FALLBACK:
        return fallback.run_cpu(func, *(given or (args, kwargs)))
    template, avals, structure, key_hash = shapes
    if entry.needs_rng:  # the key is an input, fixed now: one value in every graph
        template = (template[0], template[1] + (("rng", _slot(len(values))),))
        values.append(rng.key_for_next_op(device))
    node = ir.Node(func, entry, template, values, avals, device, key_hash)
    if view is not None:
        return _view_outputs(node, structure, func, args, kwargs)
    if structure is None:
        return new_tensor(XLATensor, node, 0)
    return structure(None if a is None else new_tensor(XLATensor, node, i)
                     for i, a in enumerate(avals))


def _view_outputs(node: ir.Node, structure: Any, func: OpOverload, args: tuple,
                  kwargs: dict) -> Any:
    found = layout.of_view(func, args, kwargs) or [None] * len(node.avals)
    if structure is None:
        return new_tensor(XLATensor, node, 0, *(found[0] or ()))
    return structure(new_tensor(XLATensor, node, i, *(found[i] or ()))
                     for i in range(len(node.avals)))


def _stand_ins(args: tuple, kwargs: dict, device: str) -> tuple[tuple, dict]:
    """The op's arguments for a run on `device` ("meta", or "cpu" for the dtype probe):
    lifted numbers as the numbers, tensors as zero-filled ones of the same dtypes and
    shapes (on the CPU a large one with every dimension 1), devices as `device`."""

    def stand_in(a: Any) -> Any:
        if type(a) is Lifted:
            return a.value
        if isinstance(a, torch.Tensor):
            small = device == "meta" or a.numel() <= _PROBE_ELEMENTS
            return torch.zeros(a.shape if small else (1,) * a.dim(), dtype=a.dtype,
                               device=device)
        if isinstance(a, torch.device):
            return torch.device(device)
        return a

    sargs, skwargs = pytree.tree_map(stand_in, (args, kwargs),
                                     is_leaf=lambda a: type(a) is Lifted)
    if "device" in skwargs:
        skwargs["device"] = torch.device(device)
    return sargs, skwargs


def _infer(func: OpOverload, args: tuple, kwargs: dict, key: tuple, random: bool) -> Any:
    """(template, output avals, output container or None, hash) for the op with cache key
    `key`, its output shapes from running it on meta tensors."""
    outputs = _meta_outputs(func, args, kwargs)
    if outputs is _FALLBACK or _cpu_refuses_dtypes(func, args, kwargs, random):
        return _FALLBACK
    signature, kw_signature = key[0], key[1]
    count = [0]
    template = (_slotted(signature, count),
                tuple([(k, _slotted(v, count)[0]) for k, v in kw_signature]))
    return (template, *outputs, hash((func, key)))


# What the CPU says when its kernel has no code for an input's dtype ("softmax" not
# implemented for 'Long', argmax(): does not support bool input, ...).
_DTYPE_REFUSALS = ("not supported", "does not support", "only support",
                   "can't be cast to the desired output type", "Unsupported input type",
                   *(f"not implemented for '{name}'" for name in (
                       "Bool", "Byte", "Char", "Short", "Int", "Long")))
# Dtypes whose CPU kernels are gaps of the CPU's, not refusals torch makes everywhere:
# 'Half' (accelerators have those kernels), and the unsigned types torch gives almost no
# kernels (PyTorch/XLA adds uint64 tensors: upstream's test_data_type does).
_UNPROBED = frozenset({torch.uint16, torch.uint32, torch.uint64})
# Ops whose CPU kernel lacks the integer types that torch's other backends have: `histc`
# ("histogram_cpu" not implemented for 'Int'; the accelerators' kernels take every type, and
# transformers' mixture-of-experts layers count tokens per expert with `histc` of int32
# expert ids on any device but the CPU).
_CPU_INTEGER_GAPS = frozenset({torch.ops.aten.histc.default})

_PROBE_ELEMENTS = 1 << 16  # larger tensors are probed with every dimension 1


def _cpu_refuses_dtypes(func: OpOverload, args: tuple, kwargs: dict, random: bool) -> bool:
    """Whether the CPU kernel refuses the dtypes of an op given integer or bool tensors.

    Meta kernels check shapes, not which dtypes a kernel has code for, so `softmax` of an
    int64 tensor recorded and computed garbage where PyTorch raises. The op runs once on
    zero-filled CPU tensors of the same dtypes and shapes (a large tensor with every
    dimension 1), only when a new signature is recorded and only with an integer or bool
    tensor among the inputs; a random op with the CPU generator's state put back after,
    so the probe draws nothing from the user's stream. A refusal of the dtypes sends the
    op to the CPU, which raises torch's own error on the real inputs. Other errors of the
    probe (of its shapes, say) are not refusals.
    """
    if func in _CPU_INTEGER_GAPS:
        return False
    tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    if all(t.dtype.is_floating_point or t.dtype.is_complex for t in tensors) or any(
            t.dtype in _UNPROBED for t in tensors):
        return False
    pargs, pkwargs = _stand_ins(args, kwargs, "cpu")
    try:
        if random:
            with torch.random.fork_rng(devices=[]):
                func(*pargs, **pkwargs)
        else:
            func(*pargs, **pkwargs)
    except Exception as error:  # noqa: BLE001  (any error; only a dtype refusal counts)
        return any(words in str(error) for words in _DTYPE_REFUSALS)
    return False


def _meta_outputs(func: OpOverload, args: tuple, kwargs: dict) -> Any:
    """(output avals, output container type or None) from running on meta tensors."""
    margs, mkwargs = _stand_ins(args, kwargs, "meta")
    try:
        out = func(*margs, **mkwargs)
    except Exception:  # data-dependent shape, no meta kernel, or a user error the CPU reports
        return _FALLBACK
    if isinstance(out, torch.Tensor):
        return ((tuple(out.shape), out.dtype),), None
    if isinstance(out, (tuple, list)) and all(
        o is None or isinstance(o, torch.Tensor) for o in out
    ):
        return tuple(None if o is None else (tuple(o.shape), o.dtype) for o in out), type(out)
    if isinstance(out, tuple) and all(isinstance(o, (torch.Tensor, list)) for o in out):
        # (Tensor[], Tensor) returns (_amp_foreach_non_finite_check_and_unscale, the fused
        # optimizers): one aval per tensor, the lists rebuilt around the node's outputs
        sizes = tuple(len(o) if isinstance(o, list) else None for o in out)
        flat = [t for o in out for t in (o if isinstance(o, list) else [o])]
        if all(isinstance(t, torch.Tensor) for t in flat):
            return tuple((tuple(t.shape), t.dtype) for t in flat), functools.partial(_nest, sizes)
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


# Modules torch imports on first use inside the dispatch of an op (about 2 s together):
# loaded with the engine instead, so that the first transfer and op of a process cost what
# the later ones do (a profiler's trace window opened just before them relies on that).
_LOADED_BY_TORCH_ON_FIRST_OP = (
    # torch's C++ dispatch to any `__torch_dispatch__` subclass looks the DTensor class up
    "torch.distributed.tensor",
    # `torch._disable_dynamo` around torch's Python meta kernels, which shape inference runs
    "torch._dynamo",
)


# Packages whose frames dynamo must not compile on their own. The engine runs eagerly under
# a compiled function (an op that breaks dynamo's graph, the backward after a break, an op
# between two graphs) while dynamo's frame callback is still set, and dynamo would compile
# its Python frames as user code (and jax's, which it does not skip either); so does xm,
# which torch.distributed's xla backend calls from C++ (DDP's reducer, a broadcast dynamo
# left to run eagerly). Registered
# with the engine's first load, not by the dynamo bridge: a break before the first
# compiled graph comes before torch imports the bridge. Code dynamo is tracing may still
# call into them (`xm.all_reduce` under `fullgraph=True` checks its arguments with
# `lowering.collectives`): there they are traced through, as dynamo does for `copy`. The
# bridge is the exception: a traced call of it (a user's AOTAutograd compiler calling
# `extract_compiled_graph` or a compiled graph) runs its engine calls on fake tensors, so
# dynamo breaks the graph there, as at PyTorch/XLA's C++ bridge.
_NOT_COMPILED_ALONE_BY_DYNAMO = ("torch_xla._dynamo", "torch_xla._metrics",
                                 "torch_xla.backend", "torch_xla.core", "torch_xla.lazy",
                                 "torch_xla.lowering", "torch_xla.pjrt", "jax", "jaxlib")
_NEVER_TRACED_BY_DYNAMO = ("torch_xla._dynamo",)


def _load_torch_modules() -> None:
    for name in _LOADED_BY_TORCH_ON_FIRST_OP:
        if name.startswith("torch.distributed") and not torch.distributed.is_available():
            continue
        importlib.import_module(name)
    rules = torch._dynamo.trace_rules
    traced_when_called = getattr(rules, "BUILTIN_INLINE_WHEN_CALLED", None)  # torch 2.13
    for name in _NOT_COMPILED_ALONE_BY_DYNAMO:
        rules.add(name)
        spec = importlib.util.find_spec(name)
        if (traced_when_called is not None and spec is not None and spec.origin
                and name not in _NEVER_TRACED_BY_DYNAMO):
            # a package's folder; a module's own file (its folder would be all of torch_xla)
            package = spec.submodule_search_locations is not None
            traced_when_called.add(os.path.dirname(spec.origin) + "/" if package
                                   else spec.origin)


_load_torch_modules()
tensor.set_dispatcher(run)
