"""`copy_` between the CPU and the xla device, both ways, against the same copy on the CPU."""

from __future__ import annotations

import pytest
import torch

from .helpers import assert_close, run_python

SOURCE = torch.arange(12.0).reshape(3, 4) - 5.5


def cpu_destinations() -> dict:
    """(make the destination, select what copy_ writes into) for each kind of CPU target."""
    return {
        "same shape": (lambda: torch.zeros(3, 4), lambda d: d),
        "int32": (lambda: torch.zeros(3, 4, dtype=torch.int32), lambda d: d),
        "float64": (lambda: torch.zeros(3, 4, dtype=torch.float64), lambda d: d),
        "bfloat16": (lambda: torch.zeros(3, 4, dtype=torch.bfloat16), lambda d: d),
        "bool": (lambda: torch.zeros(3, 4, dtype=torch.bool), lambda d: d),
        "transposed": (lambda: torch.zeros(4, 3), lambda d: d.t()),
        "row of a larger tensor": (lambda: torch.zeros(5, 3, 4), lambda d: d[2]),
        "strided": (lambda: torch.zeros(3, 8), lambda d: d[:, ::2]),
        "broadcast": (lambda: torch.zeros(2, 3, 4), lambda d: d),
    }


@pytest.mark.parametrize("kind", list(cpu_destinations()))
def test_cpu_copy_from_xla(device, kind):
    make, select = cpu_destinations()[kind]
    expected, actual = make(), make()
    select(expected).copy_(SOURCE)
    result = select(actual).copy_(SOURCE.to(device))
    assert result.device.type == "cpu" and not torch._is_functional_tensor(result)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "pick",
    [lambda x: x[1:], lambda x: x[:, 1], lambda x: x.t(), lambda x: x[0, 0], lambda x: x * 2],
    ids=["slice", "column", "transpose", "element", "pending result"],
)
def test_cpu_copy_from_xla_view(device, pick):
    expected = torch.zeros(pick(SOURCE).shape).copy_(pick(SOURCE))
    actual = torch.zeros(pick(SOURCE).shape).copy_(pick(SOURCE.to(device)))
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def test_parameter_data_copied_back_from_xla(device):
    torch.manual_seed(0)
    cpu_model = torch.nn.Linear(4, 3)
    xla_model = torch.nn.Linear(4, 3).to(device)
    with torch.no_grad():
        for p in xla_model.parameters():
            p.mul_(3)
    for cpu_param, xla_param in zip(cpu_model.parameters(), xla_model.parameters(), strict=True):
        cpu_param.data.copy_(xla_param)
    for cpu_param, xla_param in zip(cpu_model.parameters(), xla_model.parameters(), strict=True):
        assert cpu_param.device.type == "cpu"
        torch.testing.assert_close(cpu_param, xla_param.cpu(), rtol=0, atol=0)


def test_cpu_copy_from_xla_carries_gradient_back(device):
    w_cpu = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w_xla = torch.tensor([1.0, -2.0, 3.0], device=device, requires_grad=True)
    for w in (w_cpu, w_xla):
        host = torch.zeros(2, 3).copy_(w)
        (host * torch.tensor([[1.0], [2.0]])).sum().backward()
    assert w_xla.grad.device == device
    assert_close(w_xla.grad, w_cpu.grad)


def test_cpu_copy_from_xla_non_blocking(device):
    actual = torch.zeros(3, 4).copy_(SOURCE.to(device), non_blocking=True)
    torch.testing.assert_close(actual, SOURCE, rtol=0, atol=0)


def xla_destinations(device) -> dict:
    return {
        "same shape": lambda: torch.zeros(3, 4, device=device),
        "int32": lambda: torch.zeros(3, 4, dtype=torch.int32, device=device),
        "bfloat16": lambda: torch.zeros(3, 4, dtype=torch.bfloat16, device=device),
        "broadcast": lambda: torch.zeros(2, 3, 4, device=device),
    }


@pytest.mark.parametrize("kind", ["same shape", "int32", "bfloat16", "broadcast"])
@pytest.mark.parametrize(
    "source",
    [SOURCE, SOURCE.t().contiguous().t(), torch.arange(4.0), SOURCE.to(torch.int64)],
    ids=["contiguous", "transposed", "row", "int64"],
)
def test_xla_copy_from_cpu(device, kind, source):
    destination = xla_destinations(device)[kind]()
    expected = destination.cpu().copy_(source)
    actual = destination.copy_(source)
    assert actual is destination and actual.device == device
    assert_close(actual, expected, rtol=0, atol=0)


def test_xla_view_copy_from_cpu_writes_through_to_the_base(device):
    base = torch.zeros(3, 4, device=device)
    expected = torch.zeros(3, 4)
    for target, into in ((base, base[:, 1]), (expected, expected[:, 1])):
        into.copy_(torch.tensor([7.0, 8.0, 9.0]))
        target[2].copy_(torch.tensor(1.5))
    assert_close(base, expected)


def test_xla_copy_from_xla_converts_and_broadcasts(device):
    destination = torch.zeros(2, 3, 4, dtype=torch.float64, device=device)
    destination.copy_(SOURCE.to(device))
    assert_close(destination, torch.zeros(2, 3, 4, dtype=torch.float64).copy_(SOURCE))


