"""Compiling a graph: the walked nodes become one JAX function, jitted by the runtime client
(which also consults the persistent compilation cache), and the in-memory program cache.

Only a cache miss comes here. The function built holds no node, so no device buffer: a
compiled program outlives the tensors it was traced from.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax

from torch_xla import _metrics
from torch_xla.lazy import (
    analysis,
    composite,
    custom_call,
    dtype_policy,
    dump,
    ir,
    manual,
    replicas,
)
from torch_xla.lowering import composite as composite_lowering
from torch_xla.lowering import policy
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import TRACE_EXECUTE, client

# PyTorch/XLA's name and default for the number of compiled graphs kept in memory.
CACHE_SIZE_VARIABLE = "XLA_COMPILATION_CACHE_SIZE"
DEFAULT_CACHE_SIZE = 2048


# The calling convention of compiled graphs (their arguments are the data leaves, in walk
# order, and nothing else): part of every persistent cache key, so a program compiled by an
# engine that called graphs differently is never loaded. Raise it when that changes.
GRAPH_ABI = 2


class LoweringError(RuntimeError):
    """A node could not be lowered; the message names the op (and its Python line)."""


class Program:
    """A compiled graph. A graph holding a collective is `replicated`: it compiles as one
    program that every process of the job runs on its own device (see `replicas.py`).
    `fingerprint` is its compilation key (`stable_key`) and `outputs` its number of
    results, which the debugging tool shows (`lazy/analysis.py`)."""

    __slots__ = ("compiled", "replicated", "fingerprint", "outputs")

    def __init__(self, compiled: Any, replicated: bool = False, fingerprint: str = "",
                 outputs: int = 0) -> None:
        self.compiled = compiled
        self.replicated = replicated
        self.fingerprint = fingerprint
        self.outputs = outputs

    def run(self, arrays: list) -> list:
        with jax.profiler.TraceAnnotation(TRACE_EXECUTE):
            if self.replicated:
                return replicas.execute(self.compiled, arrays)
            return self.compiled(*arrays)


# XLA:CPU maps the code of each compiled program into the process in pieces (tens to
# hundreds of mappings for a training step), and Linux caps a process's mappings
# (vm.max_map_count, 65530 by default). Kept programs reach the cap within a few
# hundred compilations (an LBFGS step compiled about 90 new graphs while its history
# grew, before host reads computed the tensors on their way), and then every compilation
# failed with "LLVM compilation error: Cannot allocate memory". So every
# `_MAPPINGS_CHECKED_EVERY` programs stored, the cache counts the process's mappings;
# past `_MAPPINGS_SHARE` of the cap it drops its older half.
_MAPPINGS_CHECKED_EVERY = 16
_MAPPINGS_SHARE = 0.5


def _mapping_limit() -> int | None:
    try:
        with open("/proc/sys/vm/max_map_count", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None  # not Linux: no such cap to watch


def mappings_crowded(limit: int | None = _mapping_limit()) -> bool:
    """Whether this process holds more than `_MAPPINGS_SHARE` of its memory mappings.
    Reading the map list costs about 1.5 ms per thousand mappings."""
    if limit is None:
        return False
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n") > _MAPPINGS_SHARE * limit


class ProgramCache:
    """Compiled programs by graph key; the least recently used one goes when it is full,
    and the older half when the process runs short of memory mappings."""

    def __init__(self, capacity: int, crowded: Callable[[], bool] = mappings_crowded) -> None:
        self.capacity = capacity
        self._programs: OrderedDict[tuple, Program] = OrderedDict()
        self._lock = threading.Lock()  # threads driving several devices share the cache
        self._crowded = crowded
        self._stored = 0

    def get(self, key: tuple) -> Program | None:
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self._programs.move_to_end(key)
            return program

    def put(self, key: tuple, program: Program) -> None:
        with self._lock:
            self._programs[key] = program
            keep = self.capacity
            self._stored += 1
            if self._stored % _MAPPINGS_CHECKED_EVERY == 0 and self._crowded():
                keep = min(keep, max(1, len(self._programs) // 2))
                _metrics.counter("CompilationCacheMappingEvictions").inc()
            while len(self._programs) > keep:
                self._programs.popitem(last=False)
                _metrics.counter("CompilationCacheEvictions").inc()

    def __len__(self) -> int:
        return len(self._programs)

    def clear(self) -> None:
        self._programs.clear()


def cache_size_from_env(environ: dict | os._Environ = os.environ) -> int:
    text = environ.get(CACHE_SIZE_VARIABLE, "")
    if not text:
        return DEFAULT_CACHE_SIZE
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"{CACHE_SIZE_VARIABLE}={text!r}: expected a whole number of compiled "
                         f"graphs to keep in memory, at least 1 (default {DEFAULT_CACHE_SIZE})")
    return size


_cache: ProgramCache | None = None


def cache() -> ProgramCache:
    """The process's program cache, sized by XLA_COMPILATION_CACHE_SIZE on first use."""
    global _cache
    if _cache is None:
        _cache = ProgramCache(cache_size_from_env())
    return _cache


