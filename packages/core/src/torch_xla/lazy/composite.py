"""Marked regions of a graph, which lower as StableHLO composites.

`torch.ops.xla.mark_tensor` (`experimental/xla_marker.py`) records an identity node,
`mark`, whose static argument is a `Boundary`: the pattern's name, the instance's id, the
tensor's position and whether it is an input or an output of the pattern. `find` groups
a walked graph: the region of a pattern instance (name and id) holds the nodes its output
marks' values are computed from, walking back until the instance's input marks or the
graph's leaves. Its composite takes the input marks' values (by position), then every
other value read inside (leaves, nodes outside the region), and returns the output marks'
values (by position). A region whose nodes (and input marks) lie inside another one's is
nested in it; regions that overlap otherwise are an error.

`schedule` orders the work of one scope (the graph, or a region's body) with each nested
region as one unit: a value read outside its region comes from the region's result when
it is one, and is otherwise computed again outside (a saved activation read by the
backward pass, say); the marks compute nothing, so neither changes a number.

The instance id only pairs marks inside one graph: it is not part of a mark's hash or
equality, so a pattern marked with a fresh id every step (`StableHLOCompositeBuilder`
draws one per builder) compiles once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from torch_xla.lazy import ir, nodes
from torch_xla.lazy.tensor import XLATensor

MARK_OP = "xla::mark_tensor"

Value = tuple[ir.Node, int]


class CompositeError(ValueError):
    """The marks of a pattern do not enclose a region that a composite can hold."""


@dataclasses.dataclass(frozen=True)
class Boundary:
    """Where a marked tensor stands in its pattern. `attr`: the pattern's attributes,
    `((key, value), ...)` with lists as tuples (hashable), carried by output marks."""
    name: str
    pos: int
    id: str = dataclasses.field(compare=False, repr=False)  # pairs marks; not identity
    is_input: bool = True
    attr: tuple = ()


def _identity(x: Any, boundary: Boundary) -> Any:
    return x  # a mark outside any region (its pattern is not whole in this graph)


def mark(t: XLATensor, boundary: Boundary) -> XLATensor:
    """`t` marked as `boundary` says: the same value, through a node of its own."""
    node, index = t.value
    return XLATensor(nodes.engine_node(MARK_OP, _identity, (boundary,), [(node, index)],
                                       node.avals[index], node.device))


def boundary_of(node: ir.Node) -> Boundary | None:
    return node.template[0][1] if node.op == MARK_OP else None


class Region:
    """One pattern instance of a graph: its `body` (node ids -> nodes), `operands` and
    `results` (values), the regions nested directly inside it, and the name of the
    function holding its decomposition."""

    __slots__ = ("name", "id", "attributes", "inputs", "operands", "results", "body",
                 "children", "decomposition", "first")

    def __init__(self, name: str, id_: str, inputs: list, outputs: list, position: dict
                 ) -> None:
        self.name, self.id = name, id_
        self.inputs = inputs  # the input marks, by position
        self.results = [n.inputs[0] for n in outputs]
        self.attributes = _attributes(self, outputs)
        self.body = _enclosed(self.results, {id(n) for n in inputs})
        self.operands = _operands(self, position)
        self.children: list[Region] = []
        self.decomposition = ""
        self.first = min(position[id(n)] for n in outputs)  # program order

    def describe(self) -> str:
        return f"pattern {self.name!r} (id {self.id!r})"


def _enclosed(results: list, stops: set) -> dict:
    body: dict[int, ir.Node] = {}
    stack = [n for n, _ in results]
    while stack:
        n = stack.pop()
        if id(n) in body or id(n) in stops or n.rule is None:
            continue
        body[id(n)] = n
        stack.extend(c for c, _ in n.inputs)
    return body


def _operands(region: Region, position: dict) -> list:
    read: dict[tuple[int, int], Value] = {}
    for n in region.body.values():
        for c, i in n.inputs:
            if id(c) not in region.body:
                read.setdefault((id(c), i), (c, i))
    for n, i in region.results:
        if id(n) not in region.body:  # an output that is an input, unchanged
            read.setdefault((id(n), i), (n, i))
    unreached = [boundary_of(n).pos for n in region.inputs if (id(n), 0) not in read]
    if unreached:
        raise CompositeError(
            f"{region.describe()}: its inputs at positions {unreached} do not reach any of "
            "its outputs, so the composite could not take them. Mark as inputs only "
            "tensors its outputs are computed from, or mark the outputs that use them.")
    marked = {id(n) for n in region.inputs}
    others = sorted((v for k, v in read.items() if k[0] not in marked),
                    key=lambda v: (position[id(v[0])], v[1]))
    return [(n, 0) for n in region.inputs] + others


def _attributes(region: Region, outputs: list) -> tuple:
    merged: dict[str, Any] = {}
    for n in outputs:
        for key, value in boundary_of(n).attr:
            if merged.setdefault(key, value) != value:
                raise CompositeError(
                    f"{region.describe()}: its outputs give the attribute {key!r} two "
                    f"values, {merged[key]!r} and {value!r}; give every output mark the "
                    "same attributes (StableHLOCompositeBuilder does).")
    return tuple(sorted(merged.items()))


def _by_position(marks: list, name: str, kind: str) -> list:
    found: dict[int, ir.Node] = {}
    for n in marks:
        pos = boundary_of(n).pos
        if pos in found:
            raise CompositeError(
                f"pattern {name!r} (id {boundary_of(n).id!r}) has two {kind} marks at "
                f"position {pos}: give each {kind} its own position.")
        found[pos] = n
    return [found[p] for p in sorted(found)]


def find(order: list) -> list[Region]:
    """The outermost regions of the graph whose post-order is `order` (each holding its
    nested ones); a `CompositeError` names a pattern whose marks enclose no region. A
    pattern only some of whose input marks are in the graph reads the missing inputs as
    other operands; an input mark that nothing in the graph reads is not in it at all."""
    marks: dict[tuple[str, str], tuple[list, list]] = {}
    for n in order:
        if n.op == MARK_OP:
            b = boundary_of(n)
            marks.setdefault((b.name, b.id), ([], []))[0 if b.is_input else 1].append(n)
    if not marks:
        return []
    position = {id(n): k for k, n in enumerate(order)}
    regions = []
    for (name, id_), (ins, outs) in marks.items():
        if outs and not ins:
            raise CompositeError(
                f"pattern {name!r} (id {id_!r}): its outputs are marked but none of its "
                "inputs is in this program. Mark its inputs with the same name and id "
                "(StableHLOCompositeBuilder.mark_inputs, or torch.ops.xla.mark_tensor(..., "
                "is_input=True)), and do not sync (mark_step, .item(), printing a value) "
                "between marking the inputs and the outputs.")
        if outs:
            regions.append(Region(name, id_, _by_position(ins, name, "input"),
                                  _by_position(outs, name, "output"), position))
    _name_decompositions(regions)
    return _nest(regions)


def _name_decompositions(regions: list[Region]) -> None:
    """`name.impl` for the last region of a name in program order, `name.impl_0` for the
    one before it, `name.impl_1` before that: the names MLIR's symbol table gives
    functions of one name inserted last region first, as PyTorch/XLA's are."""
    by_name: dict[str, list[Region]] = {}
    for r in sorted(regions, key=lambda r: r.first):
        by_name.setdefault(r.name, []).append(r)
    for name, group in by_name.items():
        for back, r in enumerate(reversed(group)):
            r.decomposition = f"{name}.impl" + (f"_{back - 1}" if back else "")


