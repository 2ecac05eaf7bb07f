"""Collectives in a world of one process: what they record, their HLO text, how they run.

PyTorch/XLA's tests read the HLO of collectives in a world of one: with
XLA_ALWAYS_ALLREDUCE=1 (collectives recorded although one replica needs none), and with
replica groups of a mocked bigger world. The text names the ops and groups as XLA prints
them; running stays exact (one replica: each collective is the identity, checked
against the eager value) or fails with a clear error (groups naming absent replicas).
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import run_python

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.lowering import collectives

VALUE = torch.tensor([[1.0, -2.0, 0.5, 4.0], [3.0, 0.5, -1.5, 2.0]])


@pytest.fixture(scope="module")
def device():
    return torch_xla.device()


@pytest.fixture
def always(monkeypatch):
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")


def _hlo(*tensors: torch.Tensor) -> str:
    return torch_xla._XLAC._get_xla_tensors_hlo(list(tensors))


def _instructions(hlo: str, opcode: str) -> list[str]:
    """The lines of `hlo` defining an `opcode` instruction, as PyTorch/XLA prints them."""
    name = re.escape(opcode)
    return re.findall(rf"%{name}\.\d+ = .+ {name}\(.*", hlo)


# --- XLA_ALWAYS_ALLREDUCE: a world of one records and runs its collectives ------------------

ONE_REPLICA = {
    # op: (xm call, eager reference of one replica, HLO opcode)
    "all_reduce": (lambda t: xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5),
                   lambda v: v * 0.5, "all-reduce"),
    "all_reduce_max": (lambda t: xm.all_reduce(xm.REDUCE_MAX, t), lambda v: v, "all-reduce"),
    "all_gather": (lambda t: xm.all_gather(t, dim=1), lambda v: v, "all-gather"),
    "reduce_scatter": (lambda t: xm.reduce_scatter(xm.REDUCE_SUM, t, 2.0, 0, 1),
                       lambda v: v * 2.0, "reduce-scatter"),
    # jax lowers an all-to-all over one replica to nothing (it is the identity)
    "all_to_all": (lambda t: xm.all_to_all(t, 1, 0, 1), lambda v: v, None),
    "collective_permute": (lambda t: xm.collective_permute(t, [[0, 0]]), lambda v: v,
                           "collective-permute"),
}


@pytest.mark.parametrize("op", sorted(ONE_REPLICA))
def test_always_allreduce_records_the_collective_and_runs_it(device, always, op):
    call, reference, opcode = ONE_REPLICA[op]
    out = call(VALUE.to(device))
    if opcode is not None:
        found = _instructions(_hlo(out), opcode)
        assert len(found) == 1, _hlo(out)
        assert "replica_groups={{0}}" in found[0] or "source_target_pairs" in found[0]
    torch.testing.assert_close(out.cpu(), reference(VALUE))


def test_without_the_variable_one_replica_records_no_collective(device, monkeypatch):
    monkeypatch.delenv("XLA_ALWAYS_ALLREDUCE", raising=False)
    out = xm.all_reduce(xm.REDUCE_SUM, VALUE.to(device))
    assert "all-reduce" not in _hlo(out)
    torch.testing.assert_close(out.cpu(), VALUE)


def test_the_variable_is_read_at_each_call_as_upstream_does(monkeypatch):
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "0")
    assert not collectives.records(1)
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")
    assert collectives.records(1) and collectives.records(2)


def test_a_list_is_gathered_by_one_all_gather_of_several_operands(device, always):
    a, b = VALUE.to(device), torch.arange(5, device=device)
    outs = xm.all_gather([a, b], dim=0, pin_layout=False)
    found = _instructions(_hlo(*outs), "all-gather")
    assert len(found) == 1, _hlo(*outs)
    assert re.match(r"%all-gather\.\d+ = \(f32\[2,4\]\{1,0\}, s64\[5\]\{0\}\) "
                    r"all-gather\(f32\[2,4\]\{1,0\} %.+\.\d+, s64\[5\]\{0\} %.+\.\d+\)", found[0])
    torch.testing.assert_close(outs[0].cpu(), VALUE)
    torch.testing.assert_close(outs[1].cpu(), torch.arange(5))


def test_a_list_with_pinned_layout_is_refused_as_upstream_does(device):
    with pytest.raises(RuntimeError, match="pin_layout=True"):
        xm.all_gather([VALUE.to(device)], dim=0)


def test_a_collective_on_another_device_of_the_process_runs_there():
    # a fresh process with four devices (the runtime is one per process)
    result = run_python(
        """
        import torch, torch_xla.core.xla_model as xm
        value = torch.arange(6.0).reshape(2, 3)
        out = xm.all_reduce(xm.REDUCE_SUM, value.to("xla:2"), scale=2.0)
        print(out.device, torch.equal(out.cpu(), value * 2.0))
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4", "XLA_ALWAYS_ALLREDUCE": "1"},
    )
    assert result.stdout.split() == ["xla:2", "True"], result.stderr[-3000:]


# --- replica groups naming more replicas than the job has -------------------------------


def test_groups_of_a_bigger_world_appear_in_the_text(device):
    out = xm.all_reduce(xm.REDUCE_SUM, VALUE.to(device), groups=[[0, 1], [2, 3], [4, 5]])
    found = _instructions(_hlo(out), "all-reduce")
    assert len(found) == 1 and "replica_groups={{0,1},{2,3},{4,5}}" in found[0], _hlo(out)


@pytest.mark.parametrize("op, opcode", [
    (lambda t: xm.all_gather(t, dim=0, groups=[[0, 2], [1, 3]]), "all-gather"),
    (lambda t: xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, 2, groups=[[0, 2], [1, 3]]),
     "reduce-scatter"),
    (lambda t: xm.all_to_all(t, 1, 1, 2, groups=[[0, 2], [1, 3]]), "all-to-all"),
])
def test_each_grouped_collective_shows_its_groups(device, op, opcode):
    out = op(VALUE.to(device))
    found = _instructions(_hlo(out), opcode)
    assert len(found) == 1 and "replica_groups={{0,2},{1,3}}" in found[0], _hlo(out)


def test_running_groups_of_absent_replicas_is_a_clear_error(device):
    out = xm.all_reduce(xm.REDUCE_SUM, VALUE.to(device), groups=[[0, 1], [2, 3]])
    with pytest.raises(RuntimeError, match=r"all_reduce was recorded over 4 replicas.*"
                                           r"this job has 1"):
        out.cpu()
    del out
    torch_xla.sync()  # once the tensor is gone, nothing of the graph is left to run


def test_groups_must_still_name_every_replica_once(device):
    with pytest.raises(ValueError, match="exactly once"):
        xm.all_reduce(xm.REDUCE_SUM, VALUE.to(device), groups=[[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="exactly once"):
        xm.all_reduce(xm.REDUCE_SUM, VALUE.to(device), groups=[[0, 1], [3, 4]])
