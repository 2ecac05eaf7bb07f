"""The xla device: names, transfers, modules, printing, saving, and mixing errors."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import torch_xla
import torch_xla.core.xla_model as xm

from .helpers import assert_close, run_python


def test_device_names(device):
    assert device == torch.device("xla", 0)
    assert str(xm.xla_device()) == "xla:0"
    assert torch_xla.device() == torch.device("xla:0")
    assert str(torch.device("xla", 0)) == "xla:0"


def test_is_xla_tells_tensors_on_the_device(device):
    """torch's `is_xla` tests its own XLA device type; PyTorch/XLA code reads it as "on
    the xla device", which ours is."""
    on_device = torch.ones(2, 3, device=device)
    assert on_device.is_xla and on_device.t().is_xla and on_device[0].is_xla
    assert nn.Parameter(on_device).is_xla and xm.is_xla_tensor(on_device)
    assert not torch.ones(2).is_xla and not on_device.cpu().is_xla
    assert not torch.ones(2, device="meta").is_xla


def test_missing_device_index_is_a_clear_error():
    with pytest.raises(IndexError, match="xla:7 does not exist"):
        xm.xla_device(7)


@pytest.mark.parametrize("make", [
    lambda d: torch.ones(2, device=d),
    lambda d: torch.empty(2, device=d),
    lambda d: torch.randn(2, device=d),
    lambda d: torch.arange(3, device=d),
    lambda d: torch.tensor([1.0], device=d),
    lambda d: torch.tril_indices(3, 3, device=d),  # computed on the CPU, then moved
], ids=["ones", "empty", "randn", "arange", "tensor", "tril_indices"])
def test_a_factory_on_a_missing_device_raises_at_once(device, make):
    """Before, the value was recorded for xla:7 and the error came at the sync computing
    it (`torch.empty` never raised)."""
    with pytest.raises(RuntimeError, match="xla:7 does not exist: this process has"):
        make("xla:7")


def test_to_device_and_back(device):
    cpu = torch.randn(3, 4)
    x = cpu.to(device)
    assert x.device == device and x.shape == cpu.shape and x.dtype == cpu.dtype
    back = x.cpu()
    assert back.device.type == "cpu" and not torch._is_functional_tensor(back)
    assert torch.equal(back, cpu)


def test_factories_on_device(device):
    assert_close(torch.zeros(2, 3, device=device), torch.zeros(2, 3))
    assert_close(torch.ones(4, device=device, dtype=torch.int32), torch.ones(4, dtype=torch.int32))
    assert_close(torch.full((2,), 7.5, device=device), torch.full((2,), 7.5))
    assert_close(torch.arange(5, device=device), torch.arange(5))
    assert_close(torch.arange(1.0, 2.0, 0.25, device=device), torch.arange(1.0, 2.0, 0.25))
    assert torch.randn(3, 5, device=device).shape == (3, 5)
    assert_close(torch.tensor([1, 2], device=device), torch.tensor([1, 2]))


def test_module_to_device(device):
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model.load_state_dict(ref.state_dict())
    model.to(device)
    assert all(p.device == device and isinstance(p, nn.Parameter) for p in model.parameters())
    x = torch.randn(5, 4)
    assert_close(model(x.to(device)), ref(x))


def test_print_shows_values_and_device(device):
    text = repr(torch.tensor([1.5, 2.0]).to(device))
    assert "1.5000" in text and "device='xla:0'" in text


def test_item_and_bool(device):
    x = torch.tensor([3.0, 4.0]).to(device)
    assert x.sum().item() == 7.0
    assert bool((x > 3).any())
    assert not bool((x > 5).any())


