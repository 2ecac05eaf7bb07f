"""The lowering table: one entry per ATen overload, mapping it to a pure-JAX function.

Only this module owns the table; op modules add to it with the `register` decorator
and the engine reads it with `lookup`.

A module's registrations are all-or-nothing: a rule registered while a module is imported
lives only as long as that module stays in `sys.modules`. Python drops a module whose import
raised, so its rules vanish with it, and importing it again reports the module's own error
instead of a `DuplicateLoweringError` for the rules its first try left behind.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType

import torch
from torch._ops import OpOverload, OpOverloadPacket

OpLike = OpOverload | OpOverloadPacket


@dataclasses.dataclass(frozen=True)
class Lowering:
    """How one ATen rule becomes JAX.

    The engine calls `fn(*args, **kwargs)` with the op's original arguments, every tensor
    replaced by a `jax.Array` (lists of tensors by lists of arrays).
    """

    # Every overload this rule serves (the decorator's arguments, packets expanded).
    overloads: tuple[OpOverload, ...]
    # The pure-JAX function; returns an array or a tuple/list matching the schema's returns.
    fn: Callable
    # True: the engine passes `rng=<raw uint32[2] jax PRNG key>` as an extra keyword.
    needs_rng: bool = False
    # "path/to/file.py:123" of the decorated function, for error and debug messages.
    source: str = "<unknown>"
    # The module whose code registered this rule (None: code outside any imported module);
    # the rule counts only while that module is the one in sys.modules (see `is_live`).
    owner: ModuleType | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def is_live(self) -> bool:
        """False once the module that registered this rule failed to import."""
        return self.owner is None or sys.modules.get(self.owner.__name__) is self.owner

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.name} ({self.source})"


class DuplicateLoweringError(ValueError):
    """An overload was registered twice without `override=True`."""


class DataDependentShapeError(NotImplementedError):
    """Raised while tracing when an op's output shape depends on input values (e.g.
    `x[mask]`): it has no static-shape lowering, so the engine should run it on the CPU."""


_TABLE: dict[OpOverload, Lowering] = {}


def is_out_variant(op: OpOverload) -> bool:
    return any(a.kwarg_only and a.is_out for a in op._schema.arguments)


def expand(op: OpLike) -> list[OpOverload]:
    """The overloads an op names: itself, or every functional overload of a packet.

    `out=` variants are left out of packets: functionalization never lets them reach
    the engine.
    """
    if isinstance(op, OpOverload):
        return [op]
    if isinstance(op, OpOverloadPacket):
        overloads = [getattr(op, name) for name in op.overloads()]
        return [o for o in overloads if not is_out_variant(o)]
    raise TypeError(
        f"register() takes torch OpOverload or OpOverloadPacket objects, got {op!r} "
        f"of type {type(op).__name__}; write e.g. torch.ops.aten.add.Tensor"
    )


def _source_of(fn: Callable) -> str:
    try:
        code = inspect.unwrap(fn).__code__
        return f"{code.co_filename}:{code.co_firstlineno}"
    except (AttributeError, ValueError):
        return "<unknown>"


def _module_of(namespace: dict) -> ModuleType | None:
    """The imported module whose globals are `namespace`, or None (exec'd code, a REPL)."""
    module = sys.modules.get(namespace.get("__name__"))
    return module if module is not None and module.__dict__ is namespace else None


def register(
    *ops: OpLike | None, needs_rng: bool = False, override: bool = False
) -> Callable[[Callable], Callable]:
    """Decorator: lower every overload in `ops` with the decorated function.

    `None` entries are skipped, so a module can name an overload that only some torch
    versions have (`getattr(aten.foo, "bar", None)`). Registering an overload that is
    already in the table raises `DuplicateLoweringError` unless `override=True`; a rule
    left behind by a failed import of a module does not count (see the module docstring).
    """

    def decorate(fn: Callable) -> Callable:
        overloads = tuple(o for op in ops if op is not None for o in expand(op))
        if not overloads:
            raise ValueError(f"register() for {fn.__qualname__} names no overload")
        owner = _module_of(sys._getframe(1).f_globals)  # the code applying the decorator
        entry = Lowering(overloads, fn, needs_rng=needs_rng, source=_source_of(fn), owner=owner)
        clashes = [o for o in overloads if lookup(o) is not None]
        if clashes and not override:
            first = clashes[0]
            raise DuplicateLoweringError(
                f"{first} is already lowered by {_TABLE[first]}; the second rule is "
                f"{entry}. Remove one, or pass override=True to the one that should win."
            )
        for o in overloads:
            _TABLE[o] = entry
        return fn

    return decorate


def lookup(op: OpOverload) -> Lowering | None:
    """The lowering for one ATen overload, or None if it has no native lowering."""
    entry = _TABLE.get(op)
    return entry if entry is not None and entry.is_live else None


def registered() -> Iterator[tuple[OpOverload, Lowering]]:
    """Every (overload, lowering) pair in the table, in registration order."""
    return iter([(op, entry) for op, entry in _TABLE.items() if entry.is_live])


def unregister(ops: Iterable[OpOverload]) -> None:
    """Remove overloads from the table (tests use it to undo temporary registrations)."""
    for op in ops:
        _TABLE.pop(op, None)


def aten_overloads() -> Iterator[OpOverload]:
    """Every ATen overload this torch build defines (including not yet loaded packets)."""
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, rest = qualified.partition("::")
        if namespace != "aten":
            continue
        name, _, overload_name = rest.partition(".")
        packet = getattr(torch.ops.aten, name, None)
        overload = getattr(packet, overload_name or "default", None) if packet else None
        if isinstance(overload, OpOverload):
            yield overload


def core_aten_ops() -> list[OpOverload]:
    """Every functional overload torch tags as Core ATen (`torch.Tag.core`); out= variants
    are left out, as in `expand`: functionalization never lets them reach the engine."""
    return [op for op in aten_overloads() if torch.Tag.core in op.tags and not is_out_variant(op)]
