"""PyTorch/XLA's debugging tool: why each graph compiled and ran (PT_XLA_DEBUG_LEVEL).

With `PT_XLA_DEBUG_LEVEL=1` every compilation of a graph is explained as it happens
("Compilation Analysis": its cause, its hash, inputs and outputs, and the Python frames
that asked for it), followed by its sizes ("Post Compilation Analysis"); each
`mark_step` adds a short analysis of the metrics ("pt-xla-profiler: CompileTime too
frequent ..."). Level 2 and up also explain every execution ("Execution Analysis").
`PT_XLA_DEBUG=1` alone means level 100. The text goes to stderr, or is appended to
`PT_XLA_DEBUG_FILE`; only the first process of a host (`PJRT_LOCAL_PROCESS_RANK` 0)
writes. Eager mode's one-op graphs are not analysed.

The cause is read from the Python stack, as PyTorch/XLA reads it: the engine's own
frames are skipped, a step (`xm.mark_step`, `torch_xla.sync`) is attributed to the
function that took it (`_CAUSES`: the parallel loader, `xp.StepTrace`, dynamo,
`torch_xla.compile`) or else to the user, and any other sync to user code reading a
tensor's value (`.item()`, `print`, `.cpu()`) before the step.

The variables are read when the engine is imported and again at the first sync (as the
engine's other XLA_* variables, `lazy/dump.py`); `configure()` reads them again. With
the tool off, the engine pays one test of `COMPILATIONS` or `EXECUTIONS` per compilation
or execution and one of `LEVEL` per step. This module imports neither jax nor the rest
of the engine.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from types import FrameType
from typing import Any

from torch_xla import _metrics

# Set by `configure()`.
LEVEL = 0  # the effective debug level (0: off)
COMPILATIONS = False  # level >= 1: analyse compilations (and the metrics at each step)
EXECUTIONS = False  # level >= 2: analyse executions too
_output: dict[str, Any] = {"file": None, "max_frames": 8, "writer": True}

DEFAULT_LEVEL_IF_ENABLED = 100  # PT_XLA_DEBUG=1 without PT_XLA_DEBUG_LEVEL

COMPILATION = "Compilation Analysis: "
EXECUTION = "Execution Analysis: "
POST_COMPILATION = "Post Compilation Analysis: "
METRICS = "pt-xla-profiler"
_RULE = "=" * 80
_END = "-" * 80

USER_STEP = "user mark_step"
VALUE_READ = "most likely user code trying to access tensor value before mark_step"
DYNAMO_EXECUTION = "dynamo is executing a compiled program"
DYNAMO_INPUTS = "mark_step when dynamo processing input graphs"

# Frames of these files (relative to the torch_xla package) and folders are the engine's:
# the analysis starts at the first frame outside them.
_ENGINE_FOLDERS = ("lazy", "backend", "pjrt", "lowering")
_ENGINE_FILES = ("_XLAC.py", "_metrics.py")

# Functions that only take a step for their caller: the cause is whoever called them.
_STEPS = {("core/xla_model.py", "mark_step"), ("__init__.py", "sync")}

# The causes of the syncs, compilations and steps our own functions ask for, by the
# function's file and name (each name is the only function of that name in its file
# that syncs). Anything else is the user's: a step is a "user mark_step", another sync
# a read of a pending value.
_CAUSES = {
    ("distributed/parallel_loader.py", "__next__"): "mark_step in parallel loader at step end",
    ("debug/profiler.py", "__exit__"): "mark_step when exiting a profiler StepTrace region",
    ("__init__.py", "__enter__"):  # torch_xla.compile's region
        "torch_xla.compile clear the pending graph prior calling the target function",
    ("__init__.py", "__exit__"): "torch_xla.compile",
    ("_dynamo/dynamo_bridge.py", "__init__"): DYNAMO_INPUTS,  # _Inputs: a trace's arguments
    ("_dynamo/dynamo_bridge.py", "compile_for"): DYNAMO_INPUTS,
    ("_dynamo/dynamo_bridge.py", "run_cached_graph"): DYNAMO_INPUTS,
    ("_dynamo/dynamo_bridge.py", "_program"): "dynamo is compiling a FX graph to HLO",
}

# The memory figures of a compiled program, in the order they are printed.
_SIZES = (
    ("Graph input size", "argument_size_in_bytes"),
    ("Graph output size", "output_size_in_bytes"),
    ("Aliased Input size", "alias_size_in_bytes"),
    ("Intermediate tensor size", "temp_size_in_bytes"),
    ("Compiled program size", "generated_code_size_in_bytes"),
)

# The metrics analysis at each step: (metric, most samples per step, steps before the
# first warning), and (metric, the longest sample that is normal, in seconds).
_TOO_FREQUENT = (("CompileTime", 0.5, 10), ("TransferFromDeviceTime", 0.5, 0))
_TOO_SLOW = (("CompileTime", 300.0), ("ExecuteTime", 30.0))

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_lock = threading.Lock()


# --- configuration ----------------------------------------------------------------------


def _flag(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on", "y")


def debug_level(environ: dict | os._Environ = os.environ) -> int:
    """The level PT_XLA_DEBUG_LEVEL names, else 100 when PT_XLA_DEBUG is on, else 0."""
    text = environ.get("PT_XLA_DEBUG_LEVEL", "").strip()
    if text:
        try:
            return max(int(text), 0)
        except ValueError:
            raise ValueError(
                f"PT_XLA_DEBUG_LEVEL={text!r}: expected a whole number (0: off, 1: "
                "compilations, 2: compilations and executions); unset it to turn the "
                "debugging tool off.") from None
    return DEFAULT_LEVEL_IF_ENABLED if _flag(environ.get("PT_XLA_DEBUG", "")) else 0


def configure(environ: dict | os._Environ = os.environ) -> None:
    """Read the variables (see the module docstring)."""
    global LEVEL, COMPILATIONS, EXECUTIONS
    level = debug_level(environ)
    frames = environ.get("PT_XLA_DEBUG_MAX_FRAME", "").strip()
    _output["file"] = environ.get("PT_XLA_DEBUG_FILE") or None
    _output["max_frames"] = int(frames) if frames.isdigit() else 8
    _output["writer"] = environ.get("PJRT_LOCAL_PROCESS_RANK", "0").strip() in ("", "0")
    LEVEL, COMPILATIONS, EXECUTIONS = level, level >= 1, level >= 2


configure()


def _write(text: str) -> None:
    if not _output["writer"]:
        return
    path = _output["file"]
    with _lock:
        if path is None:
            sys.stderr.write(text)
            sys.stderr.flush()
        else:
            with open(path, "a") as f:
                f.write(text)


# --- the Python frames and the cause ----------------------------------------------------


def _place(frame: FrameType) -> tuple[str | None, str]:
    """(the frame's file relative to the torch_xla package, or None outside it; its
    function's name)."""
    path = frame.f_code.co_filename
    inside = path.startswith(_PACKAGE)
    return (path[len(_PACKAGE):].replace(os.sep, "/") if inside else None), frame.f_code.co_name


def _is_engine(relative: str | None) -> bool:
    return relative is not None and (relative.split("/", 1)[0] in _ENGINE_FOLDERS
                                     or relative in _ENGINE_FILES)


def python_frames(start: FrameType | None = None) -> list[FrameType]:
    """The Python frames from `start` (default: the caller) outwards, without the
    engine's: the first is the function that asked the engine for the work."""
    frame = start if start is not None else sys._getframe(1)
    frames = []
    while frame is not None:
        if not _is_engine(_place(frame)[0]):
            frames.append(frame)
        frame = frame.f_back
    return frames


def cause(frames: list[FrameType]) -> str:
    """Why the work `frames` (from `python_frames`) asked for happens."""
    stepped = False
    for frame in frames:
        place = _place(frame)
        if place in _STEPS:
            stepped = True
            continue
        found = _CAUSES.get(place)
        if found is not None:
            return found
        break
    return USER_STEP if stepped else VALUE_READ


# --- the analyses -----------------------------------------------------------------------


def graph_hash(fingerprint: str) -> str:
    """The hash the analyses show for a program: 128 bits of its compilation key."""
    return fingerprint[:32]


def _report(prefix: str, title: str, reason: str, hash_text: str, inputs: int, outputs: int,
            frames: list[FrameType]) -> str:
    lines = [_RULE, title, f"  {reason}", "Graph Info: ", f"  Graph Hash: {hash_text}",
             f"  Number of Graph Inputs: {inputs}", f"  Number of Graph Outputs: {outputs}",
             "Python Frame Triggered Execution: "]
    limit = _output["max_frames"]
    for frame in frames[:limit]:
        lines.append(f"  {frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
    if len(frames) > limit:
        lines.append("  ..........")
    lines += [_END, _RULE]
    return "\n" + "".join(f"{prefix}{line}\n" for line in lines)


def compiling(fingerprint: str, inputs: int, outputs: int) -> None:
    """A graph is about to compile (`compiler.compile`; call only when `COMPILATIONS`)."""
    frames = python_frames(sys._getframe(1))
    if frames:  # none: a thread without Python callers (autograd's)
        _write(_report(COMPILATION, "Compilation Cause", cause(frames), graph_hash(fingerprint),
                       inputs, outputs, frames))


def executing(fingerprint: str, inputs: int, outputs: int, dynamo: bool = False) -> None:
    """A compiled graph is about to run (call only when `EXECUTIONS`); `dynamo`: the
    program of a `torch.compile` graph, called as such."""
    frames = python_frames(sys._getframe(1))
    if frames:
        reason = DYNAMO_EXECUTION if dynamo else cause(frames)
        _write(_report(EXECUTION, "Execution Cause", reason, graph_hash(fingerprint), inputs,
                       outputs, frames))


def _gigabytes(stats: Any, field: str) -> str:
    value = getattr(stats, field, None)
    return "Unknown " if value is None else f"{value / 1024 ** 3:.6f}"


def compiled(executable: Any) -> None:
    """A graph compiled into `executable` (jax's `Compiled`, or a program without memory
    figures): its sizes (call only when `COMPILATIONS`)."""
    try:
        stats = executable.memory_analysis()
    except Exception:  # noqa: BLE001 - a replicated or loaded program: sizes unknown
        stats = None
    text = ""
    try:
        text = executable.as_text()
    except Exception:  # noqa: BLE001 - as above
        pass
    head = (f"\nComputation hash: {hashlib.blake2b(text.encode(), digest_size=16).hexdigest()}\n"
            if text else "")
    lines = [_RULE] + [f"{name}: {_gigabytes(stats, field)} GB" for name, field in _SIZES]
    lines += [_END, _RULE]
    _write(head + "\n" + "".join(f"{POST_COMPILATION}{line}\n" for line in lines))


def metrics_analysis() -> str:
    """The metrics' symptoms, one `pt-xla-profiler: ...` line each ("" when none): a
    metric sampled too often per step, a sample too slow, ops run on the CPU."""
    found = []
    steps = _metrics.counters().get("MarkStep")
    steps = steps.value if steps is not None else 0
    active = _metrics.metrics()
    for name, per_step, warmup in _TOO_FREQUENT:
        metric = active.get(name)
        count = metric.total_samples if metric is not None else 0
        if steps > warmup and count and count / steps > per_step:
            found.append(f"{name} too frequent: {count} counts during {steps} steps")
    for name, seconds in _TOO_SLOW:
        metric = active.get(name)
        longest = max((value for _, value in metric.samples), default=0.0) if metric else 0.0
        if longest > seconds:
            found.append(f"{name} too slow: longest instance took "
                         f"{_metrics.format_duration(longest)}. Please open a GitHub issue "
                         "with the graph dump for our team to optimize.")
    cpu_ops = [n for n in _metrics.fallback_ops() if n != "aten::_local_scalar_dense"]
    if cpu_ops:
        found.append(f"Op(s) not lowered: {''.join(n + ', ' for n in cpu_ops)} Please open a "
                     "GitHub issue with the above op lowering requests.")
    return "".join(f"{METRICS}: {line}\n" for line in found)


def step_marked() -> None:
    """A step ended (`mark_step`; call only when `LEVEL`): write the metrics analysis."""
    report = metrics_analysis()
    if report:
        _write(report)
