"""Views and in-place ops keep eager semantics: writes through a view reach the base and
every sibling view (functionalization does the bookkeeping, the engine records pure ops)."""

from __future__ import annotations

import pytest
import torch

import torch_xla

from .helpers import assert_close


def _select_add(x):
    x[0].add_(1)


def _view_mul(x):
    x.view(-1).mul_(2)


def _transpose_inplace(x):
    x.t_()


def _setitem_column(x):
    x[:, 1] = torch.tensor([7.0, 8.0]).to(x.device)


def _unsqueeze_inplace(x):
    x.unsqueeze_(0)


def _sibling_views(x):
    a, b = x[0], x[:, 2]
    a.mul_(10)
    b.sub_(1)


def _chain_of_views(x):
    x[:, 1:].t()[::2].fill_(-5)


def _zero_and_copy(x):
    y = x.clone()
    x.zero_()
    x.diagonal().copy_(y.diagonal())


CASES = [
    _select_add,
    _view_mul,
    _transpose_inplace,
    _setitem_column,
    _unsqueeze_inplace,
    _sibling_views,
    _chain_of_views,
    _zero_and_copy,
]


@pytest.mark.parametrize("mutate", CASES, ids=lambda f: f.__name__.strip("_"))
def test_inplace_through_views_matches_eager(device, mutate):
    eager = torch.arange(6.0).reshape(2, 3)
    lazy = eager.to(device)
    mutate(eager)
    mutate(lazy)
    assert lazy.shape == eager.shape
    assert_close(lazy, eager)


def test_view_sees_later_writes_to_base(device):
    x = torch.zeros(4).to(device)
    v = x[1:3]
    x.add_(1)
    torch_xla.sync()
    x.mul_(3)
    assert_close(v, torch.full((2,), 3.0))
    assert_close(x, torch.full((4,), 3.0))


def test_inplace_on_view_survives_mark_step(device):
    x = torch.ones(2, 2).to(device)
    x[1].add_(4)
    torch_xla.sync()
    assert_close(x, torch.tensor([[1.0, 1.0], [5.0, 5.0]]))


def test_inplace_on_parameter_under_no_grad(device):
    w = torch.ones(3).to(device).requires_grad_()
    with torch.no_grad():
        w.mul_(2)
    (w * w).sum().backward()
    assert_close(w.grad, torch.full((3,), 4.0))


def test_foreach_inplace_writes_through_views(device):
    eager = [torch.arange(6.0).reshape(2, 3), torch.ones(3), torch.full((3,), 2.0)]
    lazy = [t.to(device) for t in eager]
    for x, y, z in (eager, lazy):
        torch._foreach_mul_([x[1], y], 3.0)
        torch._foreach_addcdiv_([x.t()[0], y[:2]], [z[:2], z[1:]], [z[:2], z[:2]], [0.5, 2.0])
    for e, lz in zip(eager, lazy, strict=True):
        assert_close(lz, e)


# Views as the CPU lays them out: (strides, storage offset, is_contiguous) of each.
LAYOUT_CASES = {
    "t": lambda x: x.t(),
    "select": lambda x: x[1],
    "slice_columns": lambda x: x[:, 1:],
    "step_slices": lambda x: x[::2, 1::2],
    "expand": lambda x: x[0].expand(3, 4),
    "diagonal": lambda x: x.diagonal(),
    "unfold": lambda x: x.unfold(1, 2, 1),
    "split": lambda x: x.split(3, 1)[1],
    "unbind": lambda x: x.unbind(1)[2],
    "detach_of_t": lambda x: x.t().detach(),
    "unsqueeze_of_t": lambda x: x.t().unsqueeze(1),
    "view_of_rows": lambda x: x[1:].view(-1),
    "view_dtype": lambda x: x.view(torch.int32),
    "permute": lambda x: x.reshape(2, 2, 2, 2).permute(3, 1, 0, 2),
    "as_strided": lambda x: x.as_strided((2, 2), (1, 4), 3),
    "view_as_real": lambda x: torch.view_as_real(x.to(torch.complex64)[1:]),
}


