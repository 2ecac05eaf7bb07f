"""`torch_xla.experimental.scan` and `scan_layers`: values and gradients (of the initial
carry, of the scanned tensors, of the layers' parameters) equal the same Python loop in
eager CPU PyTorch; the step is one XLA While loop whose body does not grow with the
number of steps; bad input is refused with a message that says what to change."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from functorch.compile import min_cut_rematerialization_partition
from torch.utils._pytree import tree_leaves, tree_map

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.experimental.eager import eager_mode_context
from torch_xla.experimental.scan import scan
from torch_xla.experimental.scan_layers import scan_layers

# float32; XLA fuses and reorders the step's matmuls and sums
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture
def device():
    return xm.xla_device()


def _eager_scan(fn, init, xs):
    """The Python loop `scan` stands for."""
    carry, ys = init, []
    for i in range(tree_leaves(xs)[0].shape[0]):
        carry, y = fn(carry, tree_map(lambda x, i=i: x[i], xs))
        ys.append(y)
    return carry, tree_map(lambda *slices: torch.stack(slices), *ys)


def _leaves_requiring_grad(tree, device="cpu"):
    """Fresh leaves on `device`, the floating ones requiring gradients."""
    return tree_map(lambda t: t.detach().to(device).clone().requires_grad_(t.is_floating_point()),
                    tree)


def _total(tree):
    return sum(t.float().sum() for t in tree_leaves(tree))


def _rnn_step(carry, x):
    """A recurrent cell over a pytree: a dict carry, a (features, weight) slice."""
    features, weight = x
    h = torch.tanh(features @ weight + carry["h"])
    return {"h": h, "count": carry["count"] + 1}, (h * 2, h.sum())


def _rnn_inputs(steps: int):
    torch.manual_seed(0)
    init = {"h": torch.randn(4), "count": torch.zeros(4)}
    xs = (torch.randn(steps, 3), torch.randn(steps, 3, 4))
    return init, xs


def _assert_close_trees(actual, expected):
    for a, e in zip(tree_leaves(actual), tree_leaves(expected), strict=True):
        torch.testing.assert_close(a.cpu(), e.detach(), **TOLERANCE)


@pytest.mark.parametrize("partition_fn", [None, min_cut_rematerialization_partition],
                         ids=["default_partition", "min_cut_rematerialization"])
def test_scan_values_and_gradients_equal_eager_loop(device, partition_fn):
    init, xs = _rnn_inputs(steps=5)
    cpu_init, cpu_xs = _leaves_requiring_grad((init, xs))
    xla_init, xla_xs = _leaves_requiring_grad((init, xs), device)
    expected = _eager_scan(_rnn_step, cpu_init, cpu_xs)
    _total(expected).backward()
    kwargs = {} if partition_fn is None else {"partition_fn": partition_fn}
    actual = scan(_rnn_step, xla_init, xla_xs, **kwargs)
    _total(actual).backward()

    _assert_close_trees(actual, expected)
    for a, e in zip(tree_leaves((xla_init, xla_xs)), tree_leaves((cpu_init, cpu_xs)),
                    strict=True):
        torch.testing.assert_close(a.grad.cpu(), e.grad, **TOLERANCE)


def test_scan_gradients_reach_only_inputs_that_require_them(device):
    def step(carry, x):
        return carry * x[0] + x[1].float(), carry.sin()

    torch.manual_seed(0)
    xs_cpu = (torch.randn(4, 3), torch.randint(0, 5, (4, 3)))
    init_cpu = torch.randn(3, requires_grad=True)
    init = init_cpu.detach().to(device).requires_grad_()
    xs = tuple(t.to(device) for t in xs_cpu)
    expected = _eager_scan(step, init_cpu, xs_cpu)
    _total(expected).backward()
    actual = scan(step, init, xs)
    _total(actual).backward()

    _assert_close_trees(actual, expected)
    torch.testing.assert_close(init.grad.cpu(), init_cpu.grad, **TOLERANCE)
    assert all(t.grad is None for t in xs)


def test_scan_without_gradients_in_eager_mode(device):
    xs = torch.arange(12.0).reshape(4, 3)
    with eager_mode_context(True):
        carry, ys = scan(lambda c, x: (c + x, c * x), torch.ones(3, device=device),
                         xs.to(device))
    expected = _eager_scan(lambda c, x: (c + x, c * x), torch.ones(3), xs)
    _assert_close_trees((carry, ys), expected)


def _hlo(tensors) -> str:
    return torch_xla._XLAC._get_xla_tensors_hlo(tensors)


@pytest.mark.parametrize("steps", [2, 9])
def test_scan_body_is_one_while_loop_whatever_the_steps(device, steps):
    init, xs = _rnn_inputs(steps)
    init, xs = _leaves_requiring_grad((init, xs), device)
    carry, ys = scan(_rnn_step, init, xs)
    forward = _hlo([carry["h"], ys[0]])
    _total((carry, ys)).backward()
    backward = _hlo([init["h"].grad, xs[1].grad])

    assert len(re.findall(r"\bwhile\(", forward)) == 1, forward
    assert len(re.findall(r"\bwhile\(", backward)) == 2, backward  # the forward's, its own
    assert len(re.findall(r" tanh\(", forward)) == 1  # the body once, not once per step


def test_scan_draws_other_random_numbers_at_each_step(device):
    def step(carry, x):
        return carry + x, torch.rand(3, device=device) + x

    _, ys = scan(step, torch.zeros(3, device=device), torch.zeros(4, 3, device=device))
    ys = ys.cpu()
    assert len({tuple(row.tolist()) for row in ys}) == 4, ys


def test_scan_layers_values_and_gradients_equal_eager_sequential(device):
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()) for _ in range(4)]
    cpu_layers = copy.deepcopy(layers)
    xla_layers = [copy.deepcopy(layer).to(device) for layer in layers]
    data = torch.randn(2, 8)
    expected = torch.nn.Sequential(*cpu_layers)(data)
    expected.sum().backward()
    actual = scan_layers(xla_layers, data.to(device))
    assert "while(" in _hlo([actual])
    actual.sum().backward()

    torch.testing.assert_close(actual.cpu(), expected.detach(), **TOLERANCE)
    for xla_layer, cpu_layer in zip(xla_layers, cpu_layers, strict=True):
        for (name, p), q in zip(xla_layer.named_parameters(), cpu_layer.parameters(),
                                strict=True):
            torch.testing.assert_close(p.grad.cpu(), q.grad, **TOLERANCE, msg=name)


def test_scan_layers_passes_a_tuple_as_arguments(device):
    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, a, b):
            return self.linear(a).tanh(), b + a

    torch.manual_seed(0)
    layers = [Pair() for _ in range(3)]
    data = (torch.randn(4), torch.randn(4))
    expected = data
    for layer in layers:
        expected = layer(*expected)
    actual = scan_layers([copy.deepcopy(layer).to(device) for layer in layers],
                         tuple(t.to(device) for t in data))
    _assert_close_trees(actual, expected)


def test_scan_layers_of_no_layer_returns_the_input(device):
    data = torch.ones(3, device=device)
    assert scan_layers([], data) is data


# --- bad input ----------------------------------------------------------------------


def _xs(device, steps=3):
    return torch.ones(steps, 2, device=device)


def test_scan_refuses_a_function_that_is_not_callable(device):
    with pytest.raises(ValueError, match="fn must be callable"):
        scan(1000, torch.zeros(2, device=device), _xs(device))


def test_scan_refuses_xs_of_different_lengths(device):
    with pytest.raises(ValueError, match=r"same leading dimension size, got sizes \[2, 3\]"):
        scan(lambda c, x: (c, x), torch.zeros(2, device=device), (_xs(device), _xs(device, 2)))


@pytest.mark.parametrize("xs", [(), {}], ids=["tuple", "dict"])
def test_scan_refuses_empty_xs(device, xs):
    with pytest.raises(ValueError, match="empty PyTree"):
        scan(lambda c, x: (c, x), torch.zeros(2, device=device), xs)


def test_scan_refuses_xs_of_length_zero(device):
    with pytest.raises(ValueError, match="leading dimension 0"):
        scan(lambda c, x: (c, x), torch.zeros(2, device=device), _xs(device, 0))


def test_scan_refuses_a_function_not_returning_a_pair(device):
    with pytest.raises(ValueError, match=r"must return a pair \(new_carry, y\), got a tuple "
                                         "of length 3"):
        scan(lambda c, x: (c, x, x), torch.zeros(2, device=device), _xs(device))


def test_scan_refuses_a_carry_that_changes_shape(device):
    with pytest.raises(ValueError, match=r"carry leaf 0 .* shape \(4,\).* init's is .* "
                                         r"shape \(2,\)"):
        scan(lambda c, x: (torch.cat([c, x]), x), torch.zeros(2, device=device), _xs(device))


def test_scan_refuses_a_tensor_read_from_outside_its_arguments(device):
    outside = torch.ones(2, device=device)
    with pytest.raises(AssertionError, match="not one of its arguments.*FakeTensor.*init"):
        scan(lambda c, x: (c + outside, x), torch.zeros(2, device=device), _xs(device),
             is_fn_pure=False)


def test_scan_refuses_a_cpu_tensor(device):
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        scan(lambda c, x: (c, x), torch.zeros(2), _xs(device))


def test_scan_layers_refuses_layers_of_other_structure(device):
    layers = [torch.nn.Linear(4, 4).to(device),
              torch.nn.Sequential(torch.nn.Linear(4, 4)).to(device)]
    with pytest.raises(ValueError, match="layer 1 has mismatched keys"):
        scan_layers(layers, torch.zeros(4, device=device))


def test_scan_layers_refuses_layers_of_other_shapes(device):
    layers = [torch.nn.Linear(4, 4).to(device), torch.nn.Linear(4, 5).to(device)]
    with pytest.raises(ValueError, match="Shape mismatch for parameter 'weight' in layer 1"):
        scan_layers(layers, torch.zeros(4, device=device))