def test_save_and_load_of_cpu_copies(device):
    x = torch.randn(3, 3).to(device) * 2
    buffer = io.BytesIO()
    torch.save({"x": x.cpu()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert torch.equal(loaded["x"], x.cpu())


def test_mixing_cpu_tensor_raises(device):
    x = torch.randn(2, 3).to(device)
    with pytest.raises(
        RuntimeError, match=r"Input tensor is not an XLA tensor.*torch\.FloatTensor"
    ):
        x + torch.randn(2, 3)
    with pytest.raises(RuntimeError, match=r"Input tensor is not an XLA tensor.*torch\.LongTensor"):
        torch.randn(2, 3).to(device).mul(torch.ones(2, 3, dtype=torch.long))


# Writes to a CPU tensor that read an XLA tensor: PyTorch's functionalization kernels
# failed each with "INTERNAL ASSERT FAILED ... please report a bug to PyTorch".
CPU_WRITES = {
    "add_": lambda cpu, xla: cpu.add_(xla),
    "masked_fill_": lambda cpu, xla: cpu.masked_fill_(xla > 1, 0.0),
    "index_add_": lambda cpu, xla: cpu.index_add_(0, xla.long(), xla),
    "scatter_": lambda cpu, xla: cpu.scatter_(0, xla.long(), xla),
    "setitem": lambda cpu, xla: cpu.__setitem__(xla.long(), xla),
    "index_put_accumulate": lambda cpu, xla: cpu.index_put_((xla.long(),), xla, accumulate=True),
}


@pytest.mark.parametrize("write", CPU_WRITES.values(), ids=CPU_WRITES.keys())
def test_an_in_place_op_on_a_cpu_tensor_reading_an_xla_tensor_raises(device, write):
    cpu = torch.zeros(3)
    with pytest.raises(RuntimeError, match=r"found at least two devices, xla:0 and cpu! An "
                       r"in-place op writes to a tensor on cpu \(shape \(3,\)\)"):
        write(cpu, torch.tensor([0.0, 2.0, 1.0]).to(device))
    assert cpu.tolist() == [0.0, 0.0, 0.0]


def test_an_out_tensor_on_the_cpu_for_xla_inputs_raises(device):
    x = torch.ones(2, 2).to(device)
    with pytest.raises(RuntimeError, match="Expected out tensor to have device xla:0, but got "
                       "cpu instead"):
        torch.mm(x, x, out=torch.empty(2, 2))
    with pytest.raises(RuntimeError, match="Expected out tensor to have device xla:0"):
        torch.max(x, 0, out=(torch.empty(2), torch.empty(2, dtype=torch.long)))
    for number_op in (lambda out: torch.add(x, 1, out=out), lambda out: torch.mul(x, x, out=out),
                      lambda out: torch.div(2, x, out=out)):
        with pytest.raises(RuntimeError, match="Expected out tensor to have device xla:0"):
            number_op(torch.empty(2, 2))
    out = torch.empty(2, 2).to(device)  # an out tensor on the device works
    torch.mm(x, x, out=out)
    assert_close(out, torch.full((2, 2), 2.0))
    cpu = torch.zeros(2, 2)  # and a CPU tensor copies from the device, as on any device
    cpu.copy_(x)
    assert cpu.tolist() == [[1.0, 1.0], [1.0, 1.0]]


# `out=` calls whose other tensors may be Python numbers (`torch.add(x, 1, out=y)`), each
# against eager CPU: the value and the dtype written into `out`.
NUMBER_OUTS = {
    "add_number": (lambda x, out: torch.add(x, 1, alpha=3, out=out), torch.float32),
    "sub_number_self": (lambda x, out: torch.sub(2, x, alpha=2, out=out), torch.float32),
    "mul_int_by_float": (lambda x, out: torch.mul(x.long(), 2.5, out=out), torch.float32),
    "mul_number_self": (lambda x, out: torch.mul(2, x.long(), out=out), torch.int64),
    "div_floor": (lambda x, out: torch.div(x.long(), 2, rounding_mode="floor", out=out),
                  torch.int64),
    "div_number": (lambda x, out: torch.div(x, 4, out=out), torch.float64),
    "floor_divide": (lambda x, out: torch.floor_divide(x.long(), 2, out=out), torch.int64),
    "add_scalar_out": (lambda x, out: torch.ops.aten.add.Scalar_out(x, 2, out=out),
                       torch.float32),
    "mul_tensors": (lambda x, out: torch.mul(x, x, out=out), torch.float32),
    "add_zero_dim_self_resized": (lambda x, out: torch.add(x[0], 1, out=out), torch.float32),
}


@pytest.mark.parametrize("case", NUMBER_OUTS.values(), ids=NUMBER_OUTS.keys())
def test_out_variants_given_python_numbers_match_eager_cpu(device, case):
    op, dtype = case
    x = torch.tensor([1.0, 2.0, 5.0])
    expected = op(x, torch.zeros(3, dtype=dtype))
    out = torch.zeros(3, dtype=dtype).to(device)
    op(x.to(device), out)
    assert out.dtype == expected.dtype
    assert_close(out.cpu(), expected)


def test_an_out_tensor_on_the_device_for_cpu_inputs_raises(device):
    """PyTorch's kernel used to run these on the CPU and put the CPU result inside the XLA
    tensor, which from then on computed on the CPU: `x + cpu_tensor` no longer raised."""
    cpu = torch.ones(3)
    writes = [lambda out: torch.sin(cpu, out=out), lambda out: torch.add(cpu, 1, out=out),
              lambda out: torch.mm(torch.ones(3, 1), torch.ones(1, 1), out=out),
              lambda out: torch.cat([cpu], out=out)]
    for write in writes:
        out = torch.zeros(3).to(device)
        with pytest.raises(RuntimeError, match=r"found at least two devices, xla:0 and cpu! "
                           r"An `out=` tensor on xla:0 was given an input on cpu"):
            write(out)
        assert out.cpu().tolist() == [0.0, 0.0, 0.0]
        with pytest.raises(RuntimeError, match="Input tensor is not an XLA tensor"):
            out + cpu  # still an XLA tensor
    out = torch.zeros(3).to(device)  # CPU scalars move to the device, as operands do
    torch.add(torch.tensor(1.0), torch.tensor(2.0), out=out)
    assert_close(out.cpu(), torch.tensor(3.0))
    torch.sin(torch.tensor(1.0), out=out)
    assert_close(out.cpu(), torch.sin(torch.tensor(1.0)))
    with pytest.raises(RuntimeError, match="Input tensor is not an XLA tensor"):
        out + cpu


def test_an_out_tensor_of_a_type_the_result_does_not_cast_to_raises(device):
    """The CPU refuses these; PyTorch's functionalization kernel wrote the result converted
    ([0, 0, 0] for sin of 0.7), so the device now runs the op's checks on meta tensors."""
    x = torch.full((3,), 0.7)
    for op in (lambda a, out: torch.sin(a, out=out),
               lambda a, out: torch.add(a, a, out=out),
               lambda a, out: torch.mul(a.long(), 2.5, out=out),
               lambda a, out: torch.mm(a[None], a[:, None], out=out[:1, None])):
        with pytest.raises(RuntimeError):
            op(x, torch.zeros(3, dtype=torch.long))
        out = torch.zeros(3, dtype=torch.long).to(device)
        with pytest.raises(RuntimeError, match="cast|dtype"):
            op(x.to(device), out)
        assert out.cpu().tolist() == [0, 0, 0]
    out = torch.zeros(3, dtype=torch.float64).to(device)  # a wider type is fine
    torch.sin(x.to(device), out=out)
    assert_close(out.cpu(), torch.sin(x).double())


SCALAR_ARGUMENT_ERRORS = {
    "add, integers with a float alpha": lambda t: torch.add(t, t, alpha=0.5),
    "sub, integers with a float alpha": lambda t: torch.sub(t, t, alpha=1.5),
    "rsub, integers with a float alpha": lambda t: torch.rsub(t, 2, alpha=0.5),
}


@pytest.mark.parametrize("op", SCALAR_ARGUMENT_ERRORS.values(), ids=SCALAR_ARGUMENT_ERRORS.keys())
def test_a_refused_number_argument_raises_torchs_error(device, op):
    """Numbers the graph takes as inputs (`alpha`, `other`, `value`) go to the CPU as the user
    gave them when the op cannot be recorded, so the CPU's own error comes back, not one
    about the engine's placeholder ("Expected a value of type 'number' ... 'Lifted'")."""
    t = torch.arange(3)
    with pytest.raises(RuntimeError) as cpu:
        op(t)
    with pytest.raises(RuntimeError) as ours:
        op(t.to(device))
    assert str(ours.value) == str(cpu.value)
    assert "Lifted" not in str(ours.value)


def test_an_op_without_a_meta_kernel_gets_its_numbers_on_the_cpu(device, metrics):
    x = torch.randn(4, 5)
    assert_close(torch.ops.aten._add_relu.Scalar(x.to(device), 0.5),
                 torch.ops.aten._add_relu.Scalar(x, 0.5))
    assert metrics.executed_fallback_ops() == ["aten::_add_relu"]


# Ops whose CPU kernels have no code for the inputs' dtype, where meta kernels (which the
# engine records with) accept any dtype: each raised nothing on the device and computed
# garbage (softmax of int64: zeros and ones).
DTYPE_REFUSALS = {
    "softmax-int64": lambda d: torch.arange(6, device=d).softmax(0),
    "log_softmax-int32": lambda d: torch.arange(6, device=d, dtype=torch.int32).log_softmax(0),
    "frac-int64": lambda d: torch.arange(6, device=d).frac(),
    "logaddexp-int64": lambda d: torch.logaddexp(torch.arange(3, device=d),
                                                 torch.arange(3, device=d)),
    "argmax-bool": lambda d: (torch.arange(6, device=d) > 2).argmax(),
    "var-int64": lambda d: torch.arange(6, device=d).var(),
    "relu-bool": lambda d: torch.relu(torch.arange(6, device=d) > 2),
    "abs-bool": lambda d: (torch.arange(6, device=d) > 2).abs(),
    "matmul-bool": lambda d: (torch.ones(2, 3, device=d) > 0) @ (torch.ones(3, 2, device=d) > 0),
    "adaptive_avg_pool2d-int64": lambda d: nn.functional.adaptive_avg_pool2d(
        torch.arange(16, device=d).reshape(1, 4, 4), 2),
    "cross_entropy-int64-logits": lambda d: nn.functional.cross_entropy(
        torch.arange(6, device=d).reshape(2, 3), torch.tensor([0, 1], device=d)),
    # random ops, probed with the CPU generator's state put back
    "uniform_-int64": lambda d: torch.zeros(4, dtype=torch.int64, device=d).uniform_(),
    "bernoulli-int64": lambda d: torch.bernoulli(torch.zeros(4, dtype=torch.int64, device=d)),
    "multinomial-int64": lambda d: torch.multinomial(torch.ones(4, dtype=torch.int64,
                                                                device=d), 2),
}


@pytest.mark.parametrize("op", DTYPE_REFUSALS.values(), ids=DTYPE_REFUSALS.keys())
def test_an_input_dtype_the_cpu_refuses_raises_torchs_error(device, op):
    with pytest.raises(RuntimeError) as cpu:
        op(torch.device("cpu"))
    with pytest.raises(RuntimeError) as ours:
        op(device).cpu()
    assert str(ours.value) == str(cpu.value)


# Reductions without identity over an empty dim. Meta kernels (which the engine records
# with) accept some of them: max and min failed at the sync as a jax error, median.dim and
# mode gave numbers; the others raised CPU torch's IndexError, not PyTorch/XLA's RuntimeError.
EMPTY_REDUCTIONS = {
    "max.dim": lambda x: torch.max(x, dim=1),
    "min.dim": lambda x: torch.min(x, 1, keepdim=True),
    "max": lambda x: x.max(),
    "min": lambda x: x.min(),
    "argmax": lambda x: x.argmax(),
    "argmax.dim": lambda x: x.argmax(dim=-1),
    "argmin": lambda x: x.argmin(),
    "argmin.dim": lambda x: x.argmin(dim=1),
    "amax.dim": lambda x: x.amax(dim=1),
    "amax.dims": lambda x: x.amax(dim=(0, -1)),
    "amax": lambda x: x.amax(),
    "amin.dim": lambda x: x.amin(dim=-1),
    "amin": lambda x: x.amin(dim=[]),
    "aminmax": lambda x: torch.aminmax(x),
    "aminmax.dim": lambda x: torch.aminmax(x, dim=1),
    "kthvalue": lambda x: x.kthvalue(1),
    "median.dim": lambda x: x.median(dim=1),
    "nanmedian.dim": lambda x: x.nanmedian(dim=1),
    "mode": lambda x: x.mode(),
}


@pytest.mark.parametrize("op", EMPTY_REDUCTIONS.values(), ids=EMPTY_REDUCTIONS.keys())
def test_a_reduction_over_an_empty_dim_raises_torchs_error_at_once(device, op):
    """When the op is recorded, with CPU torch's message; its class is a RuntimeError (as
    PyTorch/XLA raises) that is also CPU torch's IndexError where that is the CPU's."""
    x = torch.empty(2, 0)
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        op(x)
    with pytest.raises(RuntimeError) as ours:
        op(x.to(device))
    assert isinstance(ours.value, type(cpu.value))
    assert str(ours.value) == str(cpu.value)


OUT_OF_RANGE = {
    "flip": lambda x: x.flip(0, 1, 2, 3),
    "select": lambda x: x.select(5, 0),
    "transpose": lambda x: x.transpose(0, 4),
    "sum.dim": lambda x: x.sum(dim=-5),
}


@pytest.mark.parametrize("op", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_dimension_out_of_range_is_both_index_and_runtime_error(device, op):
    """CPU torch raises IndexError, PyTorch/XLA RuntimeError (its tests assert it): ours
    is both, with the CPU's message."""
    x = torch.zeros(2, 3, 4)
    with pytest.raises(IndexError) as cpu:
        op(x)
    with pytest.raises(RuntimeError) as ours:
        op(x.to(device))
    assert isinstance(ours.value, IndexError)
    assert str(ours.value) == str(cpu.value)


NON_EMPTY_REDUCTIONS = {  # (input shape, op)
    "max.dim": ((2, 0), lambda x: torch.max(x, dim=0)),
    "argmin.dim": ((2, 0), lambda x: x.argmin(dim=0)),
    "amax.dim": ((2, 0), lambda x: x.amax(dim=0)),
    "aminmax.dim": ((2, 0), lambda x: torch.aminmax(x, dim=0)),
    "mode": ((2, 0), lambda x: x.mode(0)),
    "max.dim-of-values": ((2, 3), lambda x: torch.max(x, 1)),
}


@pytest.mark.parametrize("shape,op", NON_EMPTY_REDUCTIONS.values(),
                         ids=NON_EMPTY_REDUCTIONS.keys())
def test_a_reduction_over_a_non_empty_dim_records(device, shape, op):
    """An empty tensor reduced over a dim that is not empty gives an empty result."""
    x = torch.randn(shape)
    expected, got = op(x), op(x.to(device))
    for e, g in zip(expected if isinstance(expected, tuple) else (expected,),
                    got if isinstance(got, tuple) else (got,), strict=True):
        assert_close(g, e)


def test_probing_a_random_op_draws_nothing_from_the_cpu_generator(device):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    with pytest.raises(RuntimeError):
        torch.zeros(4, dtype=torch.int64, device=device).exponential_()
    torch.zeros(5, dtype=torch.int64, device=device).random_(0, 7)  # probed and recorded
    assert torch.equal(torch.rand(3), expected)


# Ops that take integer and bool tensors on the CPU keep recording them.
INTEGER_OPS = {
    "add-int64": lambda d: torch.arange(6, device=d) + 3,
    "sum-bool": lambda d: (torch.arange(6, device=d) > 2).sum(),
    "argmax-int64": lambda d: torch.arange(6, device=d).flip(0).argmax(),
    "matmul-int64": lambda d: torch.arange(6, device=d).reshape(2, 3) @ torch.arange(
        6, device=d).reshape(3, 2),
    "gather": lambda d: torch.arange(6, device=d).reshape(2, 3).gather(
        1, torch.tensor([[2, 0], [1, 1]], device=d)),
    "embedding": lambda d: nn.functional.embedding(
        torch.tensor([[0, 2], [1, 1]], device=d), torch.arange(6.0, device=d).reshape(3, 2)),
    "where-bool": lambda d: torch.where(torch.arange(6, device=d) > 2, 1, 0),
    "cumsum-int32": lambda d: torch.arange(6, device=d, dtype=torch.int32).cumsum(0),
    "random_-int64": lambda d: torch.zeros(5, dtype=torch.int64, device=d).random_(7, 8),
}


@pytest.mark.parametrize("op", INTEGER_OPS.values(), ids=INTEGER_OPS.keys())
def test_integer_and_bool_inputs_the_cpu_takes_stay_on_the_device(device, metrics, op):
    assert_close(op(device), op(torch.device("cpu")))
    assert metrics.executed_fallback_ops() == []


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_of_integers_computes_on_the_device_as_on_cuda(device, metrics, dtype):
    """The CPU's histc takes floating types only; CUDA's takes integers too, and
    transformers' mixture-of-experts layers count tokens per expert with histc of int32
    expert ids on every device but the CPU. Reference: the CPU's histc of the same values
    as float32 (integer min and max: CUDA's integer arithmetic bins them the same way),
    in the input's dtype, as CUDA returns it."""
    x = torch.tensor([[0, 3, 1, 3], [2, 7, 3, 0]], dtype=dtype)  # 7 is out of range
    for bins, lo, hi in ((4, 0, 3), (3, 0, 3), (8, 0, 0)):
        got = torch.histc(x.to(device), bins=bins, min=lo, max=hi).cpu()
        assert got.dtype == dtype
        assert_close(got, torch.histc(x.float(), bins=bins, min=lo, max=hi).to(dtype))
    assert metrics.executed_fallback_ops() == []


def test_allclose_computes_on_the_device_as_isclose_all(device, metrics):
    """`torch.allclose` (CompositeExplicitAutograd, so it reaches the engine whole) is
    `isclose(...).all()` read once, on the device; reference: the CPU's allclose, over
    NaN, infinities, integers, bools, complex numbers, broadcasting and the tolerances."""
    inf, nan = float("inf"), float("nan")
    pairs = [
        (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.00001])),
        (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.1])),
        (torch.tensor([1.0, nan, inf]), torch.tensor([1.0, nan, inf])),
        (torch.tensor([1.0, -inf]), torch.tensor([1.0, inf])),
        (torch.tensor([1, 2]), torch.tensor([1, 3])),
        (torch.tensor([True, False]), torch.tensor([True, True])),
        (torch.randn(3, 4), torch.randn(4)),
        (torch.tensor([1 + 1j, 2j]), torch.tensor([1 + 1j, 2.000001j])),
    ]
    for a, b in pairs:
        for rtol, atol, equal_nan in ((1e-5, 1e-8, False), (0, 0, True), (0.1, 0, False)):
            want = torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
            got = torch.allclose(a.to(device), b.to(device), rtol=rtol, atol=atol,
                                 equal_nan=equal_nan)
            assert got is want, (a, b, rtol, atol, equal_nan)
    # never copied to the host; the answer's read counts as PyTorch/XLA counts `.item()`
    assert metrics.executed_fallback_ops() == ["aten::_local_scalar_dense"]
    with pytest.raises(RuntimeError, match="did not match"):
        torch.allclose(torch.tensor([1]).to(device), torch.tensor([1.0]).to(device))