@pytest.mark.parametrize("view", LAYOUT_CASES.values(), ids=LAYOUT_CASES.keys())
def test_a_view_reports_the_cpu_layout(device, view):
    eager = view(torch.arange(16.0).reshape(4, 4))
    lazy = view(torch.arange(16.0).reshape(4, 4).to(device))
    assert (lazy.stride(), lazy.storage_offset(), lazy.is_contiguous()) == (
        eager.stride(), eager.storage_offset(), eager.is_contiguous())
    assert_close(lazy, eager)


def test_a_view_keeps_its_layout_after_its_base_changes(device):
    x = torch.arange(6.0).reshape(2, 3).to(device)
    v = x.t()
    x.add_(1)
    assert v.stride() == (1, 3)
    assert_close(v, torch.arange(1.0, 7.0).reshape(2, 3).t())


def _t_contiguous(x):
    return x.t().contiguous()


def _t_reshape(x):
    return x.t().reshape(-1)


def _t_flatten(x):
    return x.t().flatten()


def _columns_contiguous(x):
    return x[:, :2].contiguous()


def _expand_contiguous(x):
    return x[0].expand(3, 3).contiguous()


def _rows_contiguous(x):  # a view on the CPU too: the write reaches x
    return x[1:].contiguous()


def _reshape(x):  # a view on the CPU too
    return x.reshape(-1)


COPY_OR_VIEW_CASES = [_t_contiguous, _t_reshape, _t_flatten, _columns_contiguous,
                      _expand_contiguous, _rows_contiguous, _reshape]


@pytest.mark.parametrize("make", COPY_OR_VIEW_CASES, ids=lambda f: f.__name__.strip("_"))
def test_a_write_reaches_the_base_only_where_the_cpu_made_a_view(device, make):
    """`contiguous()` and `reshape()` copy a view the CPU cannot lay out as asked: a write
    to the copy leaves the base alone. Before views had the CPU's strides, every view
    looked contiguous here, so `x.t().contiguous().add_(1)` changed `x` too."""
    eager = torch.arange(9.0).reshape(3, 3)
    lazy = eager.to(device)
    out_eager, out_lazy = make(eager), make(lazy)
    out_eager.add_(1)
    out_lazy.add_(1)
    assert_close(out_lazy, out_eager)
    assert_close(lazy, eager)


# Writes to an expanded view, given a factory of ones on the view's device.
OVERLAP_CASES = {
    "add_": lambda t, ones: t.add_(1),
    "iadd": lambda t, ones: t.__iadd__(ones(4)),
    "mul_": lambda t, ones: t.mul_(2),
    "addcdiv_": lambda t, ones: t.addcdiv_(ones(3, 4), ones(4)),
    "copy_": lambda t, ones: t.copy_(ones(3, 4)),
    "copy_from_cpu": lambda t, ones: t.copy_(torch.ones(3, 4)),
    "sin_": lambda t, ones: t.sin_(),
    "relu_": lambda t, ones: t.relu_(),
    "normal_": lambda t, ones: t.normal_(),
    "exponential_": lambda t, ones: t.exponential_(),
    "index_add_": lambda t, ones: t.index_add_(
        1, ones(1).long() - 1, ones(3, 1)),
    "scatter_": lambda t, ones: t.scatter_(1, ones(3, 1).long() - 1, 9.0),
}


@pytest.mark.parametrize("write", OVERLAP_CASES.values(), ids=OVERLAP_CASES.keys())
def test_a_write_to_an_expanded_view_is_refused_as_on_the_cpu(device, write):
    """Before, the write went through and the expanded rows were summed into the base."""
    message = "more than one element of the written-to tensor refers to a single memory"
    for dev in ("cpu", device):
        base = torch.zeros(4, device=dev)
        with pytest.raises(RuntimeError, match=message):
            write(base.expand(3, 4), lambda *shape, d=dev: torch.ones(*shape, device=d))
        assert base.cpu().tolist() == [0.0] * 4


