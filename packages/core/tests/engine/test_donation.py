"""Buffer donation: a sync hands a program the buffers of tensors it overwrites
(parameters, optimizer state) when nothing else can read them, as PyTorch/XLA's
parameter aliasing does (XLA_ENABLE_PARAM_ALIASING, on by default), and the buffers
the user marked (`_XLAC._set_buffer_donation`).

Eager CPU PyTorch is the oracle for every value; `InputOutputAliasCount` (donated
inputs per compiled graph) says whether a buffer was donated.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.lazy import compiler, functional, graph

from .helpers import assert_close
from .models import MNIST, mnist_batch, mnist_loss

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
ADAM_TOLERANCE = {"rtol": 1e-3, "atol": 5e-4}  # as test_training.py, for the same reason

OPTIMIZERS = {
    "sgd_momentum": (lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9), TOLERANCE),
    "adamw": (lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1), ADAM_TOLERANCE),
}


@pytest.fixture(params=["on", "off"])
def aliasing(request, monkeypatch) -> bool:
    """Donation on (the default) or turned off with XLA_ENABLE_PARAM_ALIASING=0."""
    if request.param == "off":
        monkeypatch.setenv(graph.PARAM_ALIASING_VARIABLE, "0")
    else:
        monkeypatch.delenv(graph.PARAM_ALIASING_VARIABLE, raising=False)
    return request.param == "on"


def _donated() -> list[float]:
    """`InputOutputAliasCount` of each graph compiled since the metrics were cleared."""
    data = met.metric_data("InputOutputAliasCount")
    return [] if data is None else [v for _, v in data[2]]


def _leaf(t: torch.Tensor):
    return functional.unwrap(t)._node


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_optimizer_steps_equal_eager(device, metrics, aliasing, optimizer, recwarn):
    make_optimizer, tolerance = OPTIMIZERS[optimizer]
    torch.manual_seed(0)
    eager = MNIST()
    lazy = copy.deepcopy(eager).to(device)
    eager_opt, lazy_opt = make_optimizer(eager.parameters()), make_optimizer(lazy.parameters())
    xm.mark_step()
    # compile this test's steps here: another test's MNIST step with SGD (the learning rate
    # is a graph input) is the same program, and its donation counts are what is checked
    compiler.cache().clear()
    metrics.clear_all()
    for _ in range(4):
        x, y = mnist_batch()
        losses = []
        for model, opt, batch in ((eager, eager_opt, (x, y)),
                                  (lazy, lazy_opt, (x.to(device), y.to(device)))):
            opt.zero_grad()
            loss = mnist_loss(model, *batch)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        xm.mark_step()
        assert_close(losses[1], losses[0], **tolerance)
    for p_lazy, p_eager in zip(lazy.parameters(), eager.parameters(), strict=True):
        assert_close(p_lazy, p_eager.detach(), **tolerance)
    for state_lazy, state_eager in zip(lazy_opt.state.values(), eager_opt.state.values(),
                                       strict=True):
        for name, value in state_eager.items():
            assert_close(state_lazy[name], value, **tolerance)
    # jax warns when a donated buffer matched no output: every donation must be usable
    assert not [w for w in recwarn if "donated" in str(w.message)]
    donated = _donated()
    assert donated, "no graph was compiled"
    params = len(list(lazy.parameters()))
    if aliasing:
        # once the state exists, a step overwrites every parameter and its state in place
        assert max(donated) >= params, donated
    else:
        assert max(donated) == 0, donated


def test_in_place_update_is_donated_and_right(device, metrics):
    p = torch.arange(12.0, device=device).reshape(3, 4)
    xm.mark_step()
    expected = torch.arange(12.0).reshape(3, 4)
    old = _leaf(p).array
    metrics.clear_all()
    p.mul_(2).add_(1)
    expected.mul_(2).add_(1)
    xm.mark_step()
    assert _donated() == [1.0]
    assert old.is_deleted()  # the program wrote its result into the old buffer
    assert_close(p, expected)
    for _ in range(3):  # the same step again: the cached donating program
        p.mul_(2).add_(1)
        expected.mul_(2).add_(1)
        xm.mark_step()
    assert_close(p, expected)
    assert met.counter_value("CachedCompile") == 3
    assert _donated() == [1.0]


def test_aliasing_off_donates_nothing(device, metrics, monkeypatch):
    monkeypatch.setenv(graph.PARAM_ALIASING_VARIABLE, "0")
    p = torch.ones(8, device=device)
    xm.mark_step()
    old = _leaf(p).array
    metrics.clear_all()
    p.add_(1)
    xm.mark_step()
    assert _donated() == [0.0]
    assert not old.is_deleted()
    assert_close(p, torch.full((8,), 2.0))


def test_detached_alias_is_kept_and_right(device, metrics):
    p = torch.ones(5, device=device)
    xm.mark_step()
    p_cpu = torch.ones(5)
    q, q_cpu = p.detach(), p_cpu.detach()  # shares p's storage: sees the update
    old = _leaf(p).array
    metrics.clear_all()
    p.add_(1)
    p_cpu.add_(1)
    xm.mark_step()
    assert _donated() == [0.0]
    assert not old.is_deleted()
    assert_close(q, q_cpu)
    assert_close(p, p_cpu)


def test_other_reader_of_the_buffer_keeps_it(device, metrics):
    """A clone made before the update (its own value in eager) and an alias (p's value)."""
    p = torch.full((6,), 3.0, device=device)
    xm.mark_step()
    before = torch.ops.aten.alias(p)  # an engine-level second holder of the same data
    kept = p.clone()
    metrics.clear_all()
    p.add_(1)
    xm.mark_step()
    assert_close(kept, torch.full((6,), 3.0))
    assert_close(p, torch.full((6,), 4.0))
    assert_close(before, torch.full((6,), 4.0))


def test_pending_reader_outside_the_sync_keeps_the_buffer(device, metrics):
    p = torch.full((4,), 2.0, device=device)
    xm.mark_step()
    later = p * 10  # pending IR reading p's current buffer, not part of the next sync
    p.add_(1)
    metrics.clear_all()
    assert_close(p, torch.full((4,), 3.0))  # syncs p alone: `later` stays pending
    assert _donated() == [0.0]
    assert_close(later, torch.full((4,), 20.0))
    assert_close(p, torch.full((4,), 3.0))


def test_views_see_the_update(device, metrics):
    base = torch.arange(6.0, device=device).reshape(2, 3)
    xm.mark_step()
    base_cpu = torch.arange(6.0).reshape(2, 3)
    row, row_cpu = base[1], base_cpu[1]
    flat, flat_cpu = base.view(-1), base_cpu.view(-1)
    metrics.clear_all()
    base.mul_(3)
    base_cpu.mul_(3)
    xm.mark_step()
    assert_close(row, row_cpu)
    assert_close(flat, flat_cpu)
    row.add_(1)
    row_cpu.add_(1)
    xm.mark_step()
    assert_close(base, base_cpu)
    assert_close(flat, flat_cpu)


def test_update_through_a_view_is_right(device, metrics):
    w = torch.zeros(3, 4, device=device)
    xm.mark_step()
    w_cpu = torch.zeros(3, 4)
    for i in range(3):
        w[i].add_(i + 1)
        w_cpu[i].add_(i + 1)
        w.mul_(2)
        w_cpu.mul_(2)
        xm.mark_step()
    assert_close(w, w_cpu)


def test_tensor_saved_for_backward_is_not_donated(device, metrics):
    torch.manual_seed(0)
    w_cpu = torch.randn(4, 4, requires_grad=True)
    w = w_cpu.detach().to(device).requires_grad_()
    x_cpu = torch.randn(2, 4)
    x = x_cpu.to(device)
    xm.mark_step()
    y, y_cpu = (x @ w).tanh().sum(), (x_cpu @ w_cpu).tanh().sum()
    with torch.no_grad():
        xm.mark_step()  # the forward runs; autograd keeps w and tanh's output
        w.add_(0.5)
        w_cpu.add_(0.5)
        xm.mark_step()
    # backward after an in-place update: both raise the version error, or both agree
    try:
        y_cpu.backward()
    except RuntimeError as error:
        with pytest.raises(RuntimeError, match="modified by an inplace"):
            y.backward()
        assert "inplace" in str(error)
    else:
        y.backward()
        assert_close(w.grad, w_cpu.grad)
    assert_close(w, w_cpu.detach())


def test_same_leaf_in_two_tensors(device, metrics):
    a = torch.ones(3, device=device)
    xm.mark_step()
    b = a  # one tensor, two names
    c = torch.ops.aten.alias(a)
    a.add_(2)
    xm.mark_step()
    assert_close(b, torch.full((3,), 3.0))
    assert_close(c, torch.full((3,), 3.0))


def test_cpu_read_then_update(device, metrics):
    p = torch.ones(16, device=device)
    xm.mark_step()
    host = p.cpu()  # a copy: the buffer may go afterwards
    p.add_(1)
    xm.mark_step()
    assert_close(host, torch.ones(16))
    assert_close(p, torch.full((16,), 2.0))
    xm.wait_device_ops()


def test_eager_mode_donates_nothing(device, metrics):
    torch_xla.experimental.eager_mode(True)
    try:
        p = torch.ones(4, device=device)
        keep = p.detach()
        p.add_(1)
        assert_close(p, torch.full((4,), 2.0))
        assert_close(keep, torch.full((4,), 2.0))
    finally:
        torch_xla.experimental.eager_mode(False)
    assert max(_donated() or [0.0]) == 0.0


def test_scalars_and_empty_tensors_are_not_donated(device, metrics):
    s, e = torch.tensor(2.0, device=device), torch.ones(0, 3, device=device)
    xm.mark_step()
    metrics.clear_all()
    s.mul_(3)
    e.add_(1)
    xm.mark_step()
    assert _donated() == [0.0]
    assert_close(s, torch.tensor(6.0))
    assert_close(e, torch.ones(0, 3))


def test_host_data_is_donated_and_the_host_memory_is_untouched(device, metrics):
    """A copy from the host is the leaf's own (the host memory is copied before the
    transfer), so overwriting the tensor donates it as PyTorch/XLA does; the CPU tensor,
    and a NumPy array it shares memory with, keep their values."""
    numbers = np.ones((4, 4), dtype=np.float32)
    host = torch.from_numpy(numbers)  # shares the NumPy array's memory
    p = host.to(device)
    metrics.clear_all()
    p.add_(1)
    xm.mark_step()
    assert _donated() == [1.0]
    p.mul_(3)  # a program's result: donated too
    xm.mark_step()
    assert _donated() == [1.0, 1.0]
    assert_close(p, torch.full((4, 4), 6.0))
    assert torch.equal(host, torch.ones(4, 4)) and (numbers == 1).all()
    q = host.to(device)  # another copy of the same memory, donated as well
    q.sub_(1)
    xm.mark_step()
    assert_close(q, torch.zeros(4, 4))
    assert torch.equal(host, torch.ones(4, 4)) and (numbers == 1).all()



# --- donation the user asks for (`_XLAC._set_buffer_donation`) -------------------------


def _host(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def test_a_marked_buffer_goes_to_an_output_and_its_tensor_says_so(device, metrics):
    a, b = _host(4, 2, 2), _host(4, 2, 2)
    t0, t1 = a.to(device), b.to(device)
    assert xlac._set_buffer_donation(t0, True)
    assert xlac._get_buffer_donation(t0) and not xlac._get_buffer_donation(t1)
    assert met.counter_value("XlaSetBufferDonation") == 1
    t2 = t0 + t1
    t1 += 2
    xm.mark_step()
    assert _donated() == [2.0]  # t0's buffer, marked, and t1's, overwritten
    assert xlac._is_placecholder(t0) and not xlac._is_placecholder(t1)
    assert_close(t2, a + b)
    assert_close(t1, b + 2)
    # the donated tensor's value is gone: reading it, or computing from it, says so
    with pytest.raises(graph.DonatedBufferError, match=r"float32\[4, 2, 2\]\) was read after"):
        t0.cpu()
    with pytest.raises(graph.DonatedBufferError, match="_set_buffer_donation"):
        (t0 * 2).cpu()


@pytest.mark.parametrize("config", [True, False])
def test_a_sync_without_xla_data_donates_marked_buffers_only_under_the_config(
        device, metrics, config):
    a, b = _host(8), _host(8)
    t0, t1 = a.to(device), b.to(device)
    p = t1 * 1
    xm.mark_step()  # p is a program's result: a step would donate it when overwritten
    metrics.clear_all()
    xlac._set_buffer_donation(t0, True)
    t2 = t0 + t1
    p += 2
    assert not xlac._xla_get_enable_alias_with_buffer_donor_config()
    xlac._xla_set_enable_alias_with_buffer_donor_config(config)
    try:
        assert xlac._xla_get_enable_alias_with_buffer_donor_config() == config
        xlac._xla_sync_multi([t0, t1, t2, p], [str(device)], True, False)
    finally:
        xlac._xla_set_enable_alias_with_buffer_donor_config(False)
    assert _donated() == [1.0 if config else 0.0]  # never p's: not a step's sync
    assert xlac._is_placecholder(t0) == config and not xlac._is_placecholder(p)
    assert_close(t2, a + b)
    assert_close(p, b + 2)


def test_marked_buffers_are_donated_with_param_aliasing_off_and_no_other(
        device, metrics, monkeypatch):
    monkeypatch.setenv(graph.PARAM_ALIASING_VARIABLE, "0")
    p = torch.ones(8, device=device) * 1
    t0 = torch.arange(8.0).to(device)
    xm.mark_step()  # p is a program's result: donated when overwritten, were aliasing on
    metrics.clear_all()
    assert xlac._set_buffer_donation(t0, True)
    t2 = t0 * 2
    p.add_(1)
    xm.mark_step()
    assert _donated() == [1.0]  # t0's, not p's
    assert xlac._is_placecholder(t0) and not xlac._is_placecholder(p)
    assert_close(t2, torch.arange(8.0) * 2)
    assert_close(p, torch.full((8,), 2.0))


def test_a_marked_buffer_updated_in_place_is_donated_once(device, metrics):
    t = torch.arange(8.0, device=device) * 1
    xm.mark_step()
    metrics.clear_all()
    assert xlac._set_buffer_donation(t, True)
    t += 2
    xm.mark_step()
    assert _donated() == [1.0]
    assert_close(t, torch.arange(8.0) + 2)


def test_marks_on_pending_values_unmarking_and_syncs_that_do_not_read_the_buffer(
        device, metrics):
    t = _host(3, 3).to(device)
    assert not xlac._set_buffer_donation(t * 2, True)  # no buffer yet: nothing marked
    assert met.counter_value("XlaSetBufferDonation") is None
    assert xlac._set_buffer_donation(t, True)
    xm.mark_step()  # nothing reads t: the mark stays
    xm.mark_step()
    assert xlac._get_buffer_donation(t)
    assert xlac._set_buffer_donation(t, False) and not xlac._get_buffer_donation(t)
    u = t + 1
    xm.mark_step()
    assert _donated() == [0.0] and not xlac._is_placecholder(t)
    assert_close(u, t.cpu() + 1)


def test_a_marked_scalar_leaves_the_scalar_cache_alone(device, metrics):
    s = torch.tensor(42.0, device=device)  # a 0-dim copy shares the scalar cache's buffer
    assert xlac._set_buffer_donation(s, True)
    s.add_(1)
    xm.mark_step()
    assert _donated() == [0.0] and not xlac._is_placecholder(s)  # 0-dim: never taken
    u = torch.tensor(42.0, device=device)
    u.add_(1)
    xm.mark_step()
    assert s.item() == 43.0 and u.item() == 43.0
