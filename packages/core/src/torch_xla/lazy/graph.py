"""Sync: turn the pending IR of live tensors into one computation, run it, and keep the
results as device data; `materialize`, `to_cpu` and `compute_pending` are syncs too.

The graph key is the roots' structural hashes (computed as nodes were created)
plus the pattern of shared nodes found while collecting the device-data inputs,
so a sync only walks the graph once and never builds strings on a cache hit.
Only a miss goes to `compiler.py`.

Metrics, as PyTorch/XLA records them: `UncachedCompile`/`CachedCompile` per
execution, `TensorsGraphSize` (nodes) and `InputOutputAliasCount` (donated
inputs) per compiled graph, `DeviceLockWait` for the device's lock,
`UnwrapXlaData`/`WrapXlaData` around taking the input buffers and wrapping
the results. `execute(..., eager=True)` runs one op of eager mode (`eager.py`),
timed as `EagerOpCompileTime`/`EagerOpExecuteTime` instead.

Donation (PyTorch/XLA's parameter aliasing, XLA_ENABLE_PARAM_ALIASING, on unless "0"):
a sync gives a program the buffer of an input leaf that nothing can read afterwards, so
XLA writes an output of the same shape and dtype into it (a parameter updated in place
does not exist twice). `_donations` proves that no one else can read the leaf: it is
the only leaf holding its array (`ir.Data.owned`, a program's fresh result) and every
reference to it, and to each node above it in the graph, comes from the graph itself or
from the tensors this sync sets to their results (Python reference counts, so a tensor,
a view's storage, a node of other pending IR, a saved tensor or a cache holding it rules
it out). Only plain syncs donate: not eager mode, op-by-op runs, SPMD (global arrays) or
replicated programs. The donated leaf positions are part of the program key.

User donation (PyTorch/XLA's `_XLAC._set_buffer_donation(t, True)`, `mark_donor` here):
the user marks a tensor's device data as a buffer donor, and a program that reads it
takes the buffer over for an output of its shape and dtype, whoever else still holds it
(the user promises nobody reads it again: a tensor left on a donated buffer raises
`DonatedBufferError` when read). A step's sync (`mark_step`, and syncs of given tensors
unless `sync_xla_data=False`) honours the marks; other syncs only while PyTorch/XLA's
switch `_xla_set_enable_alias_with_buffer_donor_config(True)` is on (`set_donor_config`).
A leaf both marked and updated in place is donated once.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from operator import add, attrgetter, itemgetter, sub
from typing import Any

import jax
import torch
from torch.utils._pytree import tree_leaves

from torch_xla import _metrics
from torch_xla.lazy import (
    analysis,
    compiler,
    dump,
    functional,
    ir,
    plans,
    replicas,
    rng,
    sharding,
    transfer,
)
from torch_xla.lazy.tensor import XLATensor, forget_pending, pending_tensors, take_pending
from torch_xla.pjrt import spmd, threads
from torch_xla.pjrt.client import client

# The outputs of the latest execution on each device: a device runs its executions in
# order, so waiting for these waits for everything (and older buffers are not kept alive).
_in_flight: dict[int, tuple] = {}
# One lock per device: threads syncing on one device launch their programs in turn.
_device_locks: dict[int, threading.RLock] = {}

_UNCACHED = _metrics.counter("UncachedCompile")
_CACHED = _metrics.counter("CachedCompile")
_GRAPH_SIZE = _metrics.metric("TensorsGraphSize")
_ALIASES = _metrics.metric("InputOutputAliasCount")
_LOCK_WAIT = _metrics.metric("DeviceLockWait")
_UNWRAP = _metrics.metric("UnwrapXlaData")
_WRAP = _metrics.metric("WrapXlaData")
_EXECUTE_REPLICATED = _metrics.counter("ExecuteReplicated")

_inputs = attrgetter("inputs")
_rule = attrgetter("rule")
_tensor_node = attrgetter("_node")
_node = itemgetter(0)

# PyTorch/XLA's switch for donating the buffers of tensors a sync overwrites.
PARAM_ALIASING_VARIABLE = "XLA_ENABLE_PARAM_ALIASING"


def param_aliasing() -> bool:
    """Donation is on unless XLA_ENABLE_PARAM_ALIASING is "0" (read at every sync)."""
    return os.environ.get(PARAM_ALIASING_VARIABLE, "1") != "0"


class DonatedBufferError(RuntimeError):
    """A tensor's device buffer was given to a program (`_set_buffer_donation`)."""


