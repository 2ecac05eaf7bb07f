"""The dynamo bridge: an FX graph from `torch.compile` becomes compiled XLA programs.

On the first call with a given signature (the graph's non-tensor arguments, which
carry the sizes under dynamic shapes) the graph runs once on the lazy engine: its ops
record IR instead of computing. The IR under its outputs (and under the new values of
the inputs it mutated) is compiled into one program, as a sync would compile it, and
every later call only gathers the input buffers, runs that program and wraps its
results: no FX node is interpreted and no IR is built again.

A node the engine cannot record (an op without lowering that runs on the CPU, a CPU
tensor computed from an input) splits the graph: the supported stretches become
compiled programs and the rest runs eagerly between them, as PyTorch/XLA does. A CPU
0-dim tensor that such a stretch reads (an optimizer's step count on the CPU, a bias
correction computed from it) is a program input, copied to the device on each call.

Random ops take a fresh seed on every call. Collectives (`xm.all_reduce`) compile into
the program, which is then replicated over the job's processes.

In SPMD mode a program is compiled for the layouts of its inputs, as a sync's is: the
arguments' layouts are part of the signature (another layout traces and compiles anew)
and of the program's key (shared with syncs), and the results carry the layout the
partitioner gave them (`_LaidOutGraph`).
"""

from __future__ import annotations

import copy
import operator
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo
import torch.fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from torch_xla import _metrics
from torch_xla._dynamo import config
from torch_xla._dynamo.buffer_donor import alias_with_buffer_donor_config  # noqa: F401
from torch_xla.lazy import (
    analysis,
    compiler,
    dump,
    eager,
    functional,
    graph,
    ir,
    nodes,
    replicas,
    rng,
    sharding,
    tensor,
)
from torch_xla.lazy.tensor import XLATensor
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client

# Debugging output, read once at import as PyTorch/XLA does: XLA_DYNAMO_DEBUG=1 prints each
# graph the bridge compiles (its code and arguments) and the nodes that fall back to the
# CPU; PT_XLA_DEBUG=1 the fallback nodes.
dynamo_debug = dump.flag("XLA_DYNAMO_DEBUG")
ptxla_debug = analysis.debug_level() > 0

_SEED = object()  # a program input fed with a fresh RNG seed on every call


