"""The recorder's fast paths (issue 12) record what the general paths record: the lift of
scalar arguments, the node's hash, the device objects and the bookkeeping of each new
engine tensor."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from torch_xla.debug import metrics as met
from torch_xla.lazy import dispatch, functional, ir, nodes, tensor
from torch_xla.lazy.nodes import Lifted

aten = torch.ops.aten


def _data(shape):
    return ir.Data(np.zeros(shape, np.float32), (shape, torch.float32), 0)


def test_node_hash_is_its_key_hash_and_its_inputs_hashes():
    a, b = _data((2,)), _data((3,))
    inputs = [(a, 0), (b, 0)]
    node = ir.Node("f", None, ((), ()), inputs, (((2,), torch.float32),), 0, 1234)
    assert node.hash == hash((1234, ((a.hash, 0), (b.hash, 0))))
    assert ir.Node("g", None, ((), ()), [], (), 0, 99).hash == hash((99, ()))


@pytest.mark.parametrize(
    "args, lifted",
    [
        ((1.0,), None),  # a special scalar stays a constant
        ((0.0,), None),
        ((-1.0,), None),
        ((1,), None),
        ((-1,), None),
        ((2,), [2]),  # an int is lifted as a float is (PyTorch/XLA does the same)
        ((2**70,), None),  # too large for int64: a constant, as in torch
        ((True,), None),  # never a bool
        ((0.5,), [0.5]),
        ((float("nan"),), ["nan"]),
        (([0.5, 1.0],), [[0.5, 1.0]]),
        (((0.5, 2),), [[0.5, 2]]),  # a tuple is lifted as a list
    ],
)
def test_lift_lifts_exactly_the_numbers_that_vary(args, lifted):
    plan = ((1, "other"),)
    x = object()
    new_args, kwargs = nodes.lift(plan, (x, *args), {})
    assert kwargs == {}
    assert new_args[0] is x
    if lifted is None:
        assert new_args == (x, *args)
        return
    value = new_args[1]
    if isinstance(lifted[0], list):
        assert type(value) is list
        assert [type(v) for v in value] == [
            Lifted if type(v) in (float, int) and v not in nodes.SPECIAL_SCALARS else type(v)
            for v in args[0]
        ]
    elif lifted[0] == "nan":
        assert type(value) is Lifted and value.value != value.value
    else:
        assert type(value) is Lifted and value.value == lifted[0]


def test_lift_of_keyword_arguments_is_unchanged():
    args, kwargs = nodes.lift(((None, "value"),), (1,), {"value": 0.25, "other": 3})
    assert args == (1,) and kwargs["other"] == 3 and type(kwargs["value"]) is Lifted


def test_torch_device_is_one_object_per_index():
    assert tensor.torch_device(0) is tensor.torch_device(0)
    assert tensor.torch_device(3) == torch.device("xla", 3)


def test_each_recorded_op_makes_one_counted_pending_tensor(device, metrics):
    x = torch.ones(4, 4, device=device)
    met.clear_all()
    y = (x @ x).relu() * 0.5 + 1.0
    assert met.counter_value("CreateXlaTensor") == 4
    inner = functional.unwrap(y)
    assert type(inner) is tensor.XLATensor and inner.device == torch.device("xla", 0)
    assert any(t is inner for t in tensor.pending_tensors())
    assert any(t is inner for t in tensor.live_tensors())
    assert torch.equal(y.cpu(), torch.full((4, 4), 3.0))
    del y, inner
    gc.collect()
    assert met.counter_value("DestroyXlaTensor") >= 4


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.complex64, torch.complex64),
        (torch.int32, None),  # the default dtype
        (torch.bool, None),
    ],
)
def test_a_lifted_scalar_computes_in_its_ops_floating_dtype(device, dtype, expected):
    t = functional.unwrap(torch.zeros(2, dtype=dtype, device=device))
    assert t.dtype == dtype
    assert dispatch._lifted_dtype(dispatch._floating_dtype([Lifted(0.5), t]), 0.5) == (
        expected or torch.get_default_dtype())
    # an int beside integer or bool tensors is a 0-dim int64, which does not widen them
    assert dispatch._lifted_dtype(dispatch._floating_dtype([Lifted(3), t]), 3) == (
        expected or torch.int64)
    half = functional.unwrap(torch.ones(2, dtype=torch.float16, device=device) * 0.25)
    assert half.dtype == torch.float16 and torch.equal(
        (half * 0.25).cpu(), torch.full((2,), 0.0625, dtype=torch.float16))