# PyTorch/XLA's switch for honouring user-marked donors outside a step's sync, and
# whether any buffer was ever marked (until then a sync never looks for marks).
_donors = {"config": False, "marked": False}


def set_donor_config(enabled: bool) -> None:
    _donors["config"] = bool(enabled)


def donor_config() -> bool:
    return _donors["config"]


def mark_donor(leaf: ir.Data, donate: bool) -> None:
    """Mark (or unmark) `leaf`'s buffer as one a program may take over. 0-dim and empty
    buffers are never taken (`plans.Plan.donatable`): a 0-dim one may be the scalar
    cache's, shared by every tensor of that value."""
    leaf.donor = bool(donate)
    if donate:
        _donors["marked"] = True


def check_not_donated(leaves: Sequence[ir.Data]) -> None:
    """Raise `DonatedBufferError` naming the first of `leaves` whose buffer is gone."""
    for leaf in leaves:
        if type(leaf) is ir.Data and leaf.array.is_deleted():
            shape, dtype = leaf.avals[0]
            raise DonatedBufferError(
                f"an XLA tensor ({str(dtype).removeprefix('torch.')}{list(shape)}) was read "
                "after its device buffer was donated to a computation "
                "(torch_xla._XLAC._set_buffer_donation(t, True), or a torch.compile graph "
                "compiled while it was marked, which donates that argument on every call): "
                "its value is gone. Mark only tensors that are not read again, or copy the "
                "value before the step.")


class DroppedValueError(RuntimeError):
    """A tensor's pending value was dropped before anything computed it."""


class Dropped(ir.NoBuffer):
    """Device data without a buffer: a pending value `drop_pending` threw away."""

    __slots__ = ()

    def __init__(self, aval: ir.Aval, device: int) -> None:
        super().__init__("xla::device_data", aval, device)

    def missing(self) -> Exception:
        shape, dtype = self.avals[0]
        return DroppedValueError(
            f"an XLA tensor ({str(dtype).removeprefix('torch.')}{list(shape)}) was read after "
            "its pending computation was dropped (torch_xla._XLAC._clear_pending_irs): it "
            "has no value. Sync the tensors you still need before dropping the rest.")


def drop_pending(device: int) -> None:
    """Forget the pending computations of every live tensor on `device` without running
    them (PyTorch/XLA's `_clear_pending_irs`): each becomes device data without a buffer
    (`Dropped`), and reading it raises `DroppedValueError`."""
    for t in take_pending(device):
        t._set(Dropped(t._node.avals[t._index], device))


def mark_step() -> None:
    _metrics.counter("MarkStep").inc()
    sync(None)
    if dump.METRICS_FILE:
        dump.save_metrics()
    if analysis.LEVEL:
        analysis.step_marked()


def sync(tensors: Sequence[XLATensor] | None = None, step: bool = True) -> None:
    """Compute `tensors` (every live pending tensor if None) in one graph per device.

    `step` (PyTorch/XLA's `sync_xla_data`): the programs may take over the buffers of the
    tensors they overwrite and of user-marked donors; without it, only of the marked
    donors, and only while `set_donor_config(True)`."""
    if not dump.READ:
        dump.configure(at_sync=True)
        analysis.configure()
    full = tensors is None
    if full:
        sharding.keep_annotations()  # marked tensors' layouts, on values in-place ops gave
    mine = threads.current()  # a thread that chose its device syncs only that device
    if full and mine is not None:
        roots = take_pending(mine)
    else:
        roots = pending_tensors() if full else [t for t in tensors if t._node.rule is not None]
        if full:
            forget_pending()
    if full or roots:
        rng.new_epoch(mine)
    if not roots:
        return
    by_device: dict[int, list[XLATensor]] = {}
    for t in roots:
        by_device.setdefault(t._node.device, []).append(t)
    op_by_op = dump.SYNC_OPBYOP if full else dump.GET_OPBYOP
    for device, group in by_device.items():
        _run(device, group, op_by_op, step)


