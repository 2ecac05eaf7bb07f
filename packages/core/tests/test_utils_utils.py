"""`torch_xla.utils.utils`: PyTorch/XLA's small public helpers."""

from __future__ import annotations

import collections
import gc
import os
import socket

import pytest
import torch

import torch_xla.utils.utils as xu


def test_tmp_folder_is_removed_with_the_object():
    folder = xu.TmpFolder()
    name = folder.name
    with open(os.path.join(name, "file"), "w") as f:
        f.write("x")
    del folder
    gc.collect()
    assert not os.path.exists(name)


def test_lazy_property_computes_once():
    calls = []
    prop = xu.LazyProperty(lambda: calls.append(1) or 42)
    assert calls == []
    assert prop.value == 42 and prop.value == 42 and calls == [1]


def test_sample_generator_restarts_per_pass():
    gen = xu.SampleGenerator(data=("x", "y"), sample_count=3)
    assert len(gen) == 3
    assert list(gen) == [("x", "y")] * 3 and list(gen) == [("x", "y")] * 3
    with pytest.raises(ValueError, match="sample_count"):
        xu.SampleGenerator(1, -1)


def test_fn_data_generator_pairs_data_with_its_target():
    gen = xu.FnDataGenerator(lambda d: d.sum(dim=1), 4, torch.ones, dims=[3], count=2)
    batches = list(gen)
    assert len(gen) == 2 and len(batches) == 2
    data, target = batches[0]
    assert data.shape == (4, 3) and torch.equal(target, torch.full((4,), 3.0))


def test_as_list_shape_flatten_and_copy_append():
    assert xu.as_list(3) == [3] and xu.as_list((1, 2)) == (1, 2)
    assert xu.shape([[1, 2], [3, 4], [5, 6]]) == [3, 2]
    assert xu.shape(7) == [] and xu.shape([]) == [0]
    with pytest.raises(ValueError, match="Ragged"):
        xu.shape([[1, 2], [3]])
    assert xu.flatten_nested_tuple((1, [2, (3, 4)], 5)) == (1, 2, 3, 4, 5)
    original = [1, 2]
    assert xu.list_copy_append(original, 3) == [1, 2, 3] and original == [1, 2]


class _Box:
    def __init__(self, **items):
        self.__dict__.update(items)


class _Pair(xu.DataWrapper):
    def __init__(self, a, b):
        self.a, self.b = a, b

    def get_tensors(self):
        return [self.a, self.b]

    def from_tensors(self, tensors):
        return _Pair(*tensors)


def _nested():
    t1, t2, t3 = torch.ones(1), torch.zeros(2), torch.arange(3)
    return (t1, t2, t3), {"a": [t1, (t2, "s")], "box": _Box(t=t3, n=1), "pair": _Pair(t1, t2)}


def test_for_each_instance_visits_each_selected_object_once():
    (t1, t2, t3), data = _nested()
    seen = []
    xu.for_each_instance(data, lambda v: isinstance(v, torch.Tensor), seen.append)
    assert sorted(map(id, seen)) == sorted(map(id, (t1, t2, t3)))
    ints = []
    xu.for_each_instance([1, "x", {2: 3.0}], int, ints.append)  # a class selects exact instances
    assert sorted(ints) == [1, 2]


def test_for_each_instance_rewrite_copies_and_replaces():
    (t1, t2, t3), data = _nested()
    out = xu.for_each_instance_rewrite(data, lambda v: isinstance(v, torch.Tensor), lambda t: t + 1)
    assert data["a"][0] is t1 and data["box"].t is t3  # the input is unchanged
    assert torch.equal(out["a"][0], t1 + 1) and torch.equal(out["box"].t, t3 + 1)
    assert out["a"][0] is out["pair"].a  # one object, rewritten once
    assert isinstance(out["a"][1], tuple) and out["a"][1][1] == "s"
    assert out["box"].n == 1 and out["box"] is not data["box"]
    Point = collections.namedtuple("Point", "x y")
    moved = xu.for_each_instance_rewrite(Point(t1, 2), torch.is_tensor, lambda t: t * 0)
    assert isinstance(moved, Point) and torch.equal(moved.x, torch.zeros(1))
    cycle = [t1]
    cycle.append(cycle)
    new = xu.for_each_instance_rewrite(cycle, torch.is_tensor, lambda t: t + 1)
    assert new[1] is new


def test_for_each_instance_rewrite_visits_in_for_each_instance_order():
    """ToXlaTensorArena converts the picks of the one and puts them back through the
    other, so both must meet them in one order: a dict's key before its value."""
    (t1, t2, t3), data = _nested()
    keyed = {t1: t2, "k": [t3, {t2: t1}], 3.5: (data, t3)}
    seen, rewritten = [], []
    xu.for_each_instance(keyed, torch.is_tensor, seen.append)
    xu.for_each_instance_rewrite(keyed, torch.is_tensor, lambda t: rewritten.append(t) or t)
    assert [id(t) for t in rewritten] == [id(t) for t in seen]
    assert len(seen) == 3


def test_for_each_instance_rewrite_keeps_tensors_it_does_not_pick():
    """A tensor is a value, not an object whose attributes are rewritten: one the select
    leaves is kept as it is, not copied."""
    t, n = torch.ones(2), torch.zeros(1)
    out = xu.for_each_instance_rewrite({"a": [t], "b": n}, lambda v: v is t, lambda v: v + 1)
    assert out["b"] is n and torch.equal(out["a"][0], t + 1)


def test_getenv_as(monkeypatch):
    monkeypatch.setenv("XU_INT", "12")
    monkeypatch.setenv("XU_FLAG", "0")
    assert xu.getenv_as("XU_INT", int) == 12
    assert xu.getenv_as("XU_FLAG", bool, True) is False
    assert xu.getenv_as("XU_UNSET", str, "d") == "d"


def test_parse_xla_device():
    assert xu.parse_xla_device("TPU:3") == ("TPU", 3)
    assert xu.parse_xla_device("CPU:0") == ("CPU", 0)
    assert xu.parse_xla_device("xla:0") is None


def test_free_tcp_ports_can_be_bound():
    ports = xu.get_free_tcp_ports(2)
    assert len(ports) == 2
    for port in ports:
        with socket.socket() as s:
            s.bind(("", port))


def test_parallel_work_keeps_order_and_raises():
    assert xu.parallel_work(3, lambda a, b: a * b, [1, 2, 3], [4, 5, 6]) == [4, 10, 18]
    with pytest.raises(ZeroDivisionError):
        xu.parallel_work(2, lambda a: 1 / a, [1, 0])


def test_print_fns(monkeypatch, capsys):
    monkeypatch.setenv("DEBUG", "1")
    assert xu.get_print_fn() is xu.eprint
    assert xu.get_print_fn(0) is xu.null_print
    xu.eprint("to stderr")
    assert capsys.readouterr().err == "to stderr\n"


def test_timed_and_timed_scope_print_milliseconds():
    lines = []
    assert xu.timed(lambda: 5, msg="step ", printfn=lines.append) == 5
    with xu.TimedScope("scope ", printfn=lines.append):
        pass
    with xu.TimedScope("failed ", printfn=lines.append) as scope:
        scope.set_error(RuntimeError("x"))
    assert len(lines) == 2
    assert lines[0].startswith("step ") and lines[0].endswith("ms")
    assert float(lines[1][len("scope "):-2]) >= 0.0
