"""`torch_xla.experimental.gru.GRU`: outputs, final hidden state and gradients equal
`torch.nn.GRU` with the same weights run eagerly on the CPU; each layer's time loop is one
XLA While loop whose body does not grow with the sequence; unsupported input is refused
with a message that says what to do instead."""

from __future__ import annotations

import inspect
import re
import warnings

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.experimental.gru import GRU

# float32; XLA fuses and reorders the cell's matmuls and sums (the CPU reference is exact
# torch). Observed differences are about 1e-6 over these short sequences.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
INPUT, HIDDEN, STEPS, BATCH = 5, 7, 6, 3


@pytest.fixture
def device():
    return xm.xla_device()


def _pair(num_layers=1, **kwargs):
    """A CPU `torch.nn.GRU` and our GRU on XLA with the same weights."""
    torch.manual_seed(0)
    reference = torch.nn.GRU(INPUT, HIDDEN, num_layers=num_layers, **kwargs)
    ours = GRU(INPUT, HIDDEN, num_layers=num_layers, **kwargs)
    ours.load_state_dict(reference.state_dict())
    return reference, ours.to(xm.xla_device())


def _leaf(t, device="cpu"):
    return t.detach().to(device).clone().requires_grad_(True)


def _inputs(num_layers, batch_first=False, batched=True):
    torch.manual_seed(1)
    if not batched:
        return torch.randn(STEPS, INPUT), torch.randn(num_layers, HIDDEN)
    shape = (BATCH, STEPS, INPUT) if batch_first else (STEPS, BATCH, INPUT)
    return torch.randn(shape), torch.randn(num_layers, BATCH, HIDDEN)


def _assert_same_run(reference, ours, x, hx):
    """Forward and backward of both modules: outputs, h_n and every gradient agree."""
    device = xm.xla_device()
    cpu_x, xla_x = _leaf(x), _leaf(x, device)
    cpu_hx, xla_hx = (None, None) if hx is None else (_leaf(hx), _leaf(hx, device))
    expected = reference(cpu_x, cpu_hx)
    actual = ours(xla_x, xla_hx)
    for a, e, name in zip(actual, expected, ["output", "h_n"], strict=True):
        assert a.device.type == "xla"
        torch.testing.assert_close(a.cpu(), e.detach(), **TOLERANCE, msg=name)
    # weights unlike 1 so that a gradient of the wrong output shows
    sum(o.mul(k + 2).sum() for k, o in enumerate(expected)).backward()
    sum(o.mul(k + 2).sum() for k, o in enumerate(actual)).backward()
    torch.testing.assert_close(xla_x.grad.cpu(), cpu_x.grad, **TOLERANCE, msg="input grad")
    if hx is not None:
        torch.testing.assert_close(xla_hx.grad.cpu(), cpu_hx.grad, **TOLERANCE, msg="hx grad")
    ours_params = dict(ours.named_parameters())
    for name, p in reference.named_parameters():
        torch.testing.assert_close(ours_params[name].grad.cpu(), p.grad, **TOLERANCE, msg=name)


@pytest.mark.parametrize("num_layers", [1, 2, 3])
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
def test_values_and_gradients_equal_torch_gru(num_layers, batch_first):
    reference, ours = _pair(num_layers, batch_first=batch_first)
    _assert_same_run(reference, ours, *_inputs(num_layers, batch_first))


@pytest.mark.parametrize("num_layers", [1, 2])
def test_without_bias(num_layers):
    reference, ours = _pair(num_layers, bias=False)
    assert not any("bias" in name for name, _ in ours.named_parameters())
    _assert_same_run(reference, ours, *_inputs(num_layers))


@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
def test_hidden_state_defaults_to_zeros(batch_first):
    reference, ours = _pair(2, batch_first=batch_first)
    x, _ = _inputs(2, batch_first)
    _assert_same_run(reference, ours, x, None)


@pytest.mark.parametrize("given_hx", [False, True], ids=["no_hx", "hx"])
@pytest.mark.parametrize("batch_first", [False, True], ids=["time_first", "batch_first"])
def test_unbatched_input(given_hx, batch_first):
    reference, ours = _pair(2, batch_first=batch_first)
    x, hx = _inputs(2, batched=False)
    output, h_n = ours(x.to(xm.xla_device()))
    assert (output.shape, h_n.shape) == ((STEPS, HIDDEN), (2, HIDDEN))
    _assert_same_run(reference, ours, x, hx if given_hx else None)


def test_dropout_in_eval_mode_is_off():
    reference, ours = _pair(3, dropout=0.5)
    reference.eval()
    ours.eval()
    _assert_same_run(reference, ours, *_inputs(3))


def _transparent_second_layer(gru, p):
    """Make layer 1 output tanh(its input): update gate shut (z = 0), no hidden terms, the
    new gate's input weights the identity. Then layer 1's output is 0 exactly where dropout
    zeroed layer 0's output y, and tanh(y / (1 - p)) where it kept it."""
    with torch.no_grad():
        for name, param in gru.named_parameters():
            if name.endswith("_l1"):
                param.zero_()
        gru.weight_ih_l1[2 * HIDDEN:] = torch.eye(HIDDEN)
        gru.bias_ih_l1[HIDDEN:2 * HIDDEN] = -1000.0  # sigmoid(-1000) == 0 in float32