class _Host:
    """A program input fed from the CPU 0-dim tensor argument `index` on every call."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


# --- the compiled form of one traced graph -----------------------------------------------


class CompiledGraph:
    """One FX graph for one signature of its arguments, as one compiled program.

    Everything a call needs is planned when the graph compiles, so a call only gathers
    the argument buffers, runs the program and wraps its results:

    - `sources` says where each program input comes from: an argument index, `_SEED`, a
      `_Host` (a CPU 0-dim argument, copied to the device), or a constant `ir.Data`
      captured when tracing (a lifted scalar, a tensor the graph made). The slots of each
      kind are listed once (`_from_args`, `_from_host`, `_constants`, `_seeds`); a
      constant's buffer is read on each call, since the engine may move a leaf's array
      (SPMD places it on every device).
    - `outputs` rebuilds the graph's return value: ("result", k), ("arg", i) for an input
      returned as is, ("value", v) for None, numbers and constants; `_results_only` says
      the return value is just the results in order (no copy of the list to build).
    - `updates` lists the (argument, result) pairs of the inputs the graph mutated.
    """

    __slots__ = ("device", "program", "sources", "avals", "outputs", "container", "updates",
                 "record", "_from_args", "_from_host", "_constants", "_seeds", "_results_only")

    def __init__(self, device: int, program: compiler.Program | None, sources: list,
                 avals: list, outputs: list, container: type | None, updates: list,
                 record: str | None = None) -> None:
        self.device, self.program, self.sources = device, program, sources
        self.avals, self.outputs, self.container = avals, outputs, container
        self.updates = updates
        self.record = record  # the graph as XLA_SAVE_TENSORS_FILE gets it on each call
        self._from_args = [(k, s) for k, s in enumerate(sources) if type(s) is int]
        self._from_host = [(k, s.index) for k, s in enumerate(sources) if type(s) is _Host]
        self._constants = [(k, s) for k, s in enumerate(sources)
                           if type(s) is not int and type(s) is not _Host and s is not _SEED]
        self._seeds = [k for k, s in enumerate(sources) if s is _SEED]
        self._results_only = (container is not None and not updates
                              and outputs == [("result", k) for k in range(len(avals))])

    def __call__(self, *args: Any) -> Any:
        results = self._run(args) if self.program is not None else []
        if self._results_only:
            return results if self.container is list else tuple(results)
        for i, k in self.updates:
            with torch.no_grad():
                args[i].copy_(results[k])
        outs = [results[v] if kind == "result" else args[v] if kind == "arg" else v
                for kind, v in self.outputs]
        if self.container is None:
            return outs[0]
        return outs if self.container is list else tuple(outs)

    def _run(self, args: tuple) -> list:
        arrays = self._inputs(args)
        _INPUT_DATA.add(len(arrays))
        device = self.device
        program = self.program
        if analysis.EXECUTIONS:
            analysis.executing(program.fingerprint, len(arrays), program.outputs, dynamo=True)
        results = graph.run_program(device, program, arrays)
        _OUTPUT_DATA.add(len(results))
        if self.record is not None:
            dump.save_graph(self.record, replicas.dump_ordinal(device))
        wrap = _identity if functional.inside_functionalization() else _to_functional_tensor
        outs = [wrap(XLATensor(ir.Data(array, aval, device)))
                for array, aval in zip(results, self.avals, strict=True)]
        client().check_executions()
        return outs

    def _inputs(self, args: tuple) -> list:
        arrays = [None] * len(self.sources)
        for k, leaf in self._constants:
            arrays[k] = leaf.array
        for k, i in self._from_args:
            node = _engine_tensor(args[i])._node
            if node.rule is not None:
                _sync_inputs(args)
                return self._inputs(args)
            arrays[k] = node.array
        for k, i in self._from_host:
            arrays[k] = nodes.scalar_data(args[i], self.device).array
        for k in self._seeds:
            arrays[k] = client().to_device(rng.next_key(), self.device)
        return arrays


class _LaidOutGraph(CompiledGraph):
    """A `CompiledGraph` in SPMD mode, whose program takes and gives global arrays.

    Each call places the program's inputs on every device, as a sync places them (the
    call's seed, a constant made on one device); the arguments were placed when the
    signature read their layouts (`_layouts`), which fixes the layouts the program was
    compiled for. Its results carry the layout the partitioner gave them: `marks` holds
    each one's `ir.Data.annotated`, as a sync sets it."""

    __slots__ = ("marks", "_devices")

    def __init__(self, *args: Any, marks: list) -> None:
        super().__init__(*args)
        self.marks = marks
        self._devices = tuple(client().global_devices)

    def _inputs(self, args: tuple) -> list:
        arrays = spmd.on_devices(super()._inputs(args), self._devices)
        for k, leaf in self._constants:
            leaf.array = arrays[k]  # placed once
        return arrays

    def _run(self, args: tuple) -> list:
        outs = super()._run(args)
        for out, mark in zip(outs, self.marks, strict=True):  # made just now: none read yet
            _engine_tensor(out)._node.annotated = mark
        return outs


def _output_marks(values: list) -> list:
    """`ir.Data.annotated` of each result of the program computing `values`: in SPMD mode
    what a sync sets (`sharding.output_mark`, which reads only the result's shape), else
    False."""
    if not spmd.enabled():
        return [False] * len(values)
    return [sharding.output_mark(n, _Shaped(n.avals[i][0])) for n, i in values]


class _Shaped:
    """A result's shape: all of it that `sharding.output_mark` reads."""

    __slots__ = ("shape",)

    def __init__(self, shape: tuple) -> None:
        self.shape = shape


def _layouts(args: Sequence[Any]) -> tuple:
    """SPMD: the layouts of the XLA tensor arguments, as a program receives them. Pending
    ones are computed first (`_sync_inputs`, as a call computes them) and data made on one
    device is placed on every device, as a sync places it (once: the argument keeps the
    global array)."""
    leaves = [_engine_tensor(a)._node for a in args
              if isinstance(a, torch.Tensor) and a.device.type == "xla"]
    if any(leaf.rule is not None for leaf in leaves):
        _sync_inputs(args)
        return _layouts(args)
    return graph.placed_layout_key(leaves)