def test_equal_computes_on_the_device(device, metrics):
    """`torch.equal` is `(a == b).all()` read once, on the device (as allclose); reference:
    the CPU's equal over other sizes, NaN, dtypes and bools."""
    nan = float("nan")
    pairs = [
        (torch.arange(6.).reshape(2, 3), torch.arange(6.).reshape(2, 3)),
        (torch.arange(6.).reshape(2, 3), torch.arange(6.).reshape(3, 2)),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])),
        (torch.tensor([1.0, nan]), torch.tensor([1.0, nan])),
        (torch.tensor([1, 2]), torch.tensor([1.0, 2.0])),
        (torch.tensor([True, False]), torch.tensor([True, False])),
        (torch.zeros(0), torch.zeros(0)),
    ]
    for a, b in pairs:
        assert torch.equal(a.to(device), b.to(device)) is torch.equal(a, b), (a, b)
    assert set(metrics.executed_fallback_ops()) <= {"aten::_local_scalar_dense"}


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_types_the_cpu_barely_implements_compute_on_the_device(device, metrics, dtype):
    """torch gives uint16/32/64 almost no CPU kernels ("add_stub" not implemented for
    'UInt64'); PyTorch/XLA computes with them (its test_data_type adds uint64 tensors), so
    the CPU's refusal is not taken as torch's."""
    a = torch.tensor([1, 2, 3], dtype=dtype)
    got = torch.add(a.to(device), a.to(device)).cpu()
    assert got.dtype == dtype
    assert got.to(torch.int64).tolist() == [2, 4, 6]
    assert metrics.executed_fallback_ops() == []