def _forget_programs() -> None:
    """Programs lowered with another matmul precision must not run again."""
    if _cache is not None:
        _cache.clear()


policy.on_matmul_precision_change(_forget_programs)


# --- building the JAX function ----------------------------------------------------------


def _rebuild(template: Any, ins: list) -> Any:
    if type(template) is ir.Slot:
        return ins[template.index]
    if type(template) is tuple:
        return tuple(_rebuild(x, ins) for x in template)
    return template


class _Step:
    """What a compiled graph needs of one node."""

    __slots__ = ("op", "rule", "template", "avals", "in_avals", "location", "refs", "name",
                 "key")

    def __init__(self, node: ir.Node, refs: list, key: int = -1) -> None:
        self.op, self.rule, self.template = node.op, node.rule, node.template
        self.avals, self.location = node.avals, node.location
        self.in_avals = [n.avals[i] for n, i in node.inputs]
        self.refs = refs
        self.name = metadata_name(node)
        self.key = key  # its position, where a graph with composites keys its values


def metadata_name(node: ir.Node) -> str | None:
    """The name the node's HLO instructions carry in their metadata (`op_name`), as
    PyTorch/XLA names them: the op type (`aten__addmm`) after the node's custom prefix;
    None (jax's own names) unless XLA_HLO_DEBUG/XLA_IR_DEBUG is on or the node has a
    prefix (the `xp.Trace` scopes it was recorded in, or a custom one)."""
    if node.scope is None and not dump.FRAMES:
        return None
    return (node.scope or "") + dump.op_name(node.op).replace(":", "_")


def _where(step: _Step) -> str:
    if step.location:
        return f" (created at {step.location})"
    return "" if ir.IR_DEBUG else "; set XLA_IR_DEBUG=1 to see the Python line that created it"


def _lower_node(step: _Step, ins: list) -> tuple:
    args_t, kw_t = step.template
    args = _rebuild(args_t, ins)
    kwargs = {k: _rebuild(v, ins) for k, v in kw_t}
    try:
        if step.name is None:
            out = step.rule(*args, **kwargs)
        else:
            with jax.named_scope(step.name):
                out = step.rule(*args, **kwargs)
    except Exception as error:
        raise LoweringError(
            f"Lowering {step.op} failed for inputs {step.in_avals}{_where(step)}: "
            f"{type(error).__name__}: {error}"
        ) from error
    return tuple(_check(step, o, aval) for o, aval in zip(_flat(out), step.avals, strict=False))


def _flat(out: Any) -> tuple:
    """A lowering's outputs in node order: a list inside a returned tuple (an op returning
    `(Tensor[], Tensor)`) is spread, as `dispatch` made one node output per tensor."""
    if not isinstance(out, (tuple, list)):
        return (out,)
    return tuple(x for o in out for x in (o if isinstance(o, (tuple, list)) else (o,)))


def _check(step: _Step, out: Any, aval: Any) -> Any:
    if aval is None:
        return None
    shape, dtype = aval
    out = jax.numpy.asarray(out)
    if tuple(out.shape) != shape:
        raise LoweringError(
            f"Lowering {step.op} returned shape {tuple(out.shape)}, but torch computes {shape}"
            + (f" (created at {step.location})" if step.location else "")
        )
    wanted = dtype_policy.STORAGE[dtype]
    return out if out.dtype == wanted else out.astype(wanted)