def materialize(tensors: list[XLATensor]) -> None:
    """Compute the pending ones of `tensors` (in one graph per device), and with them every
    live pending tensor their graph computes on the way.

    A read would otherwise leave those tensors on IR that the next read or step computes
    again from the start: L-BFGS, which reads a value on the host several times per
    iteration, would compile ever longer graphs (each holding every iteration before it),
    and a forward read before its backward would run twice.

    With SPMD over several processes the graph runs on every process's devices: the
    processes meet first, so that one reading alone gets an error, not a hang."""
    roots = [t for t in tensors if t._node.rule is not None]
    if roots:
        if spmd.over_processes():
            spmd.meet_to_run()
        sync(roots + _computed_on_the_way(roots))


def _computed_on_the_way(roots: list[XLATensor]) -> list[XLATensor]:
    """The live pending tensors, other than `roots`, whose node is in `roots`' graph."""
    chosen = {id(t) for t in roots}
    others: dict[int, list[XLATensor]] = {}
    for t in pending_tensors():
        if id(t) not in chosen:
            others.setdefault(id(t._node), []).append(t)
    found: list[XLATensor] = []
    seen: set[int] = set()
    stack = [t._node for t in roots]
    while stack and others:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        if key in others:
            found += others.pop(key)
        stack.extend(n for n, _ in node.inputs if n.rule is not None)
    return found


def join_reads(data: Any, distinct: bool = False) -> None:
    """On a process that does not use the values: take part, in order, in the reads of
    `data`'s XLA tensors (any nesting, computed) that are collectives, as another process
    reads them all (`xm.save` by the master in SPMD over several processes). Each value
    read is dropped at once; tensors this process could read alone are not read.
    `distinct`: read a value once however many of `data`'s tensors alias it (`value_key`),
    as `xm.save` does."""
    seen: set[tuple[int, int]] = set()
    for t in tree_leaves(data):
        if isinstance(t, torch.Tensor) and t.device.type == "xla":
            inner = functional.unwrap(t)
            if distinct:
                if value_key(inner) in seen:
                    continue
                seen.add(value_key(inner))
            if spmd.read_is_collective(inner._node.array):
                to_cpu(inner)


def value_key(t: XLATensor) -> tuple[int, int]:
    """What identifies the device value `t` reads: two tensors with one key alias it."""
    return id(t._node), t._index


def to_cpu(t: XLATensor) -> torch.Tensor:
    materialize([t])
    node = t._node
    if node.donor:
        check_not_donated([node])
    return transfer.to_host(node.array, t.dtype)


def compute_pending(data: Any) -> None:
    """Run the pending computations of all of `data`'s XLA tensors (any nesting) as one
    graph, instead of one graph per tensor as each is moved to the host."""
    materialize([
        functional.unwrap(t)
        for t in tree_leaves(data)
        if isinstance(t, torch.Tensor) and t.device.type == "xla"
    ])


def _drain_at_exit() -> None:
    """Wait for the programs still running when the interpreter exits: tearing the runtime
    down under a running execution aborts the process (`terminate called ...`, exit code
    134) after a script's last `mark_step`. PyTorch/XLA waits at exit too."""
    try:
        wait_device_ops()
    except Exception as error:  # noqa: BLE001 - an exit must not fail on a failed program
        print(f"torch_xla: a program still running at exit failed: {error}", file=sys.stderr)


atexit.register(_drain_at_exit)  # after jax's own handlers: runs before them


def wait_device_ops() -> None:
    for results in list(_in_flight.values()):
        for array in results:
            if array.is_deleted():  # donated to a later program, which it ran before
                continue
            try:
                array.block_until_ready()
            except jax.errors.JaxRuntimeError:
                if not array.is_deleted():  # donated meanwhile by another thread
                    raise
    _in_flight.clear()


