"""`torch_xla.experimental.gradient_accumulation`: the accumulated losses and gradients
equal the same accumulation in eager CPU PyTorch, the step runs inside one XLA While
loop (not unrolled), and the compiled programs do not grow with the number of steps."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.experimental.eager import eager_mode_context
from torch_xla.experimental.gradient_accumulation import gradient_accumulation
from torch_xla.lazy.loop import ValueOfLoopInputError
from torch_xla.utils.checkpoint import checkpoint

# float32; the loop sums in another order than eager's `+=` and XLA fuses the matmuls
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
LOSS_FN = torch.nn.CrossEntropyLoss()


@pytest.fixture
def device():
    return xm.xla_device()


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _batch(steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    return torch.randn(steps, 5, 6), torch.randint(0, 3, (steps, 5))


def _eager_accumulation(model, data, target, forward=None):
    """The loop the upstream training script runs without the While op."""
    forward = forward or model
    running = torch.zeros(())
    for i in range(data.shape[0]):
        loss = LOSS_FN(forward(data[i]), target[i]) / data.shape[0]
        running += loss.detach()
        loss.backward()
    return running


def _assert_same_grads(xla_model, cpu_model):
    for (name, p), q in zip(xla_model.named_parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOLERANCE, msg=name)


@pytest.mark.parametrize("steps", [1, 4])
def test_loss_and_gradients_equal_eager_accumulation(device, steps):
    cpu = _model()
    xla = copy.deepcopy(cpu).to(device)
    data, target = _batch(steps)
    want = _eager_accumulation(cpu, data, target)
    loss = gradient_accumulation(lambda x, y: LOSS_FN(xla(x), y),
                                 (data.to(device), target.to(device)), xla)
    torch.testing.assert_close(loss.cpu(), want, **TOLERANCE)
    _assert_same_grads(xla, cpu)


def test_existing_gradients_are_accumulated_into(device):
    cpu = _model()
    xla = copy.deepcopy(cpu).to(device)
    for model in (cpu, xla):
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
    data, target = _batch(3)
    _eager_accumulation(cpu, data, target)
    gradient_accumulation(lambda x, y: LOSS_FN(xla(x), y),
                          (data.to(device), target.to(device)), xla)
    _assert_same_grads(xla, cpu)


def test_carried_tensors_are_threaded_through_the_steps(device):
    cpu = _model()
    xla = copy.deepcopy(cpu).to(device)
    data, target = _batch(4)
    total = torch.zeros(3)
    for i in range(4):
        out = cpu(data[i])
        (LOSS_FN(out, target[i]) / 4).backward()
        total = total * 0.5 + out.detach().sum(0)

    def step(x, y, acc):
        out = xla(x)
        return LOSS_FN(out, y), acc * 0.5 + out.detach().sum(0)

    loss, carried = gradient_accumulation(
        step, (data.to(device), target.to(device)), xla, torch.zeros(3, device=device))
    torch.testing.assert_close(carried.cpu(), total, **TOLERANCE)
    _assert_same_grads(xla, cpu)


def test_carried_tensors_are_passed_unpacked(device):
    """PyTorch/XLA's signature: `gradient_accumulation(step, iterables, model, *carried)`."""
    model = torch.nn.Linear(3, 1).to(device)

    def step(x, count, total):
        loss = model(x).sum()
        return loss, count + 1, total + loss.detach()

    data = torch.randn(4, 2, 3)
    loss, count, total = gradient_accumulation(
        step, (data.to(device),), model, torch.tensor(0, device=device),
        torch.zeros((), device=device))
    assert count.cpu().item() == 4
    assert count.dtype == torch.int64
    cpu = copy.deepcopy(model).cpu()
    torch.testing.assert_close(total.cpu(), cpu(data).sum(), **TOLERANCE)
    torch.testing.assert_close(loss.cpu(), cpu(data).sum() / 4, **TOLERANCE)


