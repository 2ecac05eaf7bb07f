"""IR nodes of the lazy graph, hashed structurally and incrementally as they are created.

A node is one ATen op applied to the outputs of other nodes. Device data is a leaf
node holding a jax array. A node's hash covers its op, its static arguments, its
inputs' hashes and its outputs' shapes and dtypes, never data, so equal programs
hash equally however many times they are traced.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import jax

# A node output's abstract value: (shape, torch dtype).
Aval = tuple[tuple[int, ...], Any]

IR_DEBUG = os.environ.get("XLA_IR_DEBUG", "0") not in ("", "0")


def set_debug(enabled: bool) -> None:
    """Record the user's Python line on every node created from now on (XLA_IR_DEBUG)."""
    global IR_DEBUG
    IR_DEBUG = bool(enabled)


class _Scopes(threading.local):
    """The profiler scopes (`xp.Trace`) open in this thread, joined: `"outer/inner/"`;
    their labels (`name.N`, N counting the scopes of that name opened in this thread),
    innermost last; and those counts."""

    prefix: str | None = None

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.counts: dict[str, int] = {}


_SCOPES = _Scopes()
# Scopes open in all threads: while there are none (the usual case) a recorded node
# reads no thread-local (a global read costs a fifth of one).
_OPEN = 0
_OPEN_LOCK = threading.Lock()


# Called with each node recorded while a compiled function with a graph limit runs
# (lazy/dynamic_shape_detector.py, which sets it); None the rest of the time.
WATCHER: Callable[[Node], None] | None = None


class OpenScopeError(RuntimeError):
    """A step was marked inside an open profiler scope."""


def push_scope(name: str) -> str | None:
    """Open a named scope in this thread: nodes recorded inside it carry its name as the
    prefix of their HLO metadata name (`name/aten__mm`), which device profiles show.
    Returns what `pop_scope` restores."""
    global _OPEN
    scopes = _SCOPES
    previous = scopes.prefix
    scopes.prefix = f"{previous or ''}{name}/"
    count = scopes.counts[name] = scopes.counts.get(name, 0) + 1
    scopes.labels.append(f"{name}.{count}")
    with _OPEN_LOCK:
        _OPEN += 1
    return previous


def pop_scope(previous: str | None) -> None:
    """Close the scope `push_scope` opened (`previous`: what it returned)."""
    global _OPEN
    _SCOPES.prefix = previous
    if _SCOPES.labels:
        _SCOPES.labels.pop()
    with _OPEN_LOCK:
        _OPEN -= 1


def require_no_open_scope() -> None:
    """Raise `OpenScopeError` when this thread has a profiler scope open: a step marked
    inside `xp.Trace` would split the scope's region over two steps (PyTorch/XLA raises
    it too; `mark_step(reset_scope=False)` skips the check)."""
    if _OPEN and _SCOPES.labels:
        raise OpenScopeError(
            f"Expecting scope to be empty but it is {_SCOPES.labels[-1]}: "
            "xm.mark_step()/torch_xla.sync() was called inside an open xp.Trace (or a "
            "function decorated with xp.trace_me). Mark the step after the scope closes, "
            "use xp.StepTrace (which marks it on exit), or pass reset_scope=False.")


class Node:
    """One recorded op; `inputs` are (node, output index) pairs."""

    __slots__ = ("op", "rule", "template", "inputs", "avals", "hash", "device", "location",
                 "scope")

    def __init__(self, op, rule, template, inputs, avals, device: int, key_hash: int) -> None:
        self.op = op  # the ATen OpOverload (or an engine op name)
        self.rule = rule  # the lowering callable, or None for data
        self.template = template  # hashable args with tensors replaced by `Slot`s
        self.inputs = inputs
        self.avals = avals  # tuple of Aval, one per output (None for a None output)
        self.device = device
        hashes = []  # a loop, not a comprehension: no frame of its own (one node per op)
        for n, i in inputs:
            hashes.append((n.hash, i))
        self.hash = hash((key_hash, tuple(hashes)))
        self.location = user_location() if IR_DEBUG else None
        # the HLO metadata name's prefix: the open `xp.Trace` scopes, or one set by
        # `_set_xla_custom_op_name_prefix`; not hashed (a scope never recompiles a program)
        self.scope = _SCOPES.prefix if _OPEN else None
        if WATCHER is not None:
            WATCHER(self)

    def __repr__(self) -> str:
        return f"Node({self.op}, avals={self.avals})"


class Data(Node):
    """A leaf: a jax array already on the device.

    `annotated` (SPMD mode): the array's layout is one a program or `xs.mark_sharding`
    chose, which `_get_xla_sharding_spec` reports; data copied from the host is not. It is
    the jax sharding itself when the array cannot hold it (tiles that do not divide the
    shape: the array stays replicated, `lazy/sharding.py`).
    `owned`: this leaf is the only one holding `array` (a program's fresh result), so a
    later program may take the buffer over (donation, `graph.py`). Code that wraps the
    array of an owned leaf in another leaf must clear the flag.
    `donor`: the user said a program may take this buffer over whoever still holds it
    (`_XLAC._set_buffer_donation`, `graph.py`)."""

    __slots__ = ("array", "annotated", "owned", "donor")

    def __init__(self, array: jax.Array, aval: Aval, device: int, annotated: Any = False,
                 owned: bool = False) -> None:
        self.op = "xla::device_data"
        self.rule = None
        self.template = ()
        self.inputs = ()
        self.avals = (aval,)
        self.device = device
        self.hash = hash(("data", aval))
        self.location = None
        self.scope = None
        self.array = array
        self.annotated = annotated
        self.owned = owned
        self.donor = False


class NoBuffer(Data):
    """A leaf with a shape and dtype but no buffer (a loop input while its body is
    recorded, a dropped pending value): reading `array` raises `missing()`."""

    __slots__ = ()

    def __init__(self, op: str, aval: Aval, device: int) -> None:
        self.op = op
        self.rule = None
        self.template = ()
        self.inputs = ()
        self.avals = (aval,)
        self.device = device
        self.hash = hash((op, aval))
        self.location = None
        self.scope = None
        self.annotated = False
        self.owned = False  # no buffer of its own: never donated
        self.donor = False

    @property
    def array(self):
        raise self.missing()

    def missing(self) -> Exception:
        """The error a read of the missing value raises."""
        raise NotImplementedError


class Slot:
    """Placeholder for the i-th tensor argument inside a node's static template."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other) -> bool:
        return type(other) is Slot and other.index == self.index

    def __hash__(self) -> int:
        return hash((Slot, self.index))

    def __repr__(self) -> str:
        return f"%{self.index}"


_OWN_DIRS = (os.sep + "torch" + os.sep, os.sep + "torch_xla" + os.sep, os.sep + "jax" + os.sep)


def user_location() -> str | None:
    """`file:line` of the innermost frame that belongs to neither torch, jax nor torch_xla."""
    for frame in reversed(traceback.extract_stack()):
        if not any(d in frame.filename for d in _OWN_DIRS):
            return f"{frame.filename}:{frame.lineno}" + (f" ({frame.line})" if frame.line else "")
    return None
