"""Sync: turn the pending IR of live tensors into one compiled XLA computation, and run it.

The graph key is the roots' structural hashes (computed as nodes were created)
plus the pattern of shared nodes found while collecting the device-data inputs,
so a sync only walks the graph once and never builds strings on a cache hit.
Only a miss builds the JAX function and compiles it through the runtime client
(which also consults the persistent compilation cache).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from torch_xla import _metrics
from torch_xla.lazy import dtype_policy, dump, ir, replicas, rng
from torch_xla.lazy.tensor import XLATensor, forget_pending, pending_tensors
from torch_xla.lowering import policy
from torch_xla.pjrt.client import client


class LoweringError(RuntimeError):
    """A node could not be lowered; the message names the op (and its Python line)."""


class Program:
    """A compiled graph and how to feed it.

    A graph holding a collective is `replicated`: it compiles as one program that
    every process of the job runs on its own device (see `replicas.py`).
    """

    __slots__ = ("compiled", "needs_rng", "replicated")

    def __init__(self, compiled: Any, needs_rng: bool, replicated: bool = False) -> None:
        self.compiled = compiled
        self.needs_rng = needs_rng
        self.replicated = replicated


_cache: dict[tuple, Program] = {}
_no_key: dict[int, jax.Array] = {}
# The outputs of the latest execution on each device: a device runs its executions in
# order, so waiting for these waits for everything (and older buffers are not kept alive).
_in_flight: dict[int, tuple] = {}


def mark_step() -> None:
    _metrics.counter("MarkStep").inc()
    sync(None)
    if dump.METRICS_FILE:
        dump.save_metrics()


def sync(tensors: Sequence[XLATensor] | None = None) -> None:
    """Compute `tensors` (every live pending tensor if None) in one graph per device."""
    full = tensors is None
    roots = pending_tensors() if full else [t for t in tensors if t._node.rule is not None]
    if full:
        forget_pending()
    if not roots:
        return
    by_device: dict[int, list[XLATensor]] = {}
    for t in roots:
        by_device.setdefault(t._node.device, []).append(t)
    op_by_op = dump.SYNC_OPBYOP if full else dump.GET_OPBYOP
    for device, group in by_device.items():
        _run(device, group, op_by_op)


def wait_device_ops() -> None:
    for results in list(_in_flight.values()):
        jax.block_until_ready(results)
    _in_flight.clear()


def _walk(values: list[tuple[ir.Node, int]]):
    """Post-order of every node under `values`, their data leaves, and the sharing pattern."""
    position: dict[int, int] = {}
    order: list[ir.Node] = []
    leaves: list[ir.Data] = []
    shared: list[tuple[int, int]] = []
    edges = 0
    for root, _ in values:
        edges += 1
        if id(root) in position:
            shared.append((edges, position[id(root)]))
            continue
        stack = [[root, 0]]
        while stack:
            top = stack[-1]
            node, i = top
            if i < len(node.inputs):
                top[1] = i + 1
                child = node.inputs[i][0]
                edges += 1
                seen = position.get(id(child))
                if seen is not None:
                    shared.append((edges, seen))
                else:
                    stack.append([child, 0])
            else:
                stack.pop()
                position[id(node)] = len(order)
                order.append(node)
                if node.rule is None:
                    leaves.append(node)
    return order, position, leaves, shared


def _run(device: int, tensors: list[XLATensor], op_by_op: bool = False) -> None:
    values = []
    seen: dict[tuple[int, int], int] = {}
    outputs_of: list[int] = []  # tensor i receives output outputs_of[i]
    for t in tensors:
        v = (t._node, t._index)
        k = (id(v[0]), v[1])
        if k not in seen:
            seen[k] = len(values)
            values.append(v)
        outputs_of.append(seen[k])
    datas = _execute_op_by_op(device, values) if op_by_op else _execute(device, values)
    for t, j in zip(tensors, outputs_of, strict=False):
        t._set(datas[j])


def _execute(device: int, values: list[tuple[ir.Node, int]]) -> list[ir.Data]:
    """Compile (or find) the graph computing `values` and run it; its results as data."""
    order, position, leaves, shared = _walk(values)
    key = (device, tuple([(n.hash, i) for n, i in values]), tuple(shared))
    program = _cache.get(key)
    if program is None:
        _metrics.counter("UncachedCompile").inc()
        program = _compile(device, order, position, leaves, values)
        _cache[key] = program
    else:
        _metrics.counter("CachedCompile").inc()
    rng_key = _rng_key(device, program.needs_rng)
    start = time.perf_counter()
    if program.replicated:
        results = replicas.execute(program.compiled, rng_key, [leaf.array for leaf in leaves])
    else:
        results = program.compiled(rng_key, *[leaf.array for leaf in leaves])
    _metrics.metric("ExecuteTime").add(time.perf_counter() - start)
    _in_flight[device] = results
    if dump.SAVE_FILE:
        dump.save_graph(device, order, position, values, program.compiled)
    if dump.SYNC_WAIT:
        jax.block_until_ready(results)
    return [
        ir.Data(array, n.avals[i], device) for array, (n, i) in zip(results, values, strict=False)
    ]


def _execute_op_by_op(device: int, values: list[tuple[ir.Node, int]]) -> list[ir.Data]:
    """`_execute`, one computation per node (GET_TENSORS_OPBYOP / SYNC_TENSORS_OPBYOP)."""
    order, _, _, _ = _walk(values)
    done: dict[int, list] = {}  # id(node) -> its outputs as data (None where unused)
    for node in order:
        if node.rule is None:
            done[id(node)] = [node]
            continue
        inputs = [(done[id(n)][i], 0) for n, i in node.inputs]
        alone = ir.Node(node.op, node.rule, node.template, inputs, node.avals, device, node.hash)
        alone.location = node.location
        wanted = [(alone, i) for i, aval in enumerate(node.avals) if aval is not None]
        outs = iter(_execute(device, wanted))
        done[id(node)] = [None if aval is None else next(outs) for aval in node.avals]
    return [done[id(n)][i] for n, i in values]


def _rng_key(device: int, needed: bool) -> jax.Array:
    if needed:
        return client().to_device(rng.next_key(), device)
    found = _no_key.get(device)
    if found is None:
        found = _no_key[device] = client().to_device(np.zeros(2, np.uint32), device)
    return found


# --- building and compiling a graph (cache misses only) ---------------------------


def _rebuild(template: Any, ins: list) -> Any:
    if type(template) is ir.Slot:
        return ins[template.index]
    if type(template) is tuple:
        return tuple(_rebuild(x, ins) for x in template)
    return template


class _Step:
    """What a compiled graph needs of one node; holds no node, so no device buffer."""

    __slots__ = ("op", "rule", "template", "avals", "in_avals", "location", "refs", "rng_index")

    def __init__(self, node: ir.Node, refs: list, rng_index: int | None) -> None:
        self.op, self.rule, self.template = node.op, node.rule, node.template
        self.avals, self.location = node.avals, node.location
        self.in_avals = [n.avals[i] for n, i in node.inputs]
        self.refs = refs
        self.rng_index = rng_index


def _lower_node(step: _Step, ins: list, rng_key: Any) -> tuple:
    args_t, kw_t = step.template
    args = _rebuild(args_t, ins)
    kwargs = {k: _rebuild(v, ins) for k, v in kw_t}
    if rng_key is not None:
        kwargs["rng"] = rng_key
    try:
        out = step.rule(*args, **kwargs)
    except Exception as error:
        where = (
            f" (created at {step.location})"
            if step.location
            else (
                "" if ir.IR_DEBUG else "; set XLA_IR_DEBUG=1 to see the Python line that created it"
            )
        )
        raise LoweringError(
            f"Lowering {step.op} failed for inputs {step.in_avals}{where}: "
            f"{type(error).__name__}: {error}"
        ) from error
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return tuple(_check(step, o, aval) for o, aval in zip(outs, step.avals, strict=False))


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


def _compile(device: int, order, position, leaves, values) -> Program:
    leaf_index = {id(leaf): k for k, leaf in enumerate(leaves)}
    steps: list = []
    n_rng = 0
    replicated = False
    for n in order:
        if n.rule is None:
            steps.append(leaf_index[id(n)])
            continue
        replicated = replicated or getattr(n.rule, "collective", False)
        rng_index = None
        if getattr(n.rule, "needs_rng", False):
            rng_index, n_rng = n_rng, n_rng + 1
        steps.append(_Step(n, [(position[id(c)], i) for c, i in n.inputs], rng_index))
    roots = [(position[id(n)], i) for n, i in values]

    def graph_fn(key, *arrays):
        env: list[tuple] = []
        base = jax.random.wrap_key_data(key) if n_rng else None
        for step in steps:
            if type(step) is int:
                env.append((arrays[step],))
                continue
            ins = [env[p][i] for p, i in step.refs]
            node_key = None
            if step.rng_index is not None:
                node_key = jax.random.key_data(jax.random.fold_in(base, step.rng_index))
            env.append(_lower_node(step, ins, node_key))
        return tuple(env[p][i] for p, i in roots)

    args = [_rng_key(device, False)] + [leaf.array for leaf in leaves]
    if replicated:
        out_avals = [n.avals[i] for n, i in values]
        fingerprint = _stable_key(device, order, position, values)
        program = replicas.compile(graph_fn, args, out_avals, fingerprint)
        return Program(program, n_rng > 0, replicated=True)
    compiled = client().compile(_stable_key(device, order, position, values), graph_fn, *args)
    return Program(compiled, n_rng > 0)


def _stable_key(device: int, order, position, values) -> str:
    """A process-independent name for the persistent compilation cache."""
    text = [client().name, str(device), str(client().device(device).device_kind),
            # what else changes the lowering: storage types and the plugin's policies
            repr(sorted((str(k), str(v)) for k, v in dtype_policy.STORAGE.items())),
            f"{policy.dense_gather_factor}|{policy.rng_algorithm}"]
    for n in order:
        refs = [(position[id(c)], i) for c, i in n.inputs]
        text.append(f"{n.op}|{n.template!r}|{refs}|{n.avals}|{getattr(n.rule, '__qualname__', '')}")
    text.append(repr([(position[id(n)], i) for n, i in values]))
    return hashlib.sha256("\n".join(text).encode()).hexdigest()