MATRIX_RANKS = {
    "default": lambda a, out: torch.linalg.matrix_rank(a, out=out),
    "tol": lambda a, out: torch.linalg.matrix_rank(a, 0.5, out=out),
    "atol_rtol": lambda a, out: torch.linalg.matrix_rank(a, atol=0.1, rtol=0.01, out=out),
    "atol_tensor": lambda a, out: torch.linalg.matrix_rank(
        a, atol=torch.tensor(0.2).to(a.device), out=out),
    "hermitian": lambda a, out: torch.linalg.matrix_rank(a @ a.mT, hermitian=True, out=out),
}


@pytest.mark.parametrize("rank", MATRIX_RANKS.values(), ids=MATRIX_RANKS.keys())
def test_matrix_rank_writes_its_out_tensor(device, rank):
    """PyTorch's composite kernel rebinds its `out` reference to a new tensor, given
    tensors it counts as subclass-like (every XLA tensor), so `out` kept [0, 0, 0]."""
    torch.manual_seed(0)
    a = torch.randn(3, 5, 5)
    a[1, :, :2] = 0  # rank 3
    expected = torch.zeros(3, dtype=torch.long)
    rank(a, expected)
    out = torch.zeros(3, dtype=torch.long).to(device)
    assert rank(a.to(device), out) is out
    assert out.cpu().tolist() == expected.tolist()