_INPUT_DATA = _metrics.metric("RunCachedGraphInputData")
_OUTPUT_DATA = _metrics.metric("RunCachedGraphOutputData")
_to_functional_tensor = torch._to_functional_tensor


def _identity(t: XLATensor) -> XLATensor:
    return t


def _engine_tensor(t: torch.Tensor) -> XLATensor:
    """`functional.unwrap` for a call's argument, without its checks (made when tracing)."""
    try:
        _functionalize_sync(t)
        inner = _from_functional_tensor(t)
    except RuntimeError:  # not a functional tensor: let `unwrap` say what it is
        return functional.unwrap(t)
    return inner if type(inner) is XLATensor else functional.unwrap(t)


_functionalize_sync = torch._functionalize_sync
_from_functional_tensor = torch._from_functional_tensor


def _sync_inputs(args: Sequence[Any]) -> None:
    """Compute the arguments that are still pending IR, as PyTorch/XLA does: one graph,
    the same one the trace computed them in (`_pending_arguments`), so it compiles once.
    Live pending tensors that graph computes on the way are computed with them (a
    gradient's base, when the argument is a view of it), as a read does
    (`graph.materialize`): the next step would otherwise compute them again."""
    pending = _pending_arguments(args)
    if config.skip_input_data_check:
        raise RuntimeError(
            "input data to dynamo graph can not be a pending ir, please set "
            "`torch_xla._dynamo.config.skip_input_data_check` to False (PyTorch/XLA's words): "
            f"{len(pending)} input(s) of the compiled graph are still pending computations. "
            "Call torch_xla.sync() before the compiled function, or set the switch to False."
        )
    _metrics.counter("DynamoSyncInputExecuteTime").inc()
    graph.materialize(pending)


def _pending_arguments(args: Sequence[Any]) -> list[XLATensor]:
    inner = [functional.unwrap(a) for a in args
             if isinstance(a, torch.Tensor) and a.device.type == "xla"]
    return [t for t in inner if t._node.rule is not None]


# --- tracing: the FX graph run once on the lazy engine ------------------------------------


def _fallbacks() -> int:
    return sum(_metrics.fallback_counts().values())