# Writes the CPU allows on an expanded view (one value to every shared location) and the
# device refuses: functionalization would add each alias's change to the shared location.
ALLOWED_ON_CPU = {
    "fill_": lambda t: t.fill_(5),
    "zero_": lambda t: t.zero_(),
    "index_fill_": lambda t: t.index_fill_(1, torch.tensor([0], device=t.device), 7.0),
}


@pytest.mark.parametrize("write", ALLOWED_ON_CPU.values(), ids=ALLOWED_ON_CPU.keys())
def test_a_uniform_write_to_an_expanded_view_is_refused_on_the_device(device, write):
    """Before, `fill_(5)` on three rows expanded from ones left 13 in the base."""
    eager = torch.ones(4)
    write(eager.expand(3, 4))
    assert eager.tolist() != [1.0] * 4  # the CPU wrote through
    lazy = torch.ones(4, device=device)
    with pytest.raises(RuntimeError, match="fill_ and zero_ included"):
        write(lazy.expand(3, 4))
    assert lazy.cpu().tolist() == [1.0] * 4
    lazy[:2].fill_(5)  # a write through a view without shared elements goes through
    assert lazy.cpu().tolist() == [5.0, 5.0, 1.0, 1.0]


# as_strided on a view made on the device indexes its base's storage, as on the CPU.
AS_STRIDED_CASES = {
    "default_offset": lambda x: x.reshape(-1)[5:15].as_strided((2, 2), (1, 2)),
    "offset_in_the_view": lambda x: x.reshape(-1)[5:15].as_strided((2, 2), (1, 2), 10),
    "transposed": lambda x: x.t().as_strided((3, 2), (6, 1), 1),
    "strided_columns": lambda x: x[:, ::2].as_strided((2, 3), (6, 2), 0),
}


@pytest.mark.parametrize("make", AS_STRIDED_CASES.values(), ids=AS_STRIDED_CASES.keys())
def test_as_strided_on_a_view_reads_the_base_storage(device, make):
    """Before, the device indexed the view's own elements as if they were the storage:
    `x.reshape(-1)[5:15].as_strided((2, 2), (1, 2), 10)` read elements 10-13 of the view."""
    eager = make(torch.arange(24.0).reshape(4, 6))
    lazy = make(torch.arange(24.0).reshape(4, 6).to(device))
    assert (lazy.stride(), lazy.storage_offset()) == (eager.stride(), eager.storage_offset())
    assert_close(lazy, eager)


def test_as_strided_scatter_into_a_transposed_tensor(device):
    """The scatter indexes a clone of its input laid out as the input (a fresh tensor's
    layout is contiguous: only the values are compared)."""
    def scatter(x):
        src = -torch.arange(6.0, device=x.device).reshape(3, 2)
        return torch.as_strided_scatter(x.t(), src, (3, 2), (1, 6), 2)

    eager = scatter(torch.arange(24.0).reshape(4, 6))
    assert_close(scatter(torch.arange(24.0).reshape(4, 6).to(device)), eager)


def test_as_strided_outside_what_the_device_holds_is_refused(device):
    view = torch.arange(20.0).to(device)[5:15]
    with pytest.raises(RuntimeError, match="reads storage the view does not cover"):
        view.as_strided((2, 2), (1, 2), 0)
    plain = torch.arange(10.0).to(device)  # its storage is its elements: CPU's bounds check
    with pytest.raises(RuntimeError, match="requiring a storage size of 56 are out of bounds "
                       "for storage of size 40"):
        plain.as_strided((2, 2), (1, 2), 10)
    with pytest.raises(RuntimeError, match="Negative strides are not supported"):
        plain.as_strided((2, 2), (1, -2), 3)