def test_dropout_in_train_mode_drops_between_layers_at_rate_p(device):
    p, steps, batch = 0.5, 40, 16
    torch.manual_seed(0)
    ours = GRU(HIDDEN, HIDDEN, num_layers=2, dropout=p)
    _transparent_second_layer(ours, p)
    first = torch.nn.GRU(HIDDEN, HIDDEN)  # layer 0 alone, on the CPU
    first.load_state_dict({k: v for k, v in ours.state_dict().items() if k.endswith("_l0")})
    x = torch.randn(steps, batch, HIDDEN)
    y = first(x)[0].detach()
    ours = ours.to(device).train()

    torch_xla.manual_seed(0)
    out = ours(x.to(device))[0].detach().cpu()
    again = ours(x.to(device))[0].detach().cpu()

    dropped = out.abs() < 1e-20
    rate = dropped.float().mean().item()
    assert 0.45 < rate < 0.55, rate  # 4480 draws: the standard deviation is 0.0075
    torch.testing.assert_close(out[~dropped], torch.tanh(y / (1 - p))[~dropped], **TOLERANCE)
    assert not torch.equal(dropped, again.abs() < 1e-20), "two calls drew the same mask"


def test_dropout_leaves_the_last_layer_alone(device):
    """With one layer there is no layer after which to drop: train mode equals torch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: dropout with one layer
        reference, ours = _pair(1, dropout=0.9)
    _assert_same_run(reference.train(), ours.train(), *_inputs(1))


def _hlo(tensors) -> str:
    return torch_xla._XLAC._get_xla_tensors_hlo(tensors)


@pytest.mark.parametrize("steps", [2, 9])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_time_loop_is_one_while_loop_per_layer_whatever_the_steps(device, steps, num_layers):
    _, ours = _pair(num_layers)
    # made on the CPU: randn on the device is a while loop of its own (the RNG's)
    x = _leaf(torch.randn(steps, BATCH, INPUT), device)
    output, h_n = ours(x)
    forward = _hlo([output, h_n])
    (output.sum() + h_n.sum()).backward()
    backward = _hlo([x.grad, ours.weight_hh_l0.grad])

    assert len(re.findall(r"\bwhile\(", forward)) == num_layers, forward
    assert len(re.findall(r" tanh\(", forward)) == num_layers, forward  # cell once per layer
    # each layer's forward loop (its saved activations) and its own reversed loop
    assert len(re.findall(r"\bwhile\(", backward)) == 2 * num_layers, backward


def test_cpu_tensors_run_torch_gru():
    reference, ours = _pair(2)
    ours = ours.cpu()
    x, hx = _inputs(2)
    for a, e in zip(ours(x, hx), reference(x, hx), strict=True):
        torch.testing.assert_close(a, e, rtol=0, atol=0)


# --- the same class as torch.nn.GRU to its users ------------------------------------


def test_constructor_and_forward_read_as_torch_gru():
    reference, ours = _pair(2, batch_first=True)
    assert isinstance(ours, torch.nn.GRU)
    assert type(ours) is GRU
    assert ours.state_dict().keys() == reference.state_dict().keys()
    assert inspect.signature(GRU.forward) == inspect.signature(torch.nn.GRU.forward)
    assert inspect.signature(GRU.__init__) == inspect.signature(torch.nn.GRU.__init__)


@pytest.mark.parametrize("how", ["keyword", "positional"])
def test_bidirectional_builds_torch_gru_with_a_warning(how):
    args, kwargs = (INPUT, HIDDEN), {"bidirectional": True}
    if how == "positional":
        args, kwargs = (INPUT, HIDDEN, 1, True, False, 0.0, True), {}
    with pytest.warns(UserWarning, match="bidirectional=True returns a plain torch.nn.GRU"):
        gru = GRU(*args, **kwargs)
    assert type(gru) is torch.nn.GRU
    assert gru.bidirectional


def test_unidirectional_gru_gives_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert type(GRU(INPUT, HIDDEN, 2, True, False, 0.0, False)) is GRU


def test_bidirectional_set_after_construction_is_refused(device):
    _, ours = _pair(1)
    ours.bidirectional = True
    with pytest.raises(NotImplementedError, match="two unidirectional GRUs"):
        ours(torch.randn(STEPS, BATCH, INPUT, device=device))


def test_packed_sequence_is_refused_with_the_way_out(device):
    _, ours = _pair(1)
    packed = pack_sequence([torch.randn(4, INPUT, device=device),
                            torch.randn(2, INPUT, device=device)])
    with pytest.raises(NotImplementedError, match="pad_packed_sequence"):
        ours(packed)


@pytest.mark.parametrize("shape", [(STEPS,), (2, STEPS, BATCH, INPUT)])
def test_input_of_wrong_rank_is_refused(device, shape):
    _, ours = _pair(1)
    with pytest.raises(ValueError, match=f"Expected input to be 2D or 3D, got {len(shape)}D"):
        ours(torch.randn(shape, device=device))


@pytest.mark.parametrize(("x_shape", "hx_shape", "message"), [
    ((STEPS, BATCH, INPUT), (BATCH, HIDDEN), "batched 3-D input, hx should also be 3-D"),
    ((STEPS, INPUT), (1, 1, HIDDEN), "unbatched 2-D input, hx should also be 2-D"),
    ((STEPS, BATCH, INPUT), (1, BATCH + 1, HIDDEN), "Expected hidden size"),
    ((STEPS, BATCH, INPUT + 1), (1, BATCH, HIDDEN), "must be equal to input_size"),
])
def test_mismatched_shapes_raise_torch_errors(device, x_shape, hx_shape, message):
    _, ours = _pair(1)
    with pytest.raises(RuntimeError, match=message):
        ours(torch.randn(x_shape, device=device), torch.randn(hx_shape, device=device))


def test_projection_is_refused_as_torch_does():
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        GRU(INPUT, HIDDEN, proj_size=2)
