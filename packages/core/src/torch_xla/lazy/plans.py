"""Walk plans: what one walk of a graph found, kept by the roots' structural hashes, so
that a sync of a graph that repeats (every training step) finds its nodes again without
walking it.

A plan reaches each node of the walk's post-order through one edge (from a root, or from
a node later in the order) and then checks the whole graph with a few passes over lists:
every node has as many inputs as planned and they are the nodes the plan names, no node
appears twice, and data leaves are exactly where they were. A graph that passes walks as
the planned one did (same order, leaves and sharing pattern); one that fails is walked
again by `graph.walk` and its plan replaces the old one.
"""

from __future__ import annotations

import threading
from collections import Counter
from itertools import chain, repeat
from operator import attrgetter, is_, itemgetter

PLANS_KEPT = 256  # distinct graph structures remembered (each is a few lists of ints)

_inputs = attrgetter("inputs")
_rule = attrgetter("rule")
_node = itemgetter(0)


class Plan:
    """The structure of one walked graph, as positions in its post-order."""

    __slots__ = ("sources", "arity", "children", "roots", "leaf_positions", "shared", "base",
                 "wanted", "donatable")

    def __init__(self, order: list, position: dict, leaves: list, shared: list,
                 values: list) -> None:
        sources: dict[int, tuple[int, int]] = {}
        for j, (n, _) in enumerate(values):
            sources.setdefault(position[id(n)], (-1, j))
        for q, n in enumerate(order):
            for j, (c, _) in enumerate(n.inputs):
                sources.setdefault(position[id(c)], (q, j))
        # Replayed from the last position down: a node's source is later in a post-order.
        self.sources = [(p, *sources[p]) for p in range(len(order) - 1, -1, -1)]
        self.arity = [len(n.inputs) for n in order]
        self.children = [position[id(c)] for n in order for c, _ in n.inputs]
        self.roots = [position[id(n)] for n, _ in values]
        self.leaf_positions = [position[id(leaf)] for leaf in leaves]
        self.shared = tuple(shared)
        # Per node, the references the graph itself holds when every (node, index) entry
        # is a distinct tuple: one per entry naming it, `order`'s and, for a leaf, `leaves`'.
        in_degree = Counter(self.children + self.roots)
        leaf = set(self.leaf_positions)
        self.base = [in_degree[p] + 1 + (p in leaf) for p in range(len(order))]
        # Donation: the results' avals, and the leaves that one of them could overwrite.
        self.wanted = Counter([n.avals[i] for n, i in values])
        self.donatable = [(k, leaf.avals[0]) for k, leaf in enumerate(leaves)
                          if _has_elements(leaf.avals[0]) and leaf.avals[0] in self.wanted]

    def replay(self, values: list) -> tuple[list, list] | None:
        """(order, leaves) of the graph computing `values` if it has this structure."""
        roots = list(map(_node, values))
        order: list = [None] * len(self.arity)
        try:
            for p, q, j in self.sources:
                order[p] = roots[j] if q < 0 else order[q].inputs[j][0]
        except (IndexError, TypeError, AttributeError):
            return None
        leaves = list(map(order.__getitem__, self.leaf_positions))
        if not (list(map(len, map(_inputs, order))) == self.arity
                and _same(list(map(_node, chain.from_iterable(map(_inputs, order)))),
                          list(map(order.__getitem__, self.children)))
                and _same(roots, list(map(order.__getitem__, self.roots)))
                and len(set(order)) == len(order)  # nodes hash by identity
                and _nones(map(_rule, order)) == len(leaves)
                and _nones(map(_rule, leaves)) == len(leaves)):
            return None
        return order, leaves


def _nones(items) -> int:
    return sum(map(is_, items, repeat(None)))  # `list.count` would call the rules' `==`


def _has_elements(aval: tuple) -> bool:
    """Not a scalar (nothing to gain) and not empty (nothing for XLA to alias)."""
    shape = aval[0]
    return bool(shape) and 0 not in shape


def _same(found: list, planned: list) -> bool:
    """The same objects in the same places (nodes define no `==`: this is identity)."""
    return found == planned


def base_without_entries(plan: Plan) -> list[int]:
    """`plan.base` less the entries' references (for a graph whose entries are shared)."""
    leaf = set(plan.leaf_positions)
    return [1 + (p in leaf) for p in range(len(plan.arity))]


_plans: dict[tuple, Plan] = {}
_lock = threading.Lock()


def walked(key: tuple, values: list, walk) -> tuple[list, dict | None, list, Plan]:
    """(order, position, leaves, plan) of the graph computing `values`, whose roots'
    structural hashes are `key`: replayed from the plan kept for `key` when the graph has
    its structure (position None: `positions(order)` makes it when needed), else found by
    `walk(values)` and kept as the plan for `key`."""
    plan = _plans.get(key)
    if plan is not None:
        found = plan.replay(values)
        if found is not None:
            return found[0], None, found[1], plan
    order, position, leaves, shared = walk(values)
    plan = Plan(order, position, leaves, shared, values)
    with _lock:
        _plans[key] = plan
        while len(_plans) > PLANS_KEPT:
            del _plans[next(iter(_plans))]
    return order, position, leaves, plan


def positions(order: list) -> dict[int, int]:
    return {id(n): k for k, n in enumerate(order)}


def clear() -> None:
    with _lock:
        _plans.clear()

