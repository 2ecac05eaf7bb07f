"""Debug output of syncs, driven by PyTorch/XLA's environment variables.

- XLA_SAVE_TENSORS_FILE=path appends every synced graph to `path`, in the format
  XLA_SAVE_TENSORS_FMT names: `text` (the IR, default), `dot` (graphviz) or
  `hlo` (the optimized HLO XLA compiled). With XLA_IR_DEBUG=1 or XLA_HLO_DEBUG=1
  each graph is preceded by the Python frames that triggered the sync, and
  text/dot nodes carry the user line that created them.
- XLA_METRICS_FILE=path appends the metrics report after every step.
- XLA_SYNC_WAIT=1 waits for each sync's execution to finish before returning.
- GET_TENSORS_OPBYOP=1 (syncs that fetch values: `.cpu()`, `.item()`, `print`) and
  SYNC_TENSORS_OPBYOP=1 (`mark_step`) compile and run one computation per IR node
  instead of one per graph, to find which op gives a wrong value or fails in XLA.

Variables are read once, at import; with none set the per-sync cost is one
attribute test.
"""

from __future__ import annotations

import os
import threading
import traceback
from typing import Any

from torch_xla import _metrics
from torch_xla.lazy import ir

SAVE_FILE = os.environ.get("XLA_SAVE_TENSORS_FILE") or None
SAVE_FORMAT = (os.environ.get("XLA_SAVE_TENSORS_FMT") or "text").lower()
METRICS_FILE = os.environ.get("XLA_METRICS_FILE") or None
SYNC_WAIT = os.environ.get("XLA_SYNC_WAIT", "0") not in ("", "0", "false", "False")
GET_OPBYOP = os.environ.get("GET_TENSORS_OPBYOP", "0") not in ("", "0", "false", "False")
SYNC_OPBYOP = os.environ.get("SYNC_TENSORS_OPBYOP", "0") not in ("", "0", "false", "False")
FRAMES = ir.IR_DEBUG or os.environ.get("XLA_HLO_DEBUG", "0") not in ("", "0")
FORMATS = ("text", "dot", "hlo")

if SAVE_FILE and SAVE_FORMAT not in FORMATS:
    raise ValueError(
        f"XLA_SAVE_TENSORS_FMT={SAVE_FORMAT!r} is not one of {FORMATS}; "
        "unset it for the default (text)."
    )

_lock = threading.Lock()
_INTERNAL = (os.sep + "torch_xla" + os.sep, os.sep + "torch" + os.sep)


def _append(path: str, text: str) -> None:
    with _lock, open(path, "a") as f:
        f.write(text)


def _user_frames() -> str:
    stack = traceback.extract_stack()[:-3]
    frames = [f for f in stack if not any(part in f.filename for part in _INTERNAL)]
    return "".join(f"  {f.filename}:{f.lineno} ({f.name})\n" for f in frames[-8:])


def _type(aval: Any) -> str:
    if aval is None:
        return "()"
    shape, dtype = aval
    return f"{str(dtype).removeprefix('torch.')}[{','.join(map(str, shape))}]"


def _node_line(k: int, node: ir.Node, position: dict[int, int]) -> str:
    types = ", ".join(_type(a) for a in node.avals)
    operands = ", ".join(
        f"%{position[id(c)]}" + (f".{i}" if len(c.avals) > 1 else "") for c, i in node.inputs
    )
    where = f", location={node.location}" if node.location else ""
    return f"  %{k} = ({types}) {node.op}({operands}){where}\n"


def _text(order: list, position: dict[int, int], values: list) -> str:
    body = "".join(_node_line(k, n, position) for k, n in enumerate(order))
    roots = ", ".join(f"%{position[id(n)]}" + (f".{i}" if len(n.avals) > 1 else "")
                      for n, i in values)
    return f"IR {{\n{body}  ROOT ({roots})\n}}\n"


def _dot(order: list, position: dict[int, int], values: list) -> str:
    roots = {position[id(n)] for n, _ in values}
    lines = ["digraph G {"]
    for k, node in enumerate(order):
        label = f"{node.op}\\n{', '.join(_type(a) for a in node.avals)}"
        if node.location:
            label += "\\n" + node.location.replace("\\", "\\\\").replace('"', '\\"')
        style = ", style=bold" if k in roots else ""
        lines.append(f'  node{k} [label="{label}"{style}];')
        lines += [f"  node{position[id(c)]} -> node{k};" for c, _ in node.inputs]
    return "\n".join(lines) + "\n}\n"


def save_graph(device: int, order: list, position: dict[int, int], values: list,
               compiled: Any) -> None:
    """Append one synced graph to XLA_SAVE_TENSORS_FILE in the chosen format."""
    header = f"[ScheduleSyncTensorsGraph] device xla:{device}, {len(values)} output(s)\n"
    if FRAMES:
        header += "TensorsGraphInfo:\n" + _user_frames()
    if SAVE_FORMAT == "hlo":
        body = compiled.as_text()
    elif SAVE_FORMAT == "dot":
        body = _dot(order, position, values)
    else:
        body = _text(order, position, values)
    _append(SAVE_FILE, f"{header}\n## BEGIN_GRAPH\n{body}\n## END_GRAPH\n\n")


def save_metrics() -> None:
    """Append the metrics report to XLA_METRICS_FILE (after every step)."""
    _append(METRICS_FILE, f"[Step metrics]\n{_metrics.report()}\n")
