"""Debug output of syncs, driven by PyTorch/XLA's environment variables.

- XLA_SAVE_TENSORS_FILE=path appends every synced graph to `path.<ordinal>`, in the format
  XLA_SAVE_TENSORS_FMT names: `text` (the IR, default), `dot` (graphviz) or
  `hlo` (the optimized HLO XLA compiled). With XLA_IR_DEBUG=1 or XLA_HLO_DEBUG=1
  each graph is preceded by the Python frames that triggered the sync, and
  text/dot nodes carry the user line that created them.
- XLA_METRICS_FILE=path appends the metrics report after every step.
- XLA_DUMP_POST_OPTIMIZATIONS=1 makes `torch_xla._XLAC._get_xla_tensors_hlo` print the
  HLO after XLA's optimizations (SPMD partitioning among them) instead of before; read
  on each call.
- XLA_SYNC_WAIT=1 waits for each sync's execution to finish before returning.
- GET_TENSORS_OPBYOP=1 (syncs that fetch values: `.cpu()`, `.item()`, `print`) and
  SYNC_TENSORS_OPBYOP=1 (`mark_step`) compile and run one computation per IR node
  instead of one per graph, to find which op gives a wrong value or fails in XLA.

Variables are read at import and again at the process's first sync (a program may
set them after `import torch_xla`, as PyTorch/XLA reads them at first use), then
fixed; with none set the per-sync cost is one attribute test. Graphs go to
`path.<ordinal>`, as PyTorch/XLA writes them: `path.0` in a process of one device,
and the replica's global ordinal under `xmp.spawn` or with replica threads. A
`torch.compile` graph is written when it compiles and appended again on every call.
`ir_text` is the one IR printer: the text dumps and
`torch_xla._XLAC._get_xla_tensors_text` both use it; `hlo_text` prints a lowered
graph as HLO in PyTorch/XLA's layout (`torch_xla._XLAC._get_xla_tensors_hlo`).
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from typing import Any

import jax
from jax._src.interpreters import mlir
from jax._src.lib import _jax
from jax._src.lib import hlo as xla_hlo

from torch_xla import _metrics
from torch_xla.lazy import dtype_policy, ir
from torch_xla.pjrt import spmd
from torch_xla.pjrt.client import client

FORMATS = ("text", "dot", "hlo")
# Set by `configure()`: at import, and again at the first sync (graph.py checks READ).
SAVE_FILE: str | None = None
SAVE_FORMAT = "text"
METRICS_FILE: str | None = None
SYNC_WAIT = GET_OPBYOP = SYNC_OPBYOP = FRAMES = False
READ = False  # whether the first sync has read the variables


def flag(name: str) -> bool:
    """Whether debugging variable `name` is set to anything but 0 or false."""
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


def configure(at_sync: bool = False) -> None:
    """Read the variables (see the module docstring)."""
    global SAVE_FILE, SAVE_FORMAT, METRICS_FILE, SYNC_WAIT, GET_OPBYOP, SYNC_OPBYOP, FRAMES
    global READ
    save_format = (os.environ.get("XLA_SAVE_TENSORS_FMT") or "text").lower()
    save_file = os.environ.get("XLA_SAVE_TENSORS_FILE") or None
    if save_file and save_format not in FORMATS:
        raise ValueError(
            f"XLA_SAVE_TENSORS_FMT={save_format!r} is not one of {FORMATS}; "
            "unset it for the default (text)."
        )
    SAVE_FILE, SAVE_FORMAT = save_file, save_format
    METRICS_FILE = os.environ.get("XLA_METRICS_FILE") or None
    SYNC_WAIT, GET_OPBYOP = flag("XLA_SYNC_WAIT"), flag("GET_TENSORS_OPBYOP")
    SYNC_OPBYOP = flag("SYNC_TENSORS_OPBYOP")
    FRAMES = ir.IR_DEBUG or os.environ.get("XLA_HLO_DEBUG", "0") not in ("", "0")
    READ = at_sync


configure()

_lock = threading.Lock()
_INTERNAL = (os.sep + "torch_xla" + os.sep, os.sep + "torch" + os.sep)


def _append(path: str, text: str) -> None:
    with _lock, open(path, "a") as f:
        f.write(text)


def _user_frames() -> str:
    stack = traceback.extract_stack()[:-3]
    frames = [f for f in stack if not any(part in f.filename for part in _INTERNAL)]
    return "".join(f"  {f.filename}:{f.lineno} ({f.name})\n" for f in frames[-8:])


# --- the IR printer ---------------------------------------------------------------

_XLA_PREFIXES = (("bfloat", "bf"), ("float", "f"), ("uint", "u"), ("int", "s"),
                 ("complex", "c"))


def xla_type(aval: Any, layout: bool = False) -> str:
    """`bf16[2,3]`: the element type the device stores (XLA's short name) and the shape;
    with `layout`, XLA's default (row-major) layout after it as XLA prints shapes,
    `bf16[2,3]{1,0}` (none for a scalar)."""
    if aval is None:
        return "()"
    shape, dtype = aval
    return _shape_text(str(dtype_policy.STORAGE[dtype]), shape, layout)


def _shape_text(name: str, shape: tuple, layout: bool) -> str:
    """`xla_type` of a NumPy type name (`float32`) and a shape."""
    short = "pred" if name == "bool" else next(
        (short + name[len(long):] for long, short in _XLA_PREFIXES if name.startswith(long)),
        name)
    text = f"{short}[{','.join(map(str, shape))}]"
    if layout and shape:
        text += "{" + ",".join(map(str, range(len(shape) - 1, -1, -1))) + "}"
    return text


def op_name(op: Any) -> str:
    """`aten::add` for ATen ops, the engine's own names (`xla::device_data`) as they are."""
    schema = getattr(op, "_schema", None)
    return schema.name if schema is not None else str(op)


def _operand(node: ir.Node, index: int, position: dict[int, int]) -> str:
    return f"%{position[id(node)]}" + (f".{index}" if len(node.avals) > 1 else "")


def node_line(k: int, node: ir.Node, position: dict[int, int],
              roots: dict[tuple[int, int], int]) -> str:
    """`  %k = f32[2,3]{1,0} aten::add(%0, %1), ROOT=0`, PyTorch/XLA's layout of one node."""
    types = ", ".join(xla_type(a, layout=True) for a in node.avals)
    if len(node.avals) > 1:
        types = f"({types})"
    operands = ", ".join(_operand(c, i, position) for c, i in node.inputs)
    extra = "".join(f", ROOT={roots[(k, i)]}" for i in range(len(node.avals))
                    if (k, i) in roots)
    if node.location:
        extra += f", location={node.location}"
    return f"  %{k} = {types} {op_name(node.op)}({operands}){extra}\n"


def ir_text(order: list, position: dict[int, int], values: list) -> str:
    """The graph computing `values` (its nodes in post-`order`), one node a line; the
    node computing the i-th value is marked `ROOT=i`."""
    roots: dict[tuple[int, int], int] = {}
    for i, (node, out) in enumerate(values):
        roots.setdefault((position[id(node)], out), i)
    body = "".join(node_line(k, n, position, roots) for k, n in enumerate(order))
    return f"IR {{\n{body}}}\n"


def hlo_text(lowered: Any) -> str:
    """The HLO module of a lowered (not compiled) graph, printed as PyTorch/XLA prints it:
    `%all-reduce.3 = f32[2]{0} all-reduce(f32[2]{0} %p0.1), ...` (names from opcodes,
    `%` before names, operand shapes, parameters `p<k>`, device lists written out), which
    its tests match with regular expressions. With XLA_DUMP_POST_OPTIMIZATIONS=1 the
    module XLA compiles it to instead (after its passes: SPMD partitioning adds the
    collectives a sharded graph needs)."""
    if flag("XLA_DUMP_POST_OPTIMIZATIONS"):  # read on each call: a debugging aid
        text = lowered.compile().as_text()
        return spmd.explicit_device_lists(_PARAMETER.sub(r"p\1.\2", text))
    return computation_text(xla_computation(lowered))


def computation_text(computation: Any) -> str:
    """An XLA computation's HLO module, printed as `hlo_text` prints it."""
    options = xla_hlo.HloPrintOptions()
    options.print_percent = True
    options.print_operand_shape = True
    options.print_metadata = False
    text = computation.as_hlo_module().to_string(options)
    return spmd.explicit_device_lists(_PARAMETER.sub(r"p\1.\2", text))


def xla_computation(lowered: Any) -> Any:
    """A lowered graph as XLA's HLO computation (its parameters the graph's leaves, its
    outputs one tuple, as PyTorch/XLA's computations return them)."""
    # Without locations, XLA names each instruction after its opcode, not jax's op name.
    module = mlir.module_to_string(lowered.compiler_ir("stablehlo"), enable_debug_info=False)
    return _jax.mlir.mlir_module_to_xla_computation(module, use_tuple_args=False,
                                                    return_tuple=True)


# jax names parameter k of a computation `Arg_k.N`; PyTorch/XLA's builder names it `pk.N`.
_PARAMETER = re.compile(r"\bArg_(\d+)\.(\d+)\b")


def _dot(order: list, position: dict[int, int], values: list) -> str:
    roots = {position[id(n)] for n, _ in values}
    lines = ["digraph G {"]
    for k, node in enumerate(order):
        label = f"{op_name(node.op)}\\n{', '.join(xla_type(a) for a in node.avals)}"
        if node.location:
            label += "\\n" + node.location.replace("\\", "\\\\").replace('"', '\\"')
        style = ", style=bold" if k in roots else ""
        lines.append(f'  node{k} [label="{label}"{style}];')
        lines += [f"  node{position[id(c)]} -> node{k};" for c, _ in node.inputs]
    return "\n".join(lines) + "\n}\n"


def graph_record(kind: str, device: int, order: list, position: dict[int, int],
                 values: list, compiled: Any) -> str:
    """One graph as XLA_SAVE_TENSORS_FILE holds it, in the chosen format: `[kind]` (what
    ran it: a sync, or `dynamo` for a `torch.compile` graph) and, with XLA_IR_DEBUG or
    XLA_HLO_DEBUG, the user's frames that made it."""
    header = f"[{kind}] device xla:{device}, {len(values)} output(s)\n"
    if FRAMES:
        header += "TensorsGraphInfo:\n" + _user_frames()
    if SAVE_FORMAT == "hlo":
        body = compiled.as_text()
    elif SAVE_FORMAT == "dot":
        body = _dot(order, position, values)
    else:
        body = ir_text(order, position, values)
    record = f"{header}\n## BEGIN_GRAPH\n{body}\n## END_GRAPH\n\n"
    if SAVE_FORMAT == "hlo" and spmd.enabled():
        record += _output_shardings(compiled)
    return record


def _output_shardings(compiled: Any) -> str:
    """PyTorch/XLA's block after an SPMD graph's HLO: each result's shape and the
    layout the partitioner gave it (`f32[8,32] {devices=[1,4]0,1,2,3}`: XLA's shape text
    without its memory layout, as PyTorch/XLA writes it)."""
    devices = client().global_devices
    lines = [f"{_shape_text(str(out.dtype), out.shape, False)} "
             f"{spmd.sharding_text(out.sharding, len(out.shape), devices)}\n"
             for out in jax.tree.leaves(compiled.out_info)]
    return "\n#OUTPUT_SHARDING_BEGIN\n\n" + "".join(lines) + "\n#OUTPUT_SHARDING_END\n\n"


def save_graph(record: str, ordinal: int) -> None:
    """Append a `graph_record` to `XLA_SAVE_TENSORS_FILE.<ordinal>`: as in PyTorch/XLA,
    the file is named by the device's ordinal (`path.0` in a process of one device)."""
    _append(f"{SAVE_FILE}.{ordinal}", record)


def save_metrics() -> None:
    """Append the metrics report to XLA_METRICS_FILE (after every step)."""
    _append(METRICS_FILE, f"[Step metrics]\n{_metrics.report()}\n")
