"""No device needed: a walk plan replays graphs of its structure, and only those."""

from __future__ import annotations

import numpy as np
import torch

from torch_xla.lazy import graph, ir, plans

AVAL = ((3,), torch.float32)


def _data() -> ir.Data:
    return ir.Data(np.zeros(3, np.float32), AVAL, 0)


def _add(a: ir.Node, b: ir.Node) -> ir.Node:
    return ir.Node("add", np.add, ((ir.Slot(0), ir.Slot(1)), ()), [(a, 0), (b, 0)],
                   (AVAL,), 0, hash("add"))


def _step(x: ir.Node, y: ir.Node) -> list:
    """Two roots sharing a node: (x + y) + x and x + y."""
    s = _add(x, y)
    return [(_add(s, x), 0), (s, 0)]


def test_a_plan_replays_the_walk_of_a_graph_with_the_same_structure():
    plan = plans.Plan(*_walk_for_plan(_step(_data(), _data())))
    values = _step(_data(), _data())
    order, position, leaves, shared = graph.walk(values)
    replayed = plan.replay(values)
    assert replayed is not None
    assert replayed[0] == order and replayed[1] == leaves
    assert plan.shared == tuple(shared)


def test_a_graph_sharing_other_nodes_is_not_replayed():
    plan = plans.Plan(*_walk_for_plan(_step(_data(), _data())))
    x = _data()
    values = _step(x, x)  # the same hashes, one leaf where the plan has two
    assert plan.replay(values) is None


def test_walked_walks_a_new_structure_and_replays_it_after():
    plans.clear()
    first = _step(_data(), _data())
    key = tuple((n.hash, i) for n, i in first)
    assert plans.walked(key, first, graph.walk)[1] is not None  # walked: positions known
    again = _step(_data(), _data())
    order, position, leaves, _ = plans.walked(key, again, graph.walk)
    assert position is None and order == graph.walk(again)[0]
    x = _data()
    shared = _step(x, x)
    assert plans.walked(key, shared, graph.walk)[2] == [x]  # walked again, not replayed


def _walk_for_plan(values: list) -> tuple:
    order, position, leaves, shared = graph.walk(values)
    return order, position, leaves, shared, values