def _nest(regions: list[Region]) -> list[Region]:
    regions = sorted(regions, key=lambda r: len(r.body))
    span = {id(r): set(r.body) | {id(n) for n in r.inputs} for r in regions}
    top = []
    for r in regions:
        parent = None
        for p in regions:
            if p is r:
                continue
            if span[id(r)].issubset(p.body):
                parent = parent or p  # the smallest region holding it
            elif not r.body.keys().isdisjoint(p.body) and not span[id(p)].issubset(r.body):
                raise CompositeError(
                    f"{r.describe()} and {p.describe()} overlap, but neither holds the "
                    "other: nest patterns wholly (the inner one's inputs and ops inside "
                    "the outer one) or keep them apart.")
        (parent.children if parent else top).append(r)
    for r in regions:
        r.children.sort(key=lambda c: c.first)
    return sorted(top, key=lambda r: r.first)


# --- ordering a scope's work --------------------------------------------------------------

Unit = Any  # an ir.Node computed in the scope, or a Region called as one composite


def schedule(scope: Region | None, children: list[Region], wanted: Iterable[Value]
             ) -> list[Unit]:
    """The nodes and nested regions that compute `wanted` inside `scope` (None: the whole
    graph), in an order where each comes after what it reads; every region of
    `children` is called even if no wanted value reads it."""
    owner = {(id(n), i): c for c in children for n, i in c.results if id(n) in c.body}

    def producer(value: Value) -> Unit | None:
        n, i = value
        child = owner.get((id(n), i))
        if child is not None:
            return child
        if n.rule is None or (scope is not None and id(n) not in scope.body):
            return None  # an argument of the scope
        return n

    def reads(unit: Unit) -> list[Unit]:
        values = unit.operands if type(unit) is Region else unit.inputs
        return [p for p in map(producer, values) if p is not None]

    roots = [p for p in map(producer, wanted) if p is not None] + children
    return _topological(roots, reads)


def _topological(roots: list[Unit], reads: Callable[[Unit], list[Unit]]) -> list[Unit]:
    done: dict[int, bool] = {}  # id -> finished (False: on the current path)
    out: list[Unit] = []
    for root in roots:
        if id(root) in done:
            continue
        done[id(root)] = False
        stack = [(root, iter(reads(root)))]
        while stack:
            unit, pending = stack[-1]
            for dep in pending:
                state = done.get(id(dep))
                if state is None:
                    done[id(dep)] = False
                    stack.append((dep, iter(reads(dep))))
                    break
                if state is False:
                    raise CompositeError(_cycle_message(u for u, _ in stack))
            else:
                stack.pop()
                done[id(unit)] = True
                out.append(unit)
    return out


def _cycle_message(path: Iterable[Unit]) -> str:
    named = [u.describe() for u in path if type(u) is Region]
    return (f"{', '.join(named) or 'a pattern'}: an input of the pattern is computed from "
            "one of its own outputs, so no composite can hold it. Mark as inputs only "
            "values computed before the pattern.")