def test_xla_copy_from_xla_of_the_same_shape_and_dtype(device):
    """The engine assigns these directly (`functional.copied_value`): the same values, views
    and aliasing as PyTorch's copy_ on the CPU, and autograd's version counter bumped."""
    import torch_xla.debug.metrics as met

    def run(d):
        base = torch.zeros(3, 4, device=d)
        row, column = base[1], base[:, 2]  # views of the destination, made before
        source = (SOURCE + 0).to(d)
        seven, minus_one = torch.full((4,), 7.0, device=d), torch.tensor(-1.0, device=d)
        scalar = torch.tensor(3.0, device=d)
        version, copies = base._version, met.counter_value("xla::copy") or 0
        base.copy_(source)
        bumped = base._version > version
        row.copy_(seven)  # into a view: reaches the base
        scalar.copy_(minus_one)
        counted = (met.counter_value("xla::copy") or 0) - copies
        source.add_(100)  # the copy does not alias its source
        return (base, row, column, source, scalar), bumped, counted

    (actual, bumped, counted), (expected, *_) = run(device), run("cpu")
    for a, e in zip(actual, expected, strict=True):
        assert_close(a, e)
    assert bumped
    assert counted == 3  # the engine's count of copies, as when aten.copy recorded them


def test_xla_copy_from_xla_leaves_the_source_alone(device):
    """Batch norm updates its running stats in place on the engine's tensors: a source
    copied into them must not change with them."""
    def run(d):
        norm = torch.nn.BatchNorm1d(4).to(d)
        source = torch.full((4,), 2.0, device=d)
        norm.running_mean.copy_(source)
        norm(SOURCE.to(d))
        return source, norm.running_mean

    for a, e in zip(run(device), run("cpu"), strict=True):
        assert_close(a, e)


def test_xla_copy_from_xla_carries_gradients(device):
    def grads(d):
        x = torch.arange(6.0).reshape(2, 3).to(d).requires_grad_()
        z = (torch.arange(6.0).reshape(2, 3) - 2).to(d).requires_grad_()
        y = x * 2
        y.copy_(z * z)
        (y * torch.arange(6.0).reshape(2, 3).to(d)).sum().backward()
        return x.grad, z.grad

    for a, e in zip(grads(device), grads("cpu"), strict=True):
        assert_close(a, e)


def test_tensor_constructor_on_xla_makes_a_user_tensor(device):
    """`torch.tensor(data, device=xla)`: writes through views reach it, autograd works."""
    for make in (torch.tensor, torch.as_tensor):
        actual = make([[1.0, 2.0], [3.0, 4.0]], device=device)
        expected = make([[1.0, 2.0], [3.0, 4.0]])
        for t in (actual, expected):
            t[0, 1] = 9.0
            t[1].mul_(3)
        assert_close(actual, expected)
    w = torch.tensor([1.0, -2.0], device=device, requires_grad=True)
    (w * w).sum().backward()
    assert w.is_leaf and w.grad.device == device
    assert_close(w.grad, torch.tensor([2.0, -4.0]))


def test_tensor_constructor_inside_a_decomposition(device):
    """`affine_grid` on one row calls `torch.tensor(0, device=...)` inside its decomposition."""
    theta = torch.tensor([[[0.5, 0.1, 0.0], [0.2, 1.0, 0.3]]])
    for size in ((1, 1, 1, 1), (1, 1, 1, 4)):
        expected = torch.nn.functional.affine_grid(theta, size, align_corners=False)
        actual = torch.nn.functional.affine_grid(theta.to(device), size, align_corners=False)
        assert_close(actual, expected)



@pytest.mark.parametrize(
    "convert",
    [
        lambda x, d: x.to(torch.float64),
        lambda x, d: x.half(),
        lambda x, d: x.bool(),
        lambda x, d: x.to(d, copy=True),
        lambda x, d: torch.as_tensor(x, dtype=torch.int32),
    ],
    ids=["to dtype", "half", "bool", "to copy=True", "as_tensor"],
)
def test_conversions_on_xla_make_user_tensors(device, convert):
    """`_to_copy` results keep eager semantics: writes through their views reach them."""
    actual, expected = convert(SOURCE.to(device), device), convert(SOURCE, "cpu")
    assert actual.device == device and torch._is_functional_tensor(actual)
    for t in (actual, expected):
        t[1] = t[0]
        t[:, 2].zero_()
    assert_close(actual, expected)


TWO_DEVICES = """
    import torch, torch_xla
    import torch_xla.core.xla_model as xm
    d0, d1 = xm.xla_device(0), xm.xla_device(1)
    a = torch.arange(4.0).to(d0)
    b = torch.zeros(2, 4, dtype=torch.float64, device=d1)
    b.copy_(a)
    b[1].copy_(a * 3)
    c = torch.zeros(4)
    c.copy_(a.to(d1) * 2)
    moved = a.to(d1)
    moved[0] = 9.0
    print(b.device, b.cpu().tolist(), c.tolist(), moved.device, moved.cpu().tolist())
"""


def test_copies_between_devices():
    line = run_python(TWO_DEVICES, env={"CPU_NUM_DEVICES": "2", "PJRT_DEVICE": "CPU"})
    assert line.strip().splitlines()[-1] == (
        "xla:1 [[0.0, 1.0, 2.0, 3.0], [0.0, 3.0, 6.0, 9.0]] [0.0, 2.0, 4.0, 6.0] "
        "xla:1 [9.0, 1.0, 2.0, 3.0]"
    )