def walk(values: list[tuple[ir.Node, int]]):
    """Post-order of every node under `values`, their data leaves, and the sharing pattern.

    A node's inputs are visited last to first, as PyTorch/XLA's post-order does, so the
    programs' parameters come in the order PyTorch/XLA numbers them (in `a + 5` the
    lifted 5 is parameter 0)."""
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
        stack = [[root, len(root.inputs)]]
        while stack:
            top = stack[-1]
            node, i = top
            if i:
                i -= 1
                top[1] = i
                child = node.inputs[i][0]
                edges += 1
                seen = position.get(id(child))
                if seen is not None:
                    shared.append((edges, seen))
                else:
                    stack.append([child, len(child.inputs)])
            else:
                stack.pop()
                position[id(node)] = len(order)
                order.append(node)
                if node.rule is None:
                    leaves.append(node)
    return order, position, leaves, shared


def _run(device: int, tensors: list[XLATensor], op_by_op: bool = False,
         step: bool = True) -> None:
    values = []
    seen: dict[tuple[int, int], int] = {}
    outputs_of: list[int] = []  # tensor i receives output outputs_of[i]
    for t in tensors:
        k = (id(t._node), t._index)
        if k not in seen:
            seen[k] = len(values)
            values.append((t._node, t._index))
        outputs_of.append(seen[k])
    if op_by_op:
        datas = _execute_op_by_op(device, values)
    else:
        datas = execute(device, values, synced=tensors, step=step)
    for t, j in zip(tensors, outputs_of, strict=False):
        t._set(datas[j])


# PyTorch/XLA's `_set_allow_execution`: while False, any graph about to run raises.
_EXECUTION = {"allowed": True}


def set_allow_execution(allow: bool) -> None:
    _EXECUTION["allowed"] = bool(allow)


def execute(device: int, values: list[tuple[ir.Node, int]], eager: bool = False,
            synced: list[XLATensor] | None = None, step: bool = True) -> list[ir.Data]:
    """Compile (or find) the graph computing `values` and run it; its results as data.

    `eager`: the graph is one op of eager mode (its metrics are the `EagerOp*` ones).
    `synced`: the tensors that receive the results (the caller sets each to its value
    right after), which lets the graph take over buffers nothing else can read (donation);
    `step` False leaves those alone (user-marked donors only, under `set_donor_config`).
    In SPMD mode the inputs are global arrays and their layouts are part of the key."""
    if not _EXECUTION["allowed"]:
        raise RuntimeError(
            "Unexpected execution happens inside the compiled function, exiting: a graph "
            "was about to run while execution is disallowed (_set_allow_execution(False)). "
            "Something read a pending value on the host (.item(), .cpu(), print, a Python "
            "branch on a tensor) or ran an op on the CPU.")
    roots = tuple([(n.hash, i) for n, i in values])
    order, position, leaves, plan = plans.walked(roots, values, walk)
    laid_out = spmd.enabled()
    donate = ()
    if synced is not None and not eager and not laid_out:
        users = _donors["marked"] and (step or _donors["config"])
        aliasing = step and param_aliasing()
        if users or aliasing:
            donate = _donations(order, leaves, values, synced if aliasing else None, plan, users)
    key = (device, roots, plan.shared, donate)
    with _device_lock(device):
        start = time.perf_counter()
        arrays = [leaf.array for leaf in leaves]
        if laid_out:
            arrays = on_every_device(leaves, arrays)
            key += spmd.layout_key(arrays)
        _UNWRAP.add(time.perf_counter() - start)
        program = _program(key, device, order, position, leaves, arrays, values, eager, donate)
        if analysis.EXECUTIONS and not eager:
            analysis.executing(program.fingerprint, len(arrays), program.outputs)
        try:
            results = run_program(device, program, arrays, eager)
        except RuntimeError:
            check_not_donated(leaves)
            raise
        del arrays  # a donated buffer is gone: keep no handle on it
    if laid_out:
        _EXECUTE_REPLICATED.value += 1
    if dump.SAVE_FILE:
        dump.save_graph(dump.graph_record("ScheduleSyncTensorsGraph", device, order,
                                          position or plans.positions(order), values,
                                          program.compiled), replicas.dump_ordinal(device))
    start = time.perf_counter()
    datas = [
        ir.Data(array, n.avals[i], device, laid_out and sharding.output_mark(n, array),
                owned=not laid_out)
        for array, (n, i) in zip(results, values, strict=False)
    ]
    _WRAP.add(time.perf_counter() - start)
    client().check_executions()
    return datas