def graph_function(order: list, position: dict, leaves: list, values: list,
                   exported: bool = False) -> Callable:
    """`fn(*leaf arrays) -> tuple of the values' arrays`, the graph as one JAX function.
    Each marked pattern (`composite.py`) is one `stablehlo.composite`. Marks that enclose
    no region (a `CompositeError`) are an error when the program is shown or `exported`;
    a program that runs takes them as identities instead, since a sync between a
    pattern's marks splits it (as eager mode does every op) and a composite never
    changes a number."""
    try:
        regions = composite.find(order)
        if regions:
            return _function_with_composites(position, leaves, values, regions)
    except composite.CompositeError:
        if exported:
            raise
    leaf_index = {id(leaf): k for k, leaf in enumerate(leaves)}
    steps: list = []
    for n in order:
        if n.rule is None:
            steps.append(leaf_index[id(n)])
        else:
            steps.append(_Step(n, [(position[id(c)], i) for c, i in n.inputs]))
    roots = [(position[id(n)], i) for n, i in values]

    def graph_fn(*arrays):
        env: list[tuple] = []
        for step in steps:
            if type(step) is int:
                env.append((arrays[step],))
            else:
                env.append(_lower_node(step, [env[p][i] for p, i in step.refs]))
        return tuple(env[p][i] for p, i in roots)

    return graph_fn


class _Composite:
    """What a compiled graph needs of one marked region: its work, in order (steps and
    nested composites), and the keys of its operands and results."""

    __slots__ = ("name", "decomposition", "attributes", "operands", "results", "units")

    def __init__(self, region: composite.Region, position: dict) -> None:
        self.name, self.decomposition = region.name, region.decomposition
        self.attributes = region.attributes
        self.operands = _keys(region.operands, position)
        self.results = _keys(region.results, position)
        self.units = _units(composite.schedule(region, region.children, region.results),
                            position)

    def body(self, *arrays: Any) -> list:
        env = dict(zip(self.operands, arrays, strict=True))
        _evaluate(self.units, env)
        return [env[k] for k in self.results]


def _keys(values: list, position: dict) -> list[tuple[int, int]]:
    return [(position[id(n)], i) for n, i in values]


def _units(scheduled: list, position: dict) -> list:
    """Nodes as steps and regions as composites, holding no node (nor device buffer)."""
    return [_Composite(u, position) if type(u) is composite.Region
            else _Step(u, _keys(u.inputs, position), position[id(u)]) for u in scheduled]


def _evaluate(units: list, env: dict) -> None:
    for unit in units:
        if type(unit) is _Composite:
            outs = composite_lowering.call(unit.body, [env[k] for k in unit.operands],
                                           unit.name, unit.decomposition, unit.attributes)
            env.update(zip(unit.results, outs, strict=True))
        else:
            for i, out in enumerate(_lower_node(unit, [env[k] for k in unit.refs])):
                env.setdefault((unit.key, i), out)  # a region's result stays its own


def _function_with_composites(position: dict, leaves: list, values: list,
                              regions: list) -> Callable:
    leaf_keys = [(position[id(leaf)], 0) for leaf in leaves]
    units = _units(composite.schedule(None, regions, values), position)
    roots = _keys(values, position)

    def graph_fn(*arrays):
        env = dict(zip(leaf_keys, arrays, strict=True))
        _evaluate(units, env)
        return tuple(env[k] for k in roots)

    return graph_fn


