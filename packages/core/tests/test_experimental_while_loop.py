"""torch's `while_loop` on XLA tensors and `torch_xla.experimental.fori_loop`: one XLA
While loop, compiled once whatever the number of iterations. Reference: the same loop
run in Python on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.experimental.fori_loop import fori_loop
from torch_xla.lazy import functional, loop


def python_while(cond_fn, body_fn, operands):
    while cond_fn(*operands):
        operands = body_fn(*operands)
    return operands


def to_cpu(values):
    return [v.cpu() for v in values]


def test_a_data_dependent_loop_equals_the_python_loop():
    def cond_fn(x, steps):
        return x.sum() < 100

    def body_fn(x, steps):
        return x * 2 + 1, steps + 1

    device = torch_xla.device()
    for start in ([0.5, 1.0], [30.0, 40.0], [60.0, 50.0]):
        x = torch.tensor(start)
        expected = python_while(cond_fn, body_fn, (x, torch.tensor(0)))
        got = while_loop(cond_fn, body_fn, (x.to(device), torch.tensor(0, device=device)))
        for g, e in zip(to_cpu(got), expected, strict=True):
            assert torch.equal(g, e)


def test_the_loop_compiles_once_whatever_the_iteration_count():
    def cond_fn(i, x):
        return i > 0

    def body_fn(i, x):
        return i - 1, torch.add(torch.add(x, 1), 1)

    device = torch_xla.device()
    x = torch.tensor(2, dtype=torch.int32, device=device)
    results, compiles = [], []
    for n in (10, 3, 0):
        before = met.counter_value("UncachedCompile") or 0
        _, out = while_loop(cond_fn, body_fn, (torch.tensor(n, device=device), x))
        results.append(out.item())
        compiles.append((met.counter_value("UncachedCompile") or 0) - before)
    assert results == [22, 8, 2]
    assert compiles[1:] == [0, 0]  # other counts are other data for the same program
    _, out = while_loop(cond_fn, body_fn, (torch.tensor(4, device=device), x))
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([out])
    assert hlo.count(" while(") == 1, hlo


def test_module_weights_read_by_the_body_enter_as_invariants():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)
    device = torch_xla.device()
    xla_linear = torch.nn.Linear(3, 3).to(device)
    xla_linear.load_state_dict(linear.state_dict())

    def run(layer, start, n):
        return while_loop(lambda i, h: i > 0, lambda i, h: (i - 1, torch.tanh(layer(h))),
                          (n, start))

    with torch.no_grad():
        expected = python_while(lambda i, h: i > 0,
                                lambda i, h: (i - 1, torch.tanh(linear(h))),
                                (torch.tensor(5), x))
        got = run(xla_linear, x.to(device), torch.tensor(5, device=device))
    torch.testing.assert_close(got[1].cpu(), expected[1], rtol=1e-5, atol=1e-6)
    assert got[0].item() == 0


def test_random_ops_in_the_body_draw_anew_at_each_iteration():
    device = torch_xla.device()

    def grown(n):
        xm.set_rng_state(7)
        _, x = while_loop(lambda i, x: i > 0, lambda i, x: (i - 1, x + torch.rand(4,
                                                                                device=device)),
                          (torch.tensor(n, device=device), torch.zeros(4, device=device)))
        return x.cpu()

    one, two = grown(1), grown(2)
    second = two - one
    assert not torch.allclose(second, one)  # the second draw is not the first again
    assert ((second >= 0) & (second < 1)).all()


def test_fori_loop_equals_the_python_loop():
    device = torch_xla.device()
    w = torch.tensor([0.5, -1.0, 2.0])
    x = torch.tensor([1.0, 2.0, 3.0])
    xw = w.to(device)

    def step(v):
        return v * 0.9 + xw

    for lower, upper in ((0, 10), (3, 5), (7, 2)):
        expected = x.clone()
        for _ in range(lower, upper):
            expected = expected * 0.9 + w
        for bounds in ((lower, upper), (torch.tensor(lower, device=device),
                                        torch.tensor([upper], device=device))):
            counter, got = fori_loop(*bounds, step, x.to(device))
            torch.testing.assert_close(got.cpu(), expected)
            assert counter.item() == max(lower, upper)
    a, b = torch.ones(2, device=device), torch.zeros(2, device=device)
    _, a2, b2 = fori_loop(0, 3, lambda p, q: (p + 1, q + p), a, b)
    assert a2.cpu().tolist() == [4.0, 4.0] and b2.cpu().tolist() == [6.0, 6.0]


def test_mistakes_get_clear_errors():
    device = torch_xla.device()
    x = torch.ones(2, device=device)
    w = torch.nn.Parameter(torch.ones(2, device=device))
    with pytest.raises(NotImplementedError, match="cannot be differentiated"):
        while_loop(lambda i, h: i > 0, lambda i, h: (i - 1, h * w),
                   (torch.tensor(2, device=device), x))
    with pytest.raises(ValueError, match="fori_loop runs on XLA tensors"):
        fori_loop(0, 2, lambda v: v, torch.ones(2))
    with pytest.raises(ValueError, match="upper must be an integer"):
        fori_loop(0, 2.5, lambda v: v, x)
    # the engine's own checks, for callers that skip torch's
    i, h = functional.unwrap(torch.tensor(2, device=device)), functional.unwrap(x)
    with pytest.raises(TypeError, match="boolean tensor of one element"):
        loop.while_loop(lambda i, h: i, lambda i, h: (i, h), (i, h))
    with pytest.raises(TypeError, match="keeps its shape and dtype"):
        loop.while_loop(lambda i, h: i > 0, lambda i, h: (i - 1, torch.cat([h, h])), (i, h))
    torch_xla.sync()  # nothing recorded over a placeholder is left for the sync
    assert x.cpu().tolist() == [1.0, 1.0]