def test_carried_tensors_in_a_tuple_are_refused(device):
    model = torch.nn.Linear(3, 1).to(device)
    with pytest.raises(TypeError, match=r"unpacked after the model.*\*carried"):
        gradient_accumulation(lambda x, c: (model(x).sum(), c), (torch.ones(2, 3).to(device),),
                              model, (torch.zeros(3, device=device),))


def test_checkpointed_layers_inside_the_loop(device):
    """The upstream script's --use_gradient_accumulation_loop --use_gradient_checkpointing."""
    cpu = _model()
    xla = copy.deepcopy(cpu).to(device)
    data, target = _batch(3)
    want = _eager_accumulation(cpu, data, target)

    def forward(x):
        x = xla[0](x)
        for layer in list(xla)[1:]:
            x = checkpoint(layer, x, use_reentrant=True)
        return x

    loss = gradient_accumulation(lambda x, y: LOSS_FN(forward(x), y),
                                 (data.to(device), target.to(device)), xla)
    torch.testing.assert_close(loss.cpu(), want, **TOLERANCE)
    _assert_same_grads(xla, cpu)


def _pending_loop_text(device, steps):
    xla = _model().to(device)
    data, target = _batch(steps)
    loss = gradient_accumulation(lambda x, y: LOSS_FN(xla(x), y),
                                 (data.to(device), target.to(device)), xla)
    tensors = [loss, *(p.grad for p in xla.parameters())]
    return (torch_xla._XLAC._get_xla_tensors_hlo(tensors),
            torch_xla._XLAC._get_xla_tensors_text(tensors))


def test_the_step_runs_inside_one_while_loop(device):
    hlo2, ir2 = _pending_loop_text(device, 2)
    hlo8, ir8 = _pending_loop_text(device, 8)
    assert " while(" in hlo8, hlo8
    # not unrolled: the same IR nodes and HLO instructions for 2 steps as for 8
    assert len(ir2.splitlines()) == len(ir8.splitlines())
    assert len(hlo2.splitlines()) == len(hlo8.splitlines())
    assert hlo8.count("dot(") == hlo2.count("dot(")
    torch_xla.sync()


def _train(device, steps, iterations):
    xla = _model().to(device)
    opt = torch.optim.SGD(xla.parameters(), lr=0.1)
    data, target = _batch(steps)
    for _ in range(iterations):
        gradient_accumulation(lambda x, y: LOSS_FN(xla(x), y),
                              (data.to(device), target.to(device)), xla)
        opt.step()
        torch_xla.sync()
        opt.zero_grad(set_to_none=False)
    return xla


def test_compiled_programs_do_not_grow_with_the_steps(device):
    _train(device, 2, 1)  # compile the transfers' and the optimizer's small programs
    for steps in (3, 9):
        met.clear_all()
        _train(device, steps, 3)
        # two programs whatever the steps: the first iteration starts from no gradient,
        # the next ones from zero_grad's zeros; the third iteration hits the cache
        assert met.counter_value("UncachedCompile") == 2, steps
        assert met.counter_value("CachedCompile") == 1, steps


def test_dropout_draws_new_numbers_at_every_step(device):
    model = torch.nn.Linear(16, 16).to(device)

    def step(x, kept):
        out = torch.nn.functional.dropout(model(x), 0.5)
        return out.sum(), kept + (out != 0).float()

    _, kept = gradient_accumulation(step, (torch.ones(6, 16, device=device),), model,
                                    torch.zeros(16, device=device))
    counts = kept.cpu()
    # the same mask at every step would give only 0 or 6
    assert ((counts > 0) & (counts < 6)).any(), counts


def test_eager_mode_computes_the_results(device):
    cpu = _model()
    xla = copy.deepcopy(cpu).to(device)
    data, target = _batch(2)
    want = _eager_accumulation(cpu, data, target)
    with eager_mode_context(True):
        loss = gradient_accumulation(lambda x, y: LOSS_FN(xla(x), y),
                                     (data.to(device), target.to(device)), xla)
        assert torch_xla._XLAC._get_xla_tensor_debug_info(loss).count("IR: None") == 1
    torch.testing.assert_close(loss.cpu(), want, **TOLERANCE)
    _assert_same_grads(xla, cpu)