def test_mixing_with_requires_grad_raises_before_autograd(device):
    w = torch.randn(3, 3, requires_grad=True).to(device)
    with pytest.raises(RuntimeError, match="Input tensor is not an XLA tensor"):
        (w @ torch.randn(3, 3)).sum().backward()


def test_zero_dim_cpu_tensor_mixes_like_a_scalar(device):
    x = torch.tensor([1.0, 2.0])
    assert_close(x.to(device) * torch.tensor(3.0), x * torch.tensor(3.0))


def _indexed(x, device):
    """Indexing with CPU index tensors, as torch allows on any device; returns every result
    and the gradient of the indexed tensor."""
    x = x.to(device).requires_grad_()
    rows, cols = torch.tensor([2, 0, 2]), torch.tensor([[1], [3]])
    mask = torch.tensor([True, False, True])
    out = [x[rows], x[:, cols], x[rows, torch.tensor([0, 1, 3])], x[mask], x[mask, 1:],
           x[torch.tensor([1, 0]).to(device), torch.tensor([2, 2])]]  # one XLA, one CPU
    sum(o.square().sum() for o in out).backward()
    y = x.detach().clone()
    y[mask] = 0.0
    y[rows] += 1.0
    y.index_put_((torch.tensor([0, 0]), torch.tensor([1, 1])), torch.tensor(5.0),
                 accumulate=True)
    return [*out, y, x.grad]