def _tensors(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _off_xla(value: Any) -> bool:
    return any(t.device.type != "xla" for t in _tensors(value))


def _host_scalar(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() == 0


def _off_xla_operand(value: Any) -> bool:
    """A tensor operand off the device other than a CPU 0-dim one (which a compiled
    stretch takes as a program input)."""
    return any(t.device.type != "xla" and not _host_scalar(t) for t in _tensors(value))


class _Tracer(torch.fx.Interpreter):
    """Runs the graph on the lazy engine and notes the nodes that cannot be recorded: one
    that made the device run something or ran on the CPU, or one that computes a CPU
    tensor from an input (a constant CPU tensor is fine: it becomes a graph constant).

    A node that mixes a CPU 0-dim tensor computed from the inputs into device tensors
    can be recorded, but not with the value this trace saw (the engine lifts it as a
    constant): it is noted in `host_scalars`, and the graph is split so that the tensor
    reaches the stretch holding the node as an argument (`_Inputs`)."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self.unsupported: list[torch.fx.Node] = []
        self.host_scalars: list[torch.fx.Node] = []
        self._from_inputs: set[torch.fx.Node] = set()

    def run_node(self, n: torch.fx.Node) -> Any:
        runs, fallbacks = _metrics.engine_runs(), _fallbacks()
        result = super().run_node(n)
        if n.op == "placeholder" or any(a in self._from_inputs for a in n.all_input_nodes):
            self._from_inputs.add(n)
        if n.op not in ("call_function", "call_method", "call_module"):
            return result
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        from_inputs = n in self._from_inputs
        leaves_cpu = from_inputs and (
            _off_xla(result) or _off_xla_operand(args) or _off_xla_operand(kwargs))
        if leaves_cpu or _metrics.engine_runs() != runs or _fallbacks() != fallbacks:
            self.unsupported.append(n)
        elif from_inputs and (_off_xla(args) or _off_xla(kwargs)):
            self.host_scalars.append(n)
        return result


class _Inputs:
    """The tensor arguments of a trace: made device data, each with its own leaf node.

    With `host`, each CPU 0-dim argument is traced as a device scalar of its own (which
    stands in for it in `args`), a program input fed from the argument on every call. An
    op that reads its value on the host while tracing makes the device run, so the
    stretch is not compiled (`_Tracer`)."""

    def __init__(self, args: Sequence[Any], host: bool = False) -> None:
        self.indices = [i for i, a in enumerate(args)
                        if isinstance(a, torch.Tensor) and a.device.type == "xla"]
        graph.materialize(_pending_arguments(args))  # the graph a call computes them in
        graph.sync(None)  # and whatever else is pending
        self.host: dict[int, tuple[ir.Node, int]] = {}  # argument index -> its leaf
        if host and self.indices:
            device = functional.unwrap(args[self.indices[0]])._node.device
            args = list(args)
            for i, a in enumerate(args):
                if _host_scalar(a):
                    leaf = nodes.scalar_data(a, device)  # a leaf of its own
                    args[i] = functional.wrap(XLATensor(leaf))
                    self.host[i] = (leaf, 0)
        self.args = args
        self.before: dict[int, tuple[ir.Node, int]] = {}
        claimed: dict[int, torch.Tensor] = {}  # id(leaf node) -> the argument holding it
        for i in self.indices:
            inner = functional.unwrap(args[i])
            holder = claimed.setdefault(id(inner._node), args[i])
            if holder is not args[i]:  # two arguments, one buffer: two leaves
                node = inner._node
                node.owned = False  # two leaves share the buffer: neither may donate it
                inner._set(ir.Data(node.array, node.avals[0], node.device))
                claimed[id(inner._node)] = args[i]
            self.before[i] = inner.value

    def arg_of_leaf(self) -> dict[int, int | _Host]:
        sources: dict[int, int | _Host] = {id(node): i for i, (node, _) in self.before.items()}
        sources.update({id(node): _Host(i) for i, (node, _) in self.host.items()})
        return sources

    def mutated(self) -> list[int]:
        return [i for i in self.indices
                if functional.unwrap(self.args[i]).value != self.before[i]]

    def host_mutated(self) -> bool:
        """Whether the graph wrote to a CPU argument (traced on the device: not compiled)."""
        return any(functional.unwrap(self.args[i]).value != v for i, v in self.host.items())

    def restore(self) -> None:
        """Undo the trace: mutated inputs get their value back, its pending IR is dropped."""
        for i in self.mutated():
            with torch.no_grad():
                self.args[i].copy_(functional.wrap(XLATensor(*self.before[i])))
        tensor.forget_pending()
        rng.new_epoch()


def _trace(gm: torch.fx.GraphModule, args: Sequence[Any], host: bool = False,
           ) -> CompiledGraph | list:
    """The graph compiled for these arguments, or the nodes that keep it from being one
    program (`host`: CPU 0-dim arguments are program inputs, see `_Inputs`)."""
    inputs = _Inputs(args, host)
    tracer = _Tracer(gm)
    try:
        with torch.no_grad(), eager.disabled():
            out = tracer.run(*inputs.args)
        if tracer.unsupported or tracer.host_scalars or inputs.host_mutated():
            return tracer.unsupported
        return _build(inputs, out)
    finally:
        inputs.restore()


def _build(inputs: _Inputs, out: Any) -> CompiledGraph:
    values: list[tuple[ir.Node, int]] = []
    index: dict[tuple[int, int], int] = {}

    def result(t: torch.Tensor) -> tuple[str, int]:
        v = functional.unwrap(t).value
        k = (id(v[0]), v[1])
        if k not in index:
            index[k] = len(values)
            values.append(v)
        return "result", index[k]

    args, mutated = inputs.args, inputs.mutated()
    container = (list if isinstance(out, list) else tuple) if isinstance(out, (tuple, list)) \
        else None
    outputs = []
    for o in (out if container is not None else [out]):
        same_arg = [i for i in [*inputs.indices, *inputs.host] if o is args[i]]
        if same_arg and same_arg[0] not in mutated:
            outputs.append(("arg", same_arg[0]))  # a CPU argument: itself
        elif isinstance(o, torch.Tensor) and o.device.type == "xla":
            outputs.append(result(o))
        else:
            outputs.append(("value", o))
    updates = [(i, result(args[i])[1]) for i in mutated]
    device = _device_of(values, args, inputs.indices)
    program, sources, record = (_compile(values, inputs.arg_of_leaf()) if values
                                else (None, [], None))
    avals = [n.avals[i] for n, i in values]
    parts = (device, program, sources, avals, outputs, container, updates, record)
    if spmd.enabled():
        return _LaidOutGraph(*parts, marks=_output_marks(values))
    return CompiledGraph(*parts)


def _device_of(values: list, args: Sequence[Any], indices: list[int]) -> int:
    if values:
        return values[0][0].device
    return functional.unwrap(args[indices[0]])._node.device if indices else 0


def _compile(values: list, arg_of_leaf: dict[int, int]) -> tuple:
    """The program computing `values`, where each of its inputs comes from on a call, and
    its XLA_SAVE_TENSORS_FILE record (None when no dump is asked for).

    An argument whose buffer the user marked for donation (`_set_buffer_donation`, or
    `torch.ops.xla.dynamo_set_buffer_donor_` inside the compiled function) is donated,
    on this and every later call, as PyTorch/XLA's bridge does: dynamo does not guard on
    the mark. One buffer passed as two arguments is never donated."""
    order, position, leaves, shared = graph.walk(values)
    holders = Counter(id(leaf.array) for leaf in leaves)  # buffers held by two leaves
    candidates = {k for k, leaf in enumerate(leaves)
                  if type(arg_of_leaf.get(id(leaf))) is int and holders[id(leaf.array)] == 1}
    donate = graph.marked_donations(order, position, leaves, shared, values, candidates)
    key = _graph_key(values, shared, leaves, donate)
    program = _program(key, order, position, leaves, values)
    seeds = {id(n.inputs[0][0]) for n in order if n.op == rng.KEY_OP}
    sources = [arg_of_leaf.get(id(leaf), _SEED if id(leaf) in seeds else leaf)
               for leaf in leaves]
    record = None
    if dump.SAVE_FILE:
        record = dump.graph_record("dynamo", key[0], order, position, values, program.compiled)
        dump.save_graph(record, replicas.dump_ordinal(key[0]))
    return program, sources, record


def _graph_key(values: list, shared: list, leaves: list, donate: tuple[int, ...] = ()) -> tuple:
    """The key a sync caches the graph computing `values` under (`graph.execute`), so a
    graph compiles once whether a sync or a compiled function runs it first. In SPMD mode
    the leaves are placed on every device first, as a sync places them, and their layouts
    are part of the key: the program is compiled for them."""
    key = (values[0][0].device, tuple([(n.hash, i) for n, i in values]), tuple(shared), donate)
    if spmd.enabled():
        key += graph.placed_layout_key(leaves)
    return key


def _program(key: tuple, order: list, position: dict, leaves: list,
             values: list) -> compiler.Program:
    """From the program cache that syncs use (the same graph compiles once), or compiled.
    In SPMD mode its results get the layouts a sync's get (`sharding.output_layouts`)."""
    programs = compiler.cache()
    program = programs.get(key)
    if program is None:
        _metrics.counter("UncachedCompile").inc()
        out_layouts = sharding.output_layouts(values, nullary=not leaves)
        program = compiler.compile(key[0], order, position, leaves, values,
                                   out_shardings=out_layouts, donate=key[3])
        programs.put(key, program)
    return program


# --- graphs with unsupported nodes: compiled stretches with eager ops between ------------


class _Supported(OperatorSupport):
    def __init__(self, unsupported: list[torch.fx.Node]) -> None:
        super().__init__()
        self.unsupported = set(unsupported)

    def is_node_supported(self, submodules: Any, node: torch.fx.Node) -> bool:
        return node.op in ("call_function", "call_method", "call_module") and (
            node not in self.unsupported or node.target is operator.getitem)


def _partition(gm: torch.fx.GraphModule, unsupported: list[torch.fx.Node]) -> Callable:
    """A copy of `gm` (the partitioner rewrites the graph it is given, and `gm` may be
    traced again for another signature) with each stretch of supported nodes replaced by a
    `GraphFunction` call."""
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    names = {n.name for n in unsupported}
    unsupported = [n for n in gm.graph.nodes if n.name in names]
    partitioner = CapabilityBasedPartitioner(
        gm, _Supported(unsupported), allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and node.name.startswith("fused_"):
            function = GraphFunction(getattr(fused, node.target), guarded=False)
            with fused.graph.inserting_after(node):
                call = fused.graph.call_function(function, node.args, node.kwargs)
            node.replace_all_uses_with(call)
            fused.graph.erase_node(node)
            fused.delete_submodule(node.target)
    fused.recompile()
    return fused


# --- the public entry points ------------------------------------------------------------


class GraphFunction:
    """An FX graph as a callable, compiled once per signature of its arguments.

    A graph from dynamo is `guarded`: dynamo checks the shapes before calling it and passes
    sizes as ints under dynamic shapes, so its non-tensor arguments are the signature, and
    unsupported nodes split it. A part of a split graph is not guarded: the shapes and
    dtypes of its tensors are part of the signature, and it never splits again.
    """

    def __init__(self, gm: torch.fx.GraphModule, guarded: bool = True) -> None:
        self.gm = gm
        self.guarded = guarded
        self.__name__ = self.__qualname__ = "xla_compiled_graph"  # an FX call target's name
        self._numbers: list[int] | None = None  # positions of the non-tensor arguments
        self._by_signature: dict[tuple, Callable] = {}
        self._laid_out = spmd.enabled()  # the arguments' layouts are part of the signature

    def __call__(self, *args: Any) -> Any:
        compiled = self._by_signature.get(self._signature(args))
        if compiled is None:
            compiled = self.compile_for(args)
        return compiled(*args)

    def _signature(self, args: Sequence[Any]) -> tuple:
        numbers = self._numbers
        if numbers is None:
            numbers = self._numbers = [i for i, a in enumerate(args)
                                       if not isinstance(a, torch.Tensor)]
        numbers = tuple([args[i] for i in numbers]) if numbers else ()
        if self._laid_out:
            numbers += _layouts(args)
        if self.guarded:
            return numbers
        return numbers + tuple([(a.shape, a.dtype) for a in args if isinstance(a, torch.Tensor)])

    @property
    def specializes(self) -> bool:
        """Whether one compiled program does not serve every call."""
        return bool(self._numbers) or not self.guarded or self._laid_out

    def compile_for(self, args: Sequence[Any]) -> Callable:
        """Trace and compile the graph for the signature of `args` (replacing any earlier)."""
        if self._laid_out:  # the trace computes pending arguments anyway: never an error
            graph.sync(_pending_arguments(args))
        compiled = self._by_signature[self._signature(args)] = self._compile(args)
        return compiled

    def _compile(self, args: Sequence[Any]) -> Callable:
        traced = _trace(self.gm, args, host=not self.guarded)
        if isinstance(traced, CompiledGraph):
            return traced
        if dynamo_debug or ptxla_debug:
            print(f"Dynamo fallback ops are {traced}: they run on the CPU between the "
                  "compiled parts of the graph. Please open an issue asking for their "
                  "lowering.")
        if self.guarded:
            return _partition(self.gm, traced)
        return self.gm  # a stretch that still needs the device mid-way: run it lazily


def extract_internal(xla_model: torch.fx.GraphModule) -> GraphFunction:
    """`xla_model` as a `GraphFunction` whose every node the engine can record (each call
    runs one compiled program); PyTorch/XLA's name for the compiler of one partition."""
    return GraphFunction(xla_model, guarded=False)


def extract_compiled_graph(xla_model: torch.fx.GraphModule, xla_args: Sequence[Any]) -> Callable:
    """Compile dynamo's graph `xla_model` for the arguments `xla_args` (real tensors, on
    the XLA device); the callable returned takes the same arguments on every call."""
    _metrics.counter("DynamoExtractCompiledGraph").inc()
    if dynamo_debug:
        print("=== torch_xla dynamo bridge: compiling ===")
        print(xla_model.code.strip())
        print("arguments:", [(tuple(a.shape), a.dtype, str(a.device)) if isinstance(
            a, torch.Tensor) else a for a in xla_args])
    for a in xla_args:
        if isinstance(a, torch.Tensor) and a.device.type != "xla":
            warnings.warn(f"Found tensor with shape {a.size()} on {a.device}. Please move all "
                          "tensors to the xla device to execute on the XLA device.", stacklevel=2)
    function = GraphFunction(xla_model)
    compiled = function.compile_for(xla_args)
    # Without numbers there is one signature: dynamo's guards already fix every shape.
    return function if function.specializes else compiled


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is on the XLA device (PyTorch/XLA's helper)."""
    return tensor.device.type == "xla"


def get_fallback_ops() -> list[str]:
    """The ops that ran on the CPU since the counters were last cleared (PyTorch/XLA's
    helper, the same list as `torch_xla._XLAC._get_executed_fallback_ops()`)."""
    return _metrics.fallback_ops()


class GraphInputMatcher:
    """The inputs of a cached graph for a call (PyTorch/XLA's helper, same arguments).

    `graph_input_tensor_ids` names each graph input by the id of the tensor it was traced
    from (`torch_xla._XLAC._xla_get_tensor_id`); those in `xla_args_tensor_id` are taken
    from the call's arguments at `tensor_id_to_arg_idx`, the others are the traced values
    in `graph_input_xla_values` (constants such as parameters captured by the graph).
    """

    def __init__(self, tensor_id_to_arg_idx: dict[int, int], graph_input_tensor_ids: list[int],
                 graph_input_xla_values: list[torch.Tensor], xla_args_tensor_id: set[int]) -> None:
        self.tensor_id_to_arg_idx = tensor_id_to_arg_idx
        self.graph_input_tensor_ids = graph_input_tensor_ids
        self.graph_input_xla_values = [
            None if tid in xla_args_tensor_id else value
            for tid, value in zip(graph_input_tensor_ids, graph_input_xla_values, strict=True)]
        self.arg_idxs = [tensor_id_to_arg_idx.get(tid) for tid in graph_input_tensor_ids]

    def __call__(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [value if i is None else args[i]
                for i, value in zip(self.arg_idxs, self.graph_input_xla_values, strict=True)]


class NoneRemover:
    """Takes the Nones out of a graph's results and puts them back (PyTorch/XLA's helper):
    `remove_nones` notes their positions in `none_poslist`, `add_nones` reinserts them.
    A list is changed in place (and returned); a tuple gives a new tuple."""

    def __init__(self) -> None:
        self.none_poslist: list[int] = []

    def remove_nones(self, value: list | tuple) -> list | tuple:
        self.none_poslist = [i for i, v in enumerate(value) if v is None]
        kept = [v for v in value if v is not None]
        if isinstance(value, list):
            value[:] = kept
            return value
        return tuple(kept)

    def add_nones(self, value: list | tuple) -> list | tuple:
        full = list(value)
        for i in self.none_poslist:
            full.insert(i, None)
        if isinstance(value, list):
            value[:] = full
            return value
        return tuple(full)


# --- PyTorch/XLA's cached-graph entry points (torch_xla._XLAC) ----------------------------
#
# Its bridge is written against these: a graph is named by a hash of the pending values
# it computes, warmed up (compiled) once, then run on new inputs given in the order of
# its device-data leaves. A tensor's id is that of the value it holds, so an argument
# is found among the leaves of a graph traced from it.

# name -> (program, device, its results' avals, their `_output_marks`)
_warm_graphs: dict[str, tuple[compiler.Program, int, list, list]] = {}
# name -> (the key a sync caches the named graph under, its results' avals and marks): the
# graphs `graph_hash` named, so that `run_cached_graph` finds one a sync compiled. Bounded:
# a program that hashes a new graph every step must not grow it without end.
_named: dict[str, tuple[tuple, list, list]] = {}
_NAMED_KEPT = 4096


def tensor_id(t: torch.Tensor) -> int:
    """The id of the value `t` holds (`_xla_get_tensor_id`)."""
    return id(functional.unwrap(t)._node)


def _graph_values(tensors: Sequence[torch.Tensor]) -> list[tuple[ir.Node, int]]:
    """The pending values of `tensors`, once each: device data is no graph output."""
    values, seen = [], set()
    for t in tensors:
        node, i = functional.unwrap(t).value
        if node.rule is not None and (id(node), i) not in seen:
            seen.add((id(node), i))
            values.append((node, i))
    return values


def graph_hash(tensors: Sequence[torch.Tensor]) -> str:
    """A name for the graph computing `tensors` (`_get_graph_hash`). Under the buffer-donor
    config (`alias_with_buffer_donor_config`) the leaves marked for donation are part of
    it, as in PyTorch/XLA: the same graph donating other buffers is another program."""
    values = _graph_values(tensors)
    if not values:
        return ""
    order, _, leaves, shared = graph.walk(values)
    key = _graph_key(values, shared, leaves)
    named = key
    if graph.donor_config():
        named += (tuple([k for k, leaf in enumerate(leaves) if getattr(leaf, "donor", False)]),)
    name = _hash_name(named)
    _named.pop(name, None)
    _named[name] = (key, [n.avals[i] for n, i in values], _output_marks(values))
    if len(_named) > _NAMED_KEPT:
        del _named[next(iter(_named))]
    return name


def _hash_name(key: tuple) -> str:
    return f"{hash(key) & 0xFFFFFFFFFFFFFFFF:016x}"


def device_data_inputs(tensors: Sequence[torch.Tensor]) -> tuple[list[int], list[torch.Tensor]]:
    """The ids and values of the device data the graph of `tensors` reads, in the order
    `run_cached_graph` takes them (`_get_tensors_xla_device_data_node`)."""
    values = _graph_values(tensors)
    order, _, leaves, _ = graph.walk(values) if values else ([], None, [], None)
    seeds = {id(n.inputs[0][0]) for n in order if n.op == rng.KEY_OP}
    ids = [rng.SEED_INFO_ID if id(leaf) in seeds else id(leaf) for leaf in leaves]
    return ids, [functional.wrap(XLATensor(leaf)) for leaf in leaves]


def warm_up_cache(tensors: Sequence[torch.Tensor]) -> None:
    """Compile the graph computing `tensors` without running it (`_xla_warm_up_cache`)."""
    values = _graph_values(tensors)
    if not values:
        return
    order, position, leaves, shared = graph.walk(values)
    key = _graph_key(values, shared, leaves)
    program = _program(key, order, position, leaves, values)
    _warm_graphs[_hash_name(key)] = (program, key[0], [n.avals[i] for n, i in values],
                                     _output_marks(values))


def run_cached_graph(name: str, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run a compiled graph on `inputs` (`_run_cached_graph`), given in the order of its
    device-data leaves (`device_data_inputs`); its outputs. The graph is one warmed up
    (`warm_up_cache`) or one that `graph_hash` named and a sync has since compiled. CPU
    inputs are copied to the graph's device."""
    found = _warm_graphs.get(name)
    if found is None and name in _named:
        key, avals, marks = _named[name]
        program = compiler.cache().get(key)
        found = None if program is None else (program, key[0], avals, marks)
    if found is None:
        raise RuntimeError(f"No compiled graph with hash {name!r}: compile it first, with "
                           "torch_xla._XLAC._xla_warm_up_cache(tensors, []) or a sync of the "
                           "tensors it computes (after naming it with _get_graph_hash).")
    program, device, avals, marks = found
    to = tensor.torch_device(device)
    inner = [functional.unwrap(t if t.device.type == "xla" else t.to(to)) for t in inputs]
    graph.sync([t for t in inner if t._node.rule is not None])
    _INPUT_DATA.add(len(inner))
    arrays = [t._node.array for t in inner]
    if spmd.enabled():
        arrays = graph.on_every_device([t._node for t in inner], arrays)
    if analysis.EXECUTIONS:
        analysis.executing(program.fingerprint, len(arrays), program.outputs, dynamo=True)
    results = graph.run_program(device, program, arrays)
    _OUTPUT_DATA.add(len(results))
    outs = [functional.wrap(XLATensor(ir.Data(a, aval, device, mark)))
            for a, aval, mark in zip(results, avals, marks, strict=True)]
    client().check_executions()
    return outs
