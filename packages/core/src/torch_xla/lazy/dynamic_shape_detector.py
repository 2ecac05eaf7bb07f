"""How many different graphs a compiled function traces (PyTorch/XLA's dynamic shape
detector, behind `torch_xla.compile(f, num_different_graphs_allowed=n)`).

A session is named (`start(name)`, one per compiled function) and lasts across calls;
each call between `start` and `end` is one trace: the sequence of nodes recorded while it
ran, each known by its hash (op, static arguments, types, inputs), so a new input shape
or another branch of Python control flow makes another trace. A session keeps the
different traces its calls made. A call that would make a new one when the session
already has `n` raises RuntimeError as early as that is known: at the first node no
earlier trace recorded at that point ("Got: ..."), or at the end of the call when it
stopped where every earlier trace went on ("Reached the end of the function at: ..."),
saying what the earlier traces recorded there ("Expected: ..."). A trace is kept only
once its call ended without such an error, so a call that failed leaves nothing behind.

Recording reaches a session through `ir.WATCHER`, which is None outside a session.
"""

from __future__ import annotations

from typing import Any

from torch_xla.lazy import dump, ir

_limit = 1  # PyTorch/XLA's default: one graph per function
_sessions: dict[str, list[list[tuple[int, str]]]] = {}  # name -> its traces
_active: list[_Call] = []  # calls in progress, innermost last


def set_limit(count: int) -> None:
    """The number of different traces a session may have (read when a call starts)."""
    global _limit
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"The number of different graphs allowed must be an int >= 1, "
                         f"got {count!r}.")
    _limit = count


def start(name: str) -> None:
    """Start a call of session `name` (created on its first call)."""
    call = _Call(_sessions.setdefault(name, []), _limit)
    _active.append(call)
    ir.WATCHER = call.add


def end() -> None:
    """End the innermost call: its trace joins its session's, or RuntimeError says that
    the session has all the traces allowed."""
    if not _active:
        raise RuntimeError("No dynamic shape detector session is active: call "
                           "_dynamic_shape_detector_start_session first.")
    call = _active.pop()
    ir.WATCHER = _active[-1].add if _active else None
    call.finish()


def remove(name: str) -> None:
    """Forget session `name` and its traces (nothing when there is none)."""
    _sessions.pop(name, None)


class _Call:
    """One call of a session: the trace so far and the earlier traces it still follows."""

    __slots__ = ("traces", "limit", "steps", "following", "failed")

    def __init__(self, traces: list[list[tuple[int, str]]], limit: int) -> None:
        self.traces, self.limit = traces, limit
        self.steps: list[tuple[int, str]] = []
        self.following = list(traces)  # the earlier traces this one has equalled so far
        self.failed = False

    def add(self, node: ir.Node) -> None:
        if self.failed:
            return
        at = len(self.steps)
        step = (node.hash, describe(node))
        if self.following:
            same = [t for t in self.following if len(t) > at and t[at][0] == step[0]]
            if not same and len(self.traces) >= self.limit:
                self.failed = True
                raise RuntimeError(self._exceeded(f"Got: {step[1]}", at))
            self.following = same
        self.steps.append(step)

    def finish(self) -> None:
        if self.failed or not self.steps:
            return
        if any(len(t) == len(self.steps) for t in self.following):
            return  # an earlier trace, whole
        if len(self.traces) >= self.limit:
            raise RuntimeError(self._exceeded(
                f"Reached the end of the function at: {self.steps[-1][1]}", len(self.steps)))
        self.traces.append(self.steps)

    def _exceeded(self, got: str, at: int) -> str:
        """The error of a trace that left every earlier one at step `at`."""
        expected: list[str] = []
        for trace in self.following:
            if len(trace) > at and trace[at][1] not in expected:
                expected.append(trace[at][1])
        ends_here = any(len(t) == at for t in self.following)
        lines = [f"Maximum number of different graphs allowed per function exceeded: "
                 f"{self.limit}", got]
        if len(expected) == 1 and not ends_here:
            lines.append(f"Expected: {expected[0]}")
        else:
            lines.append("Expected either of:")
            lines += [f"  - {text}" for text in expected]
        lines.append("Each different graph of the function is compiled on its own: keep its "
                     "input shapes and its Python control flow the same from call to call, "
                     "or allow more graphs.")
        return "\n".join(lines)


def describe(node: Any) -> str:
    """`[] aten::add, xla_shape=f32[10]{0}, dynamic_dims: ()`: a node as PyTorch/XLA's
    detector prints it (the scope in the brackets)."""
    types = [dump.xla_type(a, layout=True) for a in node.avals]
    shape = types[0] if len(types) == 1 else f"({', '.join(types)})"
    scope = (node.scope or "").rstrip("/")
    return f"[{scope}] {dump.op_name(node.op)}, xla_shape={shape}, dynamic_dims: ()"
