"""Recording (`lazy/dispatch.py`): the shape cache gives what inference gives, scalars that
compare equal but lower apart stay apart, and the first op of a process imports nothing."""

from __future__ import annotations

import math

import torch

import torch_xla.debug.metrics as met
from torch_xla.lazy import dispatch, functional

from .helpers import assert_close, run_python

aten = torch.ops.aten


def _node(t: torch.Tensor):
    return functional.unwrap(t)._node


def test_a_cache_hit_records_what_a_miss_records(device):
    x = torch.randn(3, 4, device=device)
    dispatch._shape_cache.pop(aten.addcmul.default, None)
    missed = _node(torch.addcmul(x, x, x, value=0.25))  # `value` is lifted
    hit = _node(torch.addcmul(x, x, x, value=0.75))
    assert (hit.template, hit.avals, hit.hash) == (missed.template, missed.avals, missed.hash)
    assert [n.avals[i] for n, i in hit.inputs] == [n.avals[i] for n, i in missed.inputs]
    cpu = x.cpu()
    assert_close(torch.addcmul(x, x, x, value=0.75), torch.addcmul(cpu, cpu, cpu, value=0.75))


def test_list_and_keyword_arguments_key_the_cache(device):
    x = torch.randn(2, 3, 4, device=device)
    cpu = x.cpu()
    assert_close(x.sum(dim=[0, 2]), cpu.sum(dim=[0, 2]))
    assert_close(x.sum(dim=[1]), cpu.sum(dim=[1]))
    assert_close(x.sum(dim=[0, 2], keepdim=True), cpu.sum(dim=[0, 2], keepdim=True))
    assert_close(torch.cat([x, x, x], dim=1), torch.cat([cpu, cpu, cpu], dim=1))
    assert_close(torch.cat([x, x], dim=1), torch.cat([cpu, cpu], dim=1))


def test_equal_scalars_of_other_types_record_apart(device):
    x = torch.arange(6, device=device).reshape(2, 3)
    assert _node(x.pow(2)).hash != _node(x.pow(2.0)).hash
    assert x.pow(2).dtype == torch.int64 and x.pow(2.0).dtype == torch.float32


def test_negative_zero_is_not_recorded_as_zero(device):
    pos = torch.full((2,), 0.0, device=device)
    neg = torch.full((2,), -0.0, device=device)
    assert _node(pos).hash != _node(neg).hash
    assert torch.equal((1 / neg).cpu(), torch.full((2,), -math.inf))
    assert torch.equal((1 / pos).cpu(), torch.full((2,), math.inf))


def test_first_op_imports_nothing_torch_loads_lazily():
    # torch imports these inside the first subclass op / Python meta kernel; the engine
    # loads them with itself, so the first op of a process is as fast as later ones
    out = run_python(
        """
        import sys, torch
        import torch_xla.core.xla_model as xm
        x = torch.ones(3, device=xm.xla_device())
        before = set(sys.modules)
        y = x + 1
        late = sorted(m for m in set(sys.modules) - before
                      if m.startswith(("torch.distributed", "torch._dynamo")))
        print(late)
        """,
        env={"PJRT_DEVICE": "CPU"},
        fresh=True,  # a forked run has them from its server
    )
    assert out.strip().splitlines()[-1] == "[]"


def test_nan_scalars_hit_the_cache(device):
    x = torch.randn(4, device=device)
    cache = dispatch._shapes_of(aten.full_like.default)
    torch.full_like(x, float("nan"))
    size = len(cache)
    assert size > 0
    for _ in range(3):
        y = torch.full_like(x, float("nan"))  # a new float object each time
    assert len(cache) == size
    assert torch.isnan(y.cpu()).all()


def test_pt2e_quantize_and_dequantize_are_recorded_not_run_on_the_cpu(device):
    """torch's quantized_decomposed ops (composites of arithmetic for every backend) are
    recorded on the device; their values equal the CPU kernels'."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401 (defines the ops)
    qd = torch.ops.quantized_decomposed
    x = torch.randn(4, 8) * 3
    scales, zero_points = torch.rand(4) + 0.01, torch.randint(-3, 3, (4,))
    met.clear_all()
    q = qd.quantize_per_tensor(x.to(device), 0.05, 3, -128, 127, torch.int8)
    dq = qd.dequantize_per_tensor(q, 0.05, 3, -128, 127, torch.int8)
    qc = qd.quantize_per_channel(x.to(device), scales.to(device), zero_points.to(device), 0,
                                 -128, 127, torch.int8)
    dqc = qd.dequantize_per_channel(qc, scales.to(device), zero_points.to(device), 0, -128,
                                    127, torch.int8)
    assert not met.executed_fallback_ops()
    q_cpu = qd.quantize_per_tensor(x, 0.05, 3, -128, 127, torch.int8)
    qc_cpu = qd.quantize_per_channel(x, scales, zero_points, 0, -128, 127, torch.int8)
    assert torch.equal(q.cpu(), q_cpu) and torch.equal(qc.cpu(), qc_cpu)
    assert torch.equal(dq.cpu(), qd.dequantize_per_tensor(q_cpu, 0.05, 3, -128, 127, torch.int8))
    assert torch.equal(dqc.cpu(), qd.dequantize_per_channel(qc_cpu, scales, zero_points, 0,
                                                            -128, 127, torch.int8))