def marked_donations(order: list, position: dict, leaves: list, shared: list, values: list,
                     candidates: set[int]) -> tuple[int, ...]:
    """The positions among `candidates` of the `leaves` the user marked for donation
    (`ir.Data.donor`) that a program computing `values` takes over, as a sync does: each
    needs an output of its shape and dtype, and a replicated program donates nothing. For
    programs compiled apart from a sync (`torch.compile`'s graphs), from `walk`'s results."""
    if not _donors["marked"] or not candidates:
        return ()
    plan = plans.Plan(order, position, leaves, shared, values)
    return _donations(order, leaves, values, None, plan, users=True, only=candidates)


def _donations(order: list, leaves: list, values: list, synced: list | None,
               plan: plans.Plan, users: bool, only: set[int] | None = None) -> tuple[int, ...]:
    """The positions of the `leaves` whose buffers the graph may take over, each with an
    output of its shape and dtype to reuse it (`plan.donatable`): with `users`, those the
    user marked (`ir.Data.donor`, among `only` where given); with `synced`, those that own
    their array (no other leaf or cache holds it) and that nothing outside this graph
    reaches (`_reached`)."""
    marked = [(k, aval) for k, aval in plan.donatable
              if leaves[k].donor and (only is None or k in only)] if users else []
    owned = ([(k, aval) for k, aval in plan.donatable if leaves[k].owned and not leaves[k].donor]
             if synced is not None else [])
    if not (marked or owned):
        return ()
    rules = list(map(_rule, order))
    distinct = dict(zip(map(id, rules), rules, strict=True)).values()  # rules are shared
    if any(getattr(rule, "collective", False) for rule in distinct):
        return ()  # a replicated program: its replicas run without donation
    wanted = plan.wanted.copy()
    donate = []
    for k, aval in marked:
        if wanted[aval] and not leaves[k].array.is_deleted():
            wanted[aval] -= 1
            donate.append(k)
    if owned:
        reached = _reached(order, leaves, values, synced, plan)
        for k, aval in owned:
            leaf = leaves[k]
            if wanted[aval] and id(leaf) not in reached and not leaf.array.is_deleted():
                wanted[aval] -= 1
                donate.append(k)
    return tuple(sorted(donate))


def _reached(order: list, leaves: list, values: list, synced: list,
             plan: plans.Plan) -> set[int]:
    """The ids of the nodes something outside this graph may still read.

    Proved with reference counts: every reference to a node, to each (node, index) entry
    and to each node's input list must be one of the graph's own (an entry held by an
    input list or by `values`, `order`, `leaves`) or the `_node` of a tensor of `synced`,
    which drops it when it takes its result. Anything else (a live tensor or view, its
    storage, pending IR this sync leaves alone, a tensor saved for backward, a cache) is
    one more reference: that node, and everything below it, is reached. The count errs
    one way only: a reference we did not expect keeps a buffer, never the other way
    round. Counted by `map` over whole lists, against the references the plan expects."""
    lists = list(filter(None, map(_inputs, order)))  # `()` is every input-less node's
    entries = list(chain.from_iterable(lists))
    entries += values
    reached, _ = _held_elsewhere(lists, _children)
    entry_reached, distinct = _held_elsewhere(entries, _node_of)
    reached |= entry_reached
    if distinct or len(set(map(id, entries))) == len(entries):
        expected = plan.base
    else:  # a tuple in several input lists: its node is held once, not once per list
        held = Counter(map(id, map(_node, dict(zip(map(id, entries), entries,
                                                     strict=True)).values())))
        expected = list(map(add, plans.base_without_entries(plan),
                            map(held.__getitem__, map(id, order))))
    del entries, lists
    counts = list(map(sys.getrefcount, order))
    extra = list(map(sub, counts, expected))  # 1 (`map`'s) and the references unaccounted
    if max(extra) > 1:
        synced = dict(zip(map(id, synced), synced, strict=True)).values()
        tensors = Counter(map(id, map(_tensor_node, synced)))
        reached.update([id(n) for n, e in zip(order, extra, strict=True)
                        if e > 1 and e - 1 > tensors[id(n)]])
    if reached:
        for n in reversed(order):  # every node before its inputs
            if id(n) in reached:
                reached.update(_children(n.inputs))
    return reached