def compile(device: int, order: list, position: dict, leaves: list, values: list,
            arrays: list | None = None, eager: bool = False, out_shardings: Any = None,
            donate: tuple[int, ...] = ()) -> Program:
    """Compile the graph computing `values` (its nodes in post-`order`) on `device`, for
    the leaves' `arrays` (default: the leaves' own); `eager`: the graph is one op of eager
    mode; `out_shardings`: the results' layouts (SPMD), else the partitioner's choice;
    `donate`: the positions of the leaves whose buffers the program takes over (XLA
    writes outputs of their shape and dtype into them; not for replicated programs)."""
    graph_fn = graph_function(order, position, leaves, values)
    args = [leaf.array for leaf in leaves] if arrays is None else arrays
    if os.environ.get("XLA_STABLEHLO_COMPILE", "") not in ("", "0"):
        # PyTorch/XLA's switch to compile graphs through StableHLO, counted per compile;
        # here every graph is, so the switch changes only the count
        _STABLEHLO_COMPILE.value += 1
    replicated = any(getattr(n.rule, "collective", False) for n in order)
    # One program for every replica: its name leaves out which device recorded it.
    fingerprint = (stable_key(device, order, position, values, replica=True) if replicated
                   else stable_key(device, order, position, values, arrays=args, donate=donate))
    analysed = analysis.COMPILATIONS and not eager
    if analysed:
        analysis.compiling(fingerprint, len(args), len(values))
    if replicated:
        out_avals = [n.avals[i] for n, i in values]
        executable = replicas.compile(graph_fn, args, out_avals, fingerprint)
    else:
        try:
            with manual.partitioner(order):  # GSPMD for a manual-sharding region
                executable = client().compile(fingerprint, graph_fn, *args, eager=eager,
                                              out_shardings=out_shardings, donate=donate)
        except jax.errors.JaxRuntimeError as error:
            raise type(error)(rejected_graph_message(str(error), order)) from error
    if analysed:
        analysis.compiled(executable)
    return Program(executable, replicated, fingerprint, len(values))


_STABLEHLO_COMPILE = _metrics.counter("StableHloCompile")
LISTED_OPS = 12


def rejected_graph_message(reason: str, order: list) -> str:
    """What to tell a user whose graph the device's compiler refused (its message alone
    can be as short as "UNIMPLEMENTED: "): which device, and the graph's ops with their
    input types, one of which the device does not support."""
    ops: dict[str, None] = {}
    for n in order:
        if n.rule is not None:
            types = ", ".join(f"{str(aval[1]).removeprefix('torch.')}{list(aval[0])}"
                              for aval in (c.avals[i] for c, i in n.inputs)
                              if aval is not None)
            ops[f"{n.op}({types})"] = None
    listed = list(ops)[:LISTED_OPS]
    more = f", and {len(ops) - LISTED_OPS} more" if len(ops) > LISTED_OPS else ""
    head = (f"The {client().name} compiler rejected a graph of {len(ops)} distinct ops: "
            f"{reason.strip()}\n")
    if "custom call" in reason and any(n.op == custom_call.OP for n in order):
        return head + (
            "A custom call of the graph (stablehlo_custom_call) names a kernel no one "
            f"registered for the {client().name} device under that API version: register "
            "it first (e.g. jax.ffi.register_ffi_target(name, capsule, platform=...)), or "
            "check the call's name and api_version.")
    return head + (
        f"Its ops, on their input types: {'; '.join(listed)}{more}. One of them is likely "
        "not supported on this device with those types: compute it on the CPU (`.cpu()` "
        "first) or cast its inputs to a supported type.")


def stable_key(device: int, order, position, values, replica: bool = False,
               arrays: list | None = None, donate: tuple[int, ...] = ()) -> str:
    """A process-independent name for the persistent compilation cache; with `replica`,
    the same on every replica device (factories' `device=xla:N` arguments left out).
    In SPMD mode the inputs' layouts (over how many devices) are part of the name, and
    the donated inputs' positions whenever there are some."""
    text = [f"graph-abi-{GRAPH_ABI}", client().name, "replica" if replica else str(device),
            str(client().device(device).device_kind),
            # what else changes the lowering: storage types and the plugin's policies
            repr(sorted((str(k), str(v)) for k, v in dtype_policy.STORAGE.items())),
            f"{policy.dense_gather_factor}|{policy.rng_algorithm}|{policy.matmul_precision}"]
    for n in order:
        refs = [(position[id(c)], i) for c, i in n.inputs]
        text.append(f"{n.op}|{n.template!r}|{refs}|{n.avals}|{getattr(n.rule, '__qualname__', '')}")
    text.append(repr([(position[id(n)], i) for n, i in values]))
    if donate:
        text.append(f"donated inputs {list(donate)}")
    if spmd.enabled():
        devices = client().global_devices
        text.append(f"spmd over {len(devices)}: " + ";".join(
            spmd.sharding_text(a.sharding, a.ndim, devices) for a in arrays or ()))
    joined = "\n".join(text)
    if replica:
        joined = _XLA_DEVICE.sub("device(type='xla')", joined)
    return hashlib.sha256(joined.encode()).hexdigest()


_XLA_DEVICE = re.compile(r"device\(type='xla', index=\d+\)")