@pytest.mark.parametrize(("iterables", "message"), [
    ((), "cannot be empty"),
    ((torch.zeros(2, 3), torch.zeros(3, 3)), "inconsistent first dimension"),
    ((torch.zeros(0, 3),), "is empty"),
])
def test_invalid_iterables_are_refused(device, iterables, message):
    model = torch.nn.Linear(3, 1).to(device)
    iterables = tuple(t.to(device) for t in iterables)
    with pytest.raises(ValueError, match=message):
        gradient_accumulation(lambda *a: model(a[0]).sum(), iterables, model)


def test_reading_a_value_inside_the_step_is_an_error(device):
    model = torch.nn.Linear(3, 1).to(device)

    def step(x):
        loss = model(x).sum()
        if loss.item() > 0:
            return loss
        return -loss

    with pytest.raises(ValueOfLoopInputError, match="read the value"):
        gradient_accumulation(step, (torch.ones(2, 3, device=device),), model)
    torch_xla.sync()  # nothing recorded over the loop's inputs is left to compute
    assert model.weight.grad is None


def test_a_step_updating_buffers_is_refused_and_leaves_them_usable(device):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).to(device)
    before = model[1].running_mean.cpu()
    with pytest.raises(NotImplementedError, match="updates buffers"):
        gradient_accumulation(lambda x: model(x).sum(), (torch.randn(2, 5, 3).to(device),),
                              model)
    torch_xla.sync()
    torch.testing.assert_close(model[1].running_mean.cpu(), before)


def _add_one_in_place(t):
    t += 1


@pytest.mark.parametrize(("step", "what"), [
    (lambda model, x, c: (model(x).sum(), _add_one_in_place(c) or c), "carried tensor 0"),
    (lambda model, x, c: (model(x.mul_(2)).sum(), c + 1), "the slice of iterable tensor 0"),
], ids=["carried", "iterable"])
def test_a_step_updating_its_inputs_in_place_is_refused(device, step, what):
    """As PyTorch/XLA: AssertionError (the update would be lost, or made once)."""
    model = torch.nn.Linear(3, 1).to(device)
    data = torch.ones(2, 3, device=device)
    with pytest.raises(AssertionError, match=f"updated {what} in place"):
        gradient_accumulation(lambda x, c: step(model, x, c), (data,), model,
                              torch.zeros((), device=device))
    torch_xla.sync()  # nothing recorded over the loop's inputs is left to compute
    assert model.weight.grad is None
    torch.testing.assert_close(data.cpu(), torch.ones(2, 3))


def test_a_step_updating_a_parameter_is_refused_and_leaves_it_as_it_was(device):
    model = torch.nn.Linear(3, 1).to(device)
    before = model.weight.cpu()

    def step(x):
        with torch.no_grad():
            model.weight.add_(x.sum())  # would run once, not at each step
        return model(x).sum()

    with pytest.raises(AssertionError, match="updated parameter 'weight' in place"):
        gradient_accumulation(step, (torch.ones(2, 2, 3, device=device),), model)
    torch_xla.sync()
    torch.testing.assert_close(model.weight.cpu(), before)


def test_a_step_counting_in_a_buffer_is_refused_and_leaves_it_as_it_was(device):
    """An update that reads no loop input would otherwise be made once, not at each step."""
    model = torch.nn.Linear(3, 1).to(device)
    model.register_buffer("calls", torch.zeros((), device=device))

    def step(x):
        model.calls += 1
        return model(x).sum()

    with pytest.raises(NotImplementedError, match="updates buffers in place \\(buffer 'calls'"):
        gradient_accumulation(step, (torch.ones(2, 2, 3, device=device),), model)
    torch_xla.sync()
    assert model.calls.cpu().item() == 0