def test_cpu_index_tensors_index_and_update_as_on_the_cpu(device):
    x = torch.arange(12.0).reshape(3, 4)
    for got, expected in zip(_indexed(x, device), _indexed(x, "cpu"), strict=True):
        assert got.device == device
        assert_close(got, expected.detach())


def test_a_cpu_tensor_as_an_operand_is_still_refused(device):
    """Only indices may stay on the CPU (torch's rule on every device)."""
    x = torch.arange(3.0).to(device)
    with pytest.raises(RuntimeError, match="Input tensor is not an XLA tensor"):
        torch.where(torch.tensor([True, False, True]), x, 0.0)
    with pytest.raises(RuntimeError, match="Input tensor is not an XLA tensor"):
        x.index_put((torch.tensor([0, 1]),), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("lengths_on", ["cpu", "xla", "tuple"])
def test_ctc_loss_takes_its_lengths_on_the_cpu_or_the_device(device, reduction, lengths_on):
    """CUDA code passes CPU length tensors; torch's composite kernel would divide the
    device loss by them (`backend/host_arguments.py`)."""
    torch.manual_seed(0)
    log_probs = torch.randn(6, 2, 5).log_softmax(2)
    targets = torch.tensor([[1, 2, 2], [3, 1, 0]])
    lengths = (torch.tensor([6, 5]), torch.tensor([3, 2]))

    def loss_and_grad(dev, where):
        lp = log_probs.to(dev).requires_grad_()
        given = {"cpu": lengths, "xla": tuple(t.to(dev) for t in lengths),
                 "tuple": tuple(tuple(t.tolist()) for t in lengths)}[where]
        loss = torch.nn.functional.ctc_loss(lp, targets.to(dev), *given, reduction=reduction)
        loss.sum().backward()
        return loss, lp.grad

    for got, expected in zip(loss_and_grad(device, lengths_on), loss_and_grad("cpu", "cpu"),
                             strict=True):
        assert_close(got, expected.detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("where", ["xla", "xla:0", "device", "mapping"])
def test_torch_load_onto_the_device_is_refused_with_what_to_do(device, where):
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    buffer.seek(0)
    location = {"xla": "xla", "xla:0": "xla:0", "device": device,
                "mapping": {"cpu": "xla:0"}}[where]
    with pytest.raises(RuntimeError, match=r"map_location='cpu'.*load_state_dict"):
        torch.load(buffer, map_location=location)
    buffer.seek(0)
    assert torch.equal(torch.load(buffer, map_location="cpu")["w"], torch.arange(3.0))


def test_ctc_loss_with_cpu_lengths_under_inference_mode(device):
    log_probs = torch.randn(6, 2, 5, generator=torch.Generator().manual_seed(0)).log_softmax(2)
    targets, lengths = torch.tensor([[1, 2, 2], [3, 1, 0]]), (torch.tensor([6, 5]),
                                                               torch.tensor([3, 2]))
    with torch.inference_mode():
        got = torch.nn.functional.ctc_loss(log_probs.to(device), targets.to(device), *lengths)
    assert_close(got, torch.nn.functional.ctc_loss(log_probs, targets, *lengths))


FACTORIES = {
    "tril_indices": lambda d: torch.tril_indices(4, 3, -1, device=d),
    "triu_indices": lambda d: torch.triu_indices(3, 5, 1, device=d),
    "kaiser_window": lambda d: torch.kaiser_window(6, device=d),
    "kaiser_window-beta": lambda d: torch.kaiser_window(6, False, 8.0, device=d),
    "fftfreq": lambda d: torch.fft.fftfreq(5, device=d),
    "rfftfreq": lambda d: torch.fft.rfftfreq(6, 0.5, device=d),
    "hann_window": lambda d: torch.hann_window(5, device=d),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_tensorless_factories_on_the_device_match_eager(device, name):
    """ATen's kernels for some of these fill `empty` through `out=` ops and views (wrong
    values: fftfreq) or have none for our device (tril_indices, kaiser_window)."""
    got = FACTORIES[name](device)
    assert got.device == device
    assert_close(got, FACTORIES[name]("cpu"))


def test_torch_range_on_the_device(device):
    with pytest.warns(UserWarning, match="torch.range is deprecated"):
        got = torch.range(0, 3, 0.5, device=device)
    assert_close(got, torch.arange(0, 3.5, 0.5))


RANDOM = {
    "rand": lambda d, g: torch.rand(3, generator=g, device=d),
    "randn": lambda d, g: torch.randn(3, generator=g, device=d),
    "randint": lambda d, g: torch.randint(0, 9, (4,), generator=g, device=d),
    "randperm": lambda d, g: torch.randperm(6, generator=g, device=d),
    "uniform_": lambda d, g: torch.empty(4, device=d).uniform_(0, 1, generator=g),
    "normal_": lambda d, g: torch.empty(4, device=d).normal_(0, 1, generator=g),
    "bernoulli": lambda d, g: torch.bernoulli(torch.full((6,), 0.5, device=d), generator=g),
    "multinomial": lambda d, g: torch.multinomial(torch.ones(5, device=d), 3, generator=g),
    # torch's functionalization checked these on meta kernels that refuse any generator
    "exponential_": lambda d, g: torch.empty(4, device=d).exponential_(2.0, generator=g),
    "geometric_": lambda d, g: torch.empty(4, device=d).geometric_(0.3, generator=g),
    "cauchy_": lambda d, g: torch.empty(4, device=d).cauchy_(1.0, 2.0, generator=g),
    "log_normal_": lambda d, g: torch.empty(4, device=d).log_normal_(0.5, 0.2, generator=g),
    "exponential_ of a view": lambda d, g: _drawn_into_view(torch.zeros(2, 3, device=d), g),
}


def _drawn_into_view(base, generator):
    base[:, 1].exponential_(generator=generator)
    return base


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_ops_given_a_generator_draw_from_it(device, name):
    """A torch.Generator's numbers, as PyTorch/XLA gives them (drawn on the CPU); without
    one, the device's own stream."""
    got = RANDOM[name](device, torch.Generator().manual_seed(3))
    assert got.device == device
    assert torch.equal(got.cpu(), RANDOM[name]("cpu", torch.Generator().manual_seed(3)))


@pytest.mark.parametrize("make", ["move", "to_sparse", "to_sparse_csr", "constructor"])
def test_sparse_tensors_are_refused_with_what_to_do(device, make):
    """XLA tensors are dense, as in PyTorch/XLA; each way to make a sparse one says so
    (it used to fail in numpy: "can't convert Sparse layout tensor")."""
    dense = torch.tensor([[0.0, 2.0], [3.0, 0.0]])
    attempts = {
        "move": lambda: dense.to_sparse().to(device),
        "to_sparse": lambda: dense.to(device).to_sparse(),
        "to_sparse_csr": lambda: dense.to(device).to_sparse_csr(),
        "constructor": lambda: torch.sparse_coo_tensor(
            torch.tensor([[0, 1], [1, 0]]).to(device), torch.tensor([2.0, 3.0]).to(device),
            (2, 2)),
    }
    with pytest.raises(NotImplementedError, match=r"XLA tensors are dense.*\.to_dense\(\)"):
        attempts[make]()
    assert torch.equal(dense.to_sparse().to_dense().to(device).cpu(), dense)


@pytest.mark.parametrize("read", ["print", "index", "tolist", "typed storage"])
def test_reading_an_xla_storage_is_refused_with_what_to_do(device, read):
    """An XLA tensor's storage has a size but no host bytes (as in PyTorch/XLA); reading
    it used to fail with "Attempted to set the storage of a tensor on device cpu"."""
    t = torch.arange(3.0, device=device)
    storage = t.untyped_storage()
    assert storage.nbytes() == 12 and storage.device == device
    attempts = {
        "print": lambda: str(storage),
        "index": lambda: storage[0],
        "tolist": storage.tolist,
        "typed storage": lambda: str(t.storage()),
    }
    with pytest.raises(RuntimeError, match=r"storage holds no bytes.*t\.cpu\(\)"):
        attempts[read]()
    assert t.cpu().untyped_storage().nbytes() == 12


def test_a_factory_larger_than_the_device_memory_fails_at_once():
    """`torch.rand` of 4 PB then `.sum()`: XLA fuses the generator into the reduction, so
    the program ran for ages instead of failing; the factory now refuses it (PyTorch/XLA
    fails allocating it). A tensor that fits is made as before."""
    out = run_python("""
        import torch, torch_xla
        errors = []  # kept, with their tracebacks: a later sync must not compute the tensor
        for make in (lambda: torch.rand(1024, 1024, 1024, 1024, 1024, device="xla").sum(),
                     lambda: torch.empty(1 << 50, dtype=torch.int8, device="xla")):
            try:
                make().cpu()
            except RuntimeError as error:
                print("refused |", error)
                errors.append(error)
        torch_xla.sync()
        print("fits", torch.zeros(1 << 28, dtype=torch.int8, device="xla").sum().item())
    """, timeout=120)
    assert out.count("refused | Out of memory allocating ") == 2, out
    assert "4503599627370496 bytes: aten.rand.default makes a torch.float32 tensor" in out
    assert "empty makes a torch.int8 tensor of shape [1125899906842624]" in out
    assert "fits 0" in out