def _held_elsewhere(objects: list, below) -> tuple[set[int], bool]:
    """(the nodes `below` those of `objects` held outside the graph, whether each object
    is listed once and held nowhere else).

    An object listed k times (in the input lists of nodes, or as an entry in an input
    list or `values`) has k holders in the graph, k more from `objects` and one from
    `map`."""
    counts = list(map(sys.getrefcount, objects))
    if max(counts, default=0) <= 3:
        return set(), True
    reached: set[int] = set()
    listed = Counter(map(id, objects))
    for obj, count in zip(objects, counts, strict=True):
        if count - 1 > 2 * listed[id(obj)]:
            reached.update(below(obj))
    return reached, False


def _children(inputs) -> map:
    return map(id, map(_node, inputs))


def _node_of(entry: tuple) -> tuple[int]:
    return (id(entry[0]),)


def on_every_device(leaves: list[ir.Data], arrays: list) -> list:
    """SPMD: inputs made on one device before the mode was on, replicated (once: the leaf
    keeps the global array)."""
    placed = spmd.on_devices(arrays, tuple(transfer.client().global_devices))
    for leaf, before, after in zip(leaves, arrays, placed, strict=True):
        if after is not before:
            leaf.array = after
    return placed


def placed_layout_key(leaves: list[ir.Data]) -> tuple:
    """SPMD: the part of a program's cache key the layouts of its inputs make, once the
    leaves are placed on every device as a sync places them (`on_every_device`)."""
    return spmd.layout_key(on_every_device(leaves, [leaf.array for leaf in leaves]))


def _program(key: tuple, device: int, order: list, position: dict | None, leaves: list,
             arrays: list, values: list, eager: bool, donate: tuple = ()
             ) -> compiler.Program:
    programs = compiler.cache()
    program = programs.get(key)
    if program is None:
        _UNCACHED.value += 1
        if position is None:  # the walk was replayed from its plan
            position = plans.positions(order)
        out_layouts = sharding.output_layouts(values, nullary=not arrays)
        program = compiler.compile(device, order, position, leaves, values, arrays=arrays,
                                   eager=eager, out_shardings=out_layouts, donate=donate)
        programs.put(key, program)
        _GRAPH_SIZE.add(len(order))
        _ALIASES.add(len(donate))
    else:
        _CACHED.value += 1
    return program


def _device_lock(device: int) -> _Held:
    lock = _device_locks.get(device)
    if lock is None:
        lock = _device_locks.setdefault(device, threading.RLock())
    start = time.perf_counter()
    lock.acquire()
    _LOCK_WAIT.add(time.perf_counter() - start)
    return _Held(lock)


class _Held:
    """An acquired lock as a context manager that releases it."""

    __slots__ = ("lock",)

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        self.lock.release()


def run_program(device: int, program: compiler.Program, arrays: list,
                eager: bool = False) -> list:
    """Run a compiled program on `device` (a sync, or a cached graph of `torch.compile`).

    Returns at once: `ExecuteTime` is taken when the results are ready (`client.launched`);
    the caller calls `client().check_executions()` once it has wrapped them."""
    start = time.perf_counter()
    results = program.run(arrays)
    client().launched(results, start, eager)
    _in_flight[device] = results
    if dump.SYNC_WAIT:
        jax.block_until_ready(results)
    return results


def _execute_op_by_op(device: int, values: list[tuple[ir.Node, int]]) -> list[ir.Data]:
    """`execute`, one computation per node (GET_TENSORS_OPBYOP / SYNC_TENSORS_OPBYOP)."""
    order, _, _, _ = walk(values)
    done: dict[int, list] = {}  # id(node) -> its outputs as data (None where unused)
    for node in order:
        if node.rule is None:
            done[id(node)] = [node]
            continue
        inputs = [(done[id(n)][i], 0) for n, i in node.inputs]
        alone = ir.Node(node.op, node.rule, node.template, inputs, node.avals, device, node.hash)
        alone.location = node.location
        wanted = [(alone, i) for i, aval in enumerate(node.avals) if aval is not None]
        outs = iter(execute(device, wanted))
        done[id(node)] = [None if aval is None else next(outs) for aval in node.avals]
    return [done[id(n)][i] for n, i in values]

