"""Export a `torch.export` program as StableHLO (`torch_xla.stablehlo`), as PyTorch/XLA's
module of the same name: the program's StableHLO text and bytecode, a bundle of it with
the weights that saves to and loads from a folder, and runs on the XLA device.

    exported = torch.export.export(model, (x,))
    shlo = exported_program_to_stablehlo(exported)
    print(shlo.get_stablehlo_text())          # module @... { func.func @main(...) }
    shlo.save("/tmp/model")                   # functions/, data/, constants/
    StableHLOGraphModule.load("/tmp/model")(x_on_xla)

How: the program (decomposed to core ATen) runs once on the lazy engine with its
parameters, buffers, constants and user inputs as device data, each its own leaf; the
graph under its user outputs is lowered as one JAX function whose arguments are those
leaves (in the program's order: parameters, buffers, constants, user inputs; only those
the graph reads) and whose other leaves are constants of the module. An op the engine
cannot lower (one that would run on the CPU) makes the export fail with its name.
Patterns marked with `torch.ops.xla.mark_tensor` (`StableHLOCompositeBuilder`) become
`stablehlo.composite` ops (`lazy/composite.py`; docs/guide/export.md).

The folder holds what PyTorch/XLA's does: `functions/<name>.meta` (JSON of
`StableHLOFunctionMeta`), `.bytecode` (StableHLO bytecode) and `.mlir` (text),
`data/<state dict key>` (`numpy.save` of each weight) and `constants/<i>`. A bundle
written by PyTorch/XLA loads and runs here too.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import io
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import ml_dtypes
import numpy as np
import torch
import torch.fx
from jax._src.interpreters import mlir
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

import torch_xla
from torch_xla import _metrics
from torch_xla._atomic import atomic_open
from torch_xla.lazy import compiler, custom_call, eager, functional, graph, ir, transfer
from torch_xla.lazy.tensor import XLATensor
from torch_xla.pjrt.client import client

__all__ = ["InputLocation", "StableHLOExportOptions", "StableHLOFunc", "StableHLOFunctionMeta",
           "StableHLOGraphModule", "StableHLOJSONSerializer", "StableHLOModelBundle",
           "VariableSignature", "VariableType", "XLAExportInterpreter",
           "exported_program_to_stablehlo", "save_as_stablehlo",
           "save_torch_model_as_stablehlo", "stablehlo_obj_hook"]

_METHOD = "forward"
_STABLEHLO_VERSION = "0.0.0"  # as PyTorch/XLA writes it: the bytecode carries its own


@dataclass
class StableHLOExportOptions:
    """How to export.

    include_human_readable_text: also keep the StableHLO text (`.mlir` when saved).
    override_tracing_arguments / override_tracing_kwargs: trace with these user inputs
        instead of the exported program's example inputs.
    save_weights: write the weights (`data/`) when saving.
    inline_all_constant: tensors the program makes from constants (not its inputs) are
        constants of the module; False: arguments of it, kept in `constants/`.
    export_weights: keep the weights in the bundle at all.
    custom_ops_allowed_in_graph: namespaces of custom ops (`torch.library`) kept in the
        StableHLO as custom calls named after the op (`@my_lib.my_op.default`), their
        outputs shaped as the op's fake (Meta) kernel says; the program's runner provides
        them.
    export_node_metadata: PyTorch/XLA's MLIR locations; True is refused (see
        docs/migration.md).
    """
    include_human_readable_text: bool = True
    override_tracing_arguments: tuple[Any, ...] | None = None
    override_tracing_kwargs: Mapping[str, Any] | None = None
    save_weights: bool = True
    inline_all_constant: bool = True
    export_weights: bool = True
    custom_ops_allowed_in_graph: set[str] = field(default_factory=set)
    export_node_metadata: bool = False


class VariableType(enum.Enum):
    INPUT_ARG = "input_arg"
    PARAMETER = "parameter"
    CONSTANT = "constant"


@dataclass
class VariableSignature:
    """Shape and dtype (torch's name without `torch.`, e.g. "float32") of a value."""
    shape: list[int]
    dtype: str
    dynamic_dims: list[int] = field(default_factory=list)


@dataclass
class InputLocation:
    """Where an argument of the StableHLO function comes from when it is called: a weight
    of the bundle (`name`), the caller's flattened input `position`, or the bundle's
    constant `position`."""
    type_: VariableType
    position: int = -1
    name: str = ""

    @classmethod
    def parameter(cls, name: str) -> InputLocation:
        return cls(type_=VariableType.PARAMETER, name=name)

    @classmethod
    def input_arg(cls, position: int) -> InputLocation:
        return cls(type_=VariableType.INPUT_ARG, position=position)

    @classmethod
    def constant(cls, position: int) -> InputLocation:
        return cls(type_=VariableType.CONSTANT, position=position)


@dataclass
class StableHLOFunctionMeta:
    name: str
    stablehlo_version: str
    input_signature: list[VariableSignature]
    output_signature: list[VariableSignature]
    input_locations: list[InputLocation]
    unused_inputs: list[tuple[InputLocation, VariableSignature]]
    input_pytree_spec: str | None = None
    output_pytree_spec: str | None = None


@dataclass
class StableHLOFunc:
    meta: StableHLOFunctionMeta
    bytecode: bytes
    text: str | None


@dataclass
class StableHLOModelBundle:
    state_dict: dict[str, Any]  # numpy arrays
    additional_constants: list[np.ndarray]
    stablehlo_funcs: list[StableHLOFunc]


class StableHLOJSONSerializer(json.JSONEncoder):
    """JSON of the metadata dataclasses (and `VariableType` as its value)."""

    def default(self, obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        if isinstance(obj, VariableType):
            return obj.value
        return super().default(obj)


def stablehlo_obj_hook(dct: dict) -> Any:
    """`json.load`'s object hook that rebuilds the metadata dataclasses."""
    for cls in (StableHLOFunctionMeta, StableHLOFunc, VariableSignature, InputLocation):
        if set(dct) == {f.name for f in dataclasses.fields(cls)}:
            if cls is InputLocation:
                dct = {**dct, "type_": VariableType(dct["type_"])}
            return cls(**dct)
    return dct


# --- running a function of a bundle -------------------------------------------------------


def _dtype_name(dtype: np.dtype) -> str:
    """torch's name of a numpy dtype (they agree but for bfloat16, which is ml_dtypes')."""
    return "bfloat16" if dtype == ml_dtypes.bfloat16 else np.dtype(dtype).name


def _numpy_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in the StableHLO function's signature")
    return dtype


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return transfer.to_numpy(t.detach().cpu())


class StableHLOGraphModule:
    """The functions of a bundle, callable on XLA tensors (or CPU tensors and numpy
    arrays, copied to the device); `forward` is the default one."""

    def __init__(self, bundle: StableHLOModelBundle) -> None:
        self._bundle = bundle
        self._name_to_func = {f.meta.name: f for f in bundle.stablehlo_funcs}
        self._default_method = bundle.stablehlo_funcs[0].meta.name
        self._executables: dict[str, Any] = {}

    def _func(self, method_name: str | None) -> StableHLOFunc:
        name = method_name or self._default_method
        if name not in self._name_to_func:
            raise KeyError(f"no StableHLO function {name!r}; this bundle has "
                           f"{sorted(self._name_to_func)}")
        return self._name_to_func[name]

    def get_stablehlo_bytecode(self, method_name: str | None = None) -> bytes:
        return self._func(method_name).bytecode

    def get_stablehlo_text(self, method_name: str | None = None) -> str | None:
        return self._func(method_name).text

    def evaluate(self, method_name: str, args: Any) -> Any:
        """Run `method_name` on `args` (the exported program's inputs); returns its user
        outputs, as XLA tensors on the default device."""
        func = self._func(method_name)
        meta = func.meta
        flat, _ = pytree.tree_flatten(tuple(args))
        device = torch_xla.device()
        index = device.index or 0
        arrays = []
        for location, signature in zip(meta.input_locations, meta.input_signature, strict=True):
            if location.type_ == VariableType.PARAMETER:
                value = self._bundle.state_dict[location.name]
            elif location.type_ == VariableType.CONSTANT:
                value = self._bundle.additional_constants[location.position]
            else:
                value = flat[location.position]
            arrays.append(_device_array(value, signature, index))
        results = client().run_stablehlo(self._executable(meta.name, func.bytecode, index),
                                         arrays)
        outputs = [functional.wrap(XLATensor(ir.Data(
            array, (tuple(s.shape), _torch_dtype(s.dtype)), index, owned=True)))
            for array, s in zip(results, meta.output_signature, strict=True)]
        if meta.output_pytree_spec is not None:
            return pytree.tree_unflatten(outputs, pytree.treespec_loads(meta.output_pytree_spec))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _executable(self, name: str, bytecode: bytes, index: int) -> Any:
        key = f"{name}:{index}"
        if key not in self._executables:
            _metrics.counter("StableHloCompile").inc()
            self._executables[key] = client().compile_stablehlo(bytecode, index)
        return self._executables[key]

    def __call__(self, *args: Any) -> Any:
        return self.evaluate(self._default_method, args)

    def save(self, directory_path: str | os.PathLike,
             options: StableHLOExportOptions | None = None) -> None:
        _save_bundle(self._bundle, os.fspath(directory_path),
                     options or StableHLOExportOptions())

    @classmethod
    def load(cls, directory_path: str | os.PathLike) -> StableHLOGraphModule:
        return cls(_load_bundle(os.fspath(directory_path)))


def _device_array(value: Any, signature: VariableSignature, index: int) -> jax.Array:
    """`value` (an XLA or CPU tensor, a numpy array) as a device array of `signature`."""
    if isinstance(value, torch.Tensor) and value.device.type == "xla":
        inner = functional.unwrap(value)
        graph.materialize([inner])
        node, _ = inner.value
        if inner.value[1] == 0 and isinstance(node, ir.Data) and node.device == index and \
                list(node.array.shape) == list(signature.shape) and \
                node.array.dtype == _numpy_dtype(signature.dtype):
            return node.array  # already the argument, on its device
        value = value.cpu()  # another device, storage dtype or shape: checked below
    host = _to_numpy(value) if isinstance(value, torch.Tensor) else np.asarray(value)
    want = _numpy_dtype(signature.dtype)
    if want == ml_dtypes.bfloat16 and host.dtype.kind == "V" and host.dtype.itemsize == 2:
        host = host.view(want)  # numpy.save writes bfloat16 as raw 2-byte records
    if host.dtype != want or list(host.shape) != list(signature.shape):
        raise ValueError(f"the StableHLO function takes {signature.dtype}{signature.shape} "
                         f"here, got {host.dtype}{list(host.shape)}")
    return client().to_device(host, index)


# --- export -------------------------------------------------------------------------------


class XLAExportInterpreter(torch.fx.Interpreter):
    """Runs an exported program's graph on XLA tensors: ops that name a device (factory
    calls) make their tensors on the XLA device instead, and ops of the namespaces in
    `custom_ops_allowed_in_graph` become custom calls named after them
    (`stablehlo.custom_call @my_lib.my_op.default`, outputs as the graph's fake values
    say), which whoever runs the StableHLO provides."""

    def __init__(self, module: torch.fx.GraphModule, device: torch.device,
                 custom_ops_allowed_in_graph: set[str] | frozenset[str] = frozenset()
                 ) -> None:
        super().__init__(module)
        self._device = device
        self._custom_ops = frozenset(custom_ops_allowed_in_graph)

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "call_function" and getattr(n.target, "namespace", None) in self._custom_ops:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            operands = [*args, *kwargs.values()]
            if not all(isinstance(a, torch.Tensor) for a in operands):
                raise ValueError(
                    f"{n.target} takes arguments that are not tensors "
                    f"({[type(a).__name__ for a in operands]}), which a custom call cannot "
                    "carry: leave its namespace out of custom_ops_allowed_in_graph, or "
                    "give the op tensor arguments only.")
            shapes, dtypes = custom_call.fx_node_outputs(n)
            results = custom_call.record(operands, str(n.target), shapes, dtypes)
            return results[0] if isinstance(n.meta["val"], torch.Tensor) else tuple(results)
        return super().run_node(n)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if "device" in kwargs:
            kwargs = {**kwargs, "device": self._device}
        return super().call_function(target, args, kwargs)


def _user_inputs(exported: ExportedProgram, options: StableHLOExportOptions
                 ) -> tuple[tuple, dict]:
    args = options.override_tracing_arguments
    kwargs = options.override_tracing_kwargs
    if args is None or kwargs is None:
        if exported.example_inputs is None:
            raise ValueError("the exported program keeps no example inputs: pass them as "
                             "StableHLOExportOptions(override_tracing_arguments=...)")
        example_args, example_kwargs = exported.example_inputs
        args = example_args if args is None else args
        kwargs = example_kwargs if kwargs is None else kwargs
    return tuple(args), dict(kwargs)


def _state_value(exported: ExportedProgram, spec: Any) -> torch.Tensor:
    if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and
                                            spec.target in exported.state_dict):
        return exported.state_dict[spec.target]
    return exported.constants[spec.target]  # non-persistent buffers, lifted constants


def _signature(t: torch.Tensor) -> VariableSignature:
    return VariableSignature(shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."))


@dataclass
class _Argument:
    """An argument of the function being built: where it comes from and its value."""
    location: InputLocation
    value: torch.Tensor  # on the CPU (weights, constants) or the caller's (inputs)


def exported_program_to_stablehlo(exported_model: ExportedProgram,
                                  options: StableHLOExportOptions | None = None
                                  ) -> StableHLOGraphModule:
    """The StableHLO of `exported_model` (a `torch.export.export` result), as a bundle
    with its weights."""
    options = options or StableHLOExportOptions()
    if options.export_node_metadata:
        raise NotImplementedError(
            "StableHLOExportOptions: export_node_metadata (PyTorch/XLA's MLIR locations) "
            "is not supported; leave it False.")
    exported = _run_decompositions(exported_model)
    _warn_dynamic_dims(exported)
    args, kwargs = _user_inputs(exported, options)
    flat_user, in_spec = pytree.tree_flatten((args, kwargs))
    if in_spec != exported.call_spec.in_spec:
        raise ValueError(f"the tracing arguments do not have the exported program's input "
                         f"structure: {in_spec} vs {exported.call_spec.in_spec}")
    signature = exported.graph_signature
    arguments: list[_Argument | None] = []  # one per placeholder (None: not a tensor)
    values: list[Any] = []  # what each placeholder is traced with
    user = iter(range(len(flat_user)))
    for spec in signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            position = next(user)
            value = flat_user[position]
            values.append(value)
            arguments.append(_Argument(InputLocation.input_arg(position), value)
                             if isinstance(value, torch.Tensor) else None)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            values.append(_state_value(exported, spec))
            arguments.append(_Argument(InputLocation.parameter(spec.target), values[-1]))
        else:
            raise NotImplementedError(f"exporting a program with a {spec.kind.name} input "
                                      f"({spec.arg}) is not supported")
    func, constants = _lower(exported, arguments, values, options)
    state = {}
    if options.export_weights:
        state = {a.location.name: _to_numpy(a.value) for a in arguments
                 if a is not None and a.location.type_ == VariableType.PARAMETER}
    return StableHLOGraphModule(StableHLOModelBundle(state, constants, [func]))


def _warn_dynamic_dims(exported: ExportedProgram) -> None:
    """Say so when the program has dynamic dimensions (`torch.export`'s `Dim`): the export
    traces the example inputs, so each becomes the example's size, and the StableHLO
    takes those shapes only (PyTorch/XLA would keep them as `?`)."""
    placeholders = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    dynamic = []
    for spec in exported.graph_signature.input_specs:
        node = placeholders.get(spec.arg.name) if spec.kind == InputKind.USER_INPUT else None
        value = None if node is None else node.meta.get("val")
        if isinstance(value, torch.Tensor):
            dims = [i for i, d in enumerate(value.shape) if isinstance(d, torch.SymInt)]
            if dims:
                dynamic.append(f"{spec.arg.name} dims {dims}")
    if dynamic:
        warnings.warn(
            f"exported_program_to_stablehlo: the program's dynamic dimensions "
            f"({'; '.join(dynamic)}) are exported at the sizes of the example inputs, so the "
            "StableHLO accepts those shapes only: dynamic shapes are not exported here. "
            "Export once per shape you need (override_tracing_arguments).",
            UserWarning, stacklevel=3)


def _run_decompositions(exported_model: ExportedProgram) -> ExportedProgram:
    """The program decomposed to the core ATen ops the engine lowers (torch's default
    table; custom ops such as `xla::mark_tensor` stay as they are)."""
    return exported_model.run_decompositions()


def _lower(exported: ExportedProgram, arguments: list[_Argument | None], values: list,
           options: StableHLOExportOptions) -> tuple[StableHLOFunc, list[np.ndarray]]:
    """Trace the program on the engine and lower the graph of its user outputs."""
    device = torch_xla.device()
    torch_xla.sync()
    inputs = [v.detach().to(device) if a is not None else v
              for v, a in zip(values, arguments, strict=True)]
    torch_xla.sync()
    leaf_of = {id(functional.unwrap(t).value[0]): k for k, (t, a) in
               enumerate(zip(inputs, arguments, strict=True)) if a is not None}
    runs, fallbacks = _metrics.engine_runs(), _metrics.fallback_counts()
    with torch.no_grad(), eager.disabled():
        outputs = XLAExportInterpreter(exported.graph_module, device,
                                       options.custom_ops_allowed_in_graph).run(*inputs)
    after = _metrics.fallback_counts()
    if _metrics.engine_runs() != runs or after != fallbacks:
        on_cpu = sorted(n for n, count in after.items() if count > fallbacks.get(n, 0))
        raise RuntimeError(
            "StableHLO export needs every op of the program in one XLA program, but "
            + (f"{', '.join(on_cpu)} ran on the CPU (no XLA lowering)" if on_cpu else
               "an op read a device value on the host while tracing") + ".")
    kinds = [s.kind for s in exported.graph_signature.output_specs]
    mutations = sum(k in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
                    for k in kinds)
    results = list(outputs)[mutations:]
    if not all(isinstance(r, torch.Tensor) and r.device.type == "xla" for r in results):
        raise RuntimeError("StableHLO export supports programs whose outputs are tensors")
    roots = [functional.unwrap(r).value for r in results]
    order, position, leaves, _ = graph.walk(roots)
    fn = compiler.graph_function(order, position, leaves, roots, exported=True)

    used = sorted({leaf_of[id(leaf)] for leaf in leaves if id(leaf) in leaf_of})
    constants: list[np.ndarray] = []
    sources: list[int | tuple[str, int] | jax.Array] = []  # per leaf
    for leaf in leaves:
        if id(leaf) in leaf_of:
            sources.append(used.index(leaf_of[id(leaf)]))
        elif options.inline_all_constant:
            sources.append(leaf.array)  # closed over: a constant of the module
        else:
            sources.append(("constant", len(constants)))
            constants.append(np.asarray(leaf.array))
    locations = [arguments[k].location for k in used] + [
        InputLocation.constant(i) for i in range(len(constants))]
    leaf_for = {leaf_of[id(leaf)]: leaf for leaf in leaves if id(leaf) in leaf_of}
    avals = [jax.ShapeDtypeStruct(leaf_for[k].array.shape, leaf_for[k].array.dtype)
             for k in used] + [jax.ShapeDtypeStruct(c.shape, c.dtype) for c in constants]

    def main(*arrays: jax.Array) -> tuple:
        return fn(*[arrays[s] if isinstance(s, int) else
                    arrays[len(used) + s[1]] if isinstance(s, tuple) else s
                    for s in sources])

    lowered = jax.jit(main, keep_unused=True).lower(*avals)  # every declared argument
    module = lowered.compiler_ir("stablehlo")
    unused = [(arguments[k].location, _signature(arguments[k].value))
              for k in range(len(arguments)) if arguments[k] is not None and k not in used
              and arguments[k].location.type_ == VariableType.INPUT_ARG]
    meta = StableHLOFunctionMeta(
        name=_METHOD, stablehlo_version=_STABLEHLO_VERSION,
        input_signature=[_signature(inputs[k]) for k in used] + [
            VariableSignature(list(c.shape), _dtype_name(c.dtype)) for c in constants],
        output_signature=[_signature(r) for r in results],
        input_locations=locations, unused_inputs=unused,
        input_pytree_spec=pytree.treespec_dumps(exported.call_spec.in_spec),
        output_pytree_spec=_user_output_spec(exported, len(results)))
    text = lowered.as_text() if options.include_human_readable_text else None
    return StableHLOFunc(meta, mlir.module_to_bytecode(module), text), constants


def _user_output_spec(exported: ExportedProgram, count: int) -> str | None:
    spec = exported.call_spec.out_spec
    return pytree.treespec_dumps(spec) if spec is not None and spec.num_leaves == count \
        else None


def save_as_stablehlo(exported_model: ExportedProgram, stablehlo_dir: str | os.PathLike,
                      options: StableHLOExportOptions | None = None) -> None:
    """Export `exported_model` and save the bundle to the folder `stablehlo_dir`."""
    options = options or StableHLOExportOptions()
    exported_program_to_stablehlo(exported_model, options).save(stablehlo_dir, options)


def save_torch_model_as_stablehlo(torchmodel: torch.nn.Module, args: tuple,
                                  path: str | os.PathLike,
                                  options: StableHLOExportOptions | None = None) -> None:
    """`torch.export.export(torchmodel, args)`, then `save_as_stablehlo` to `path`."""
    options = copy.copy(options) if options is not None else StableHLOExportOptions()
    options.override_tracing_arguments = tuple(args)
    save_as_stablehlo(torch.export.export(torchmodel, tuple(args)), path, options)


# --- the folder -------------------------------------------------------------------------


def _write(path: str, data: bytes) -> None:
    with atomic_open(path) as f:
        f.write(data)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _save_bundle(bundle: StableHLOModelBundle, directory: str,
                 options: StableHLOExportOptions) -> None:
    functions = os.path.join(directory, "functions")
    constants = os.path.join(directory, "constants")
    os.makedirs(functions, exist_ok=True)
    os.makedirs(constants, exist_ok=True)
    if options.save_weights:
        data = os.path.join(directory, "data")
        os.makedirs(data, exist_ok=True)
        for name, array in bundle.state_dict.items():
            _write(os.path.join(data, name), _npy(array))
    for i, array in enumerate(bundle.additional_constants):
        _write(os.path.join(constants, str(i)), _npy(array))
    for func in bundle.stablehlo_funcs:
        base = os.path.join(functions, func.meta.name)
        _write(base + ".bytecode", func.bytecode)
        if func.text is not None:
            _write(base + ".mlir", func.text.encode())
        _write(base + ".meta", json.dumps(func.meta, cls=StableHLOJSONSerializer,
                                          indent=2).encode())


def _load_bundle(directory: str) -> StableHLOModelBundle:
    functions = os.path.join(directory, "functions")
    if not os.path.isdir(functions):
        raise FileNotFoundError(f"{directory} is not a StableHLO bundle: it has no "
                                "functions/ folder (write one with save_as_stablehlo)")
    data = os.path.join(directory, "data")
    state = {name: np.load(os.path.join(data, name), allow_pickle=False)
             for name in sorted(os.listdir(data))} if os.path.isdir(data) else {}
    folder = os.path.join(directory, "constants")
    names = sorted(os.listdir(folder), key=int) if os.path.isdir(folder) else []
    constants = [np.load(os.path.join(folder, n), allow_pickle=False) for n in names]
    funcs = []
    for name in sorted(os.listdir(functions)):
        if not name.endswith(".meta"):
            continue
        base = os.path.join(functions, name.removesuffix(".meta"))
        with open(base + ".meta") as f:
            meta = json.load(f, object_hook=stablehlo_obj_hook)
        with open(base + ".bytecode", "rb") as f:
            bytecode = f.read()
        text = None
        if os.path.exists(base + ".mlir"):
            with open(base + ".mlir") as f:
                text = f.read()
        funcs.append(StableHLOFunc(meta, bytecode, text))
    if not funcs:
        raise FileNotFoundError(f"{functions} holds no function (<name>.meta and "
                                "<name>.bytecode)")
    funcs.sort(key=lambda f: f.meta.name != _METHOD)  # forward first: the default
    return StableHLOModelBundle(state, constants, funcs)
