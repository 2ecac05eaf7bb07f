"""Dtypes round-trip exactly and compute like eager; XLA_USE_BF16 & co store reduced types."""

from __future__ import annotations

import pytest
import torch

from .helpers import assert_close, run_python

DTYPES = [
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def _sample(dtype):
    if dtype == torch.bool:
        return torch.tensor([True, False, True])
    if dtype.is_complex:
        return torch.tensor([1 + 2j, -3.5 + 0.25j], dtype=dtype)
    if dtype.is_floating_point:
        return torch.tensor([1.5, -2.25, 3e-3, 1e4], dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([info.min, -1 if info.min < 0 else 0, 7, info.max], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_exact(device, dtype):
    x = _sample(dtype)
    back = x.to(device).cpu()
    assert back.dtype == dtype
    assert torch.equal(back, x)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compute_matches_eager(device, dtype):
    x = _sample(dtype)
    if dtype == torch.bool:
        assert_close(x.to(device) & ~x.to(device), x & ~x)
        return
    assert_close(x.to(device) + x.to(device), x + x)
    assert_close(x.to(device) * 2, x * 2)


def test_float64_is_really_64_bit(device):
    x = torch.tensor([1.0 + 1e-12], dtype=torch.float64)
    assert (x.to(device) - 1).item() == pytest.approx(1e-12, rel=1e-3)


DEFAULT_DTYPE_OPS = {
    "ones": lambda d: torch.ones(2, device=d),
    "full": lambda d: torch.full((2,), 1.5, device=d),
    "arange": lambda d: torch.arange(0.0, 2.0, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 3, device=d),
    "scalar_tensor": lambda d: torch.scalar_tensor(2, device=d),
    "rand": lambda d: torch.rand(2, device=d),
    "integer true division": lambda d: torch.tensor([3, 4], device=d) / 2,
    "integer sqrt": lambda d: torch.tensor([3, 4], device=d).sqrt(),
}


@pytest.mark.parametrize("name", DEFAULT_DTYPE_OPS)
def test_ops_follow_the_default_dtype_when_it_changes(device, name):
    """An op recorded once under float32 gave float32 after `torch.set_default_dtype`
    (the shape cache did not key on the default dtype)."""
    op = DEFAULT_DTYPE_OPS[name]
    previous = torch.get_default_dtype()
    try:
        for default in (torch.float32, torch.float64, torch.float16, torch.float32):
            torch.set_default_dtype(default)
            got, expected = op(device), op("cpu")
            assert got.dtype == expected.dtype == default
            if name != "rand":
                assert_close(got.cpu(), expected)
    finally:
        torch.set_default_dtype(previous)


def test_cast_matches_eager(device):
    x = torch.tensor([1.7, -2.5, 300.0, 0.0])
    for dtype in (torch.int32, torch.int16, torch.bfloat16, torch.float64, torch.bool):
        assert_close(x.to(device).to(dtype), x.to(dtype))
    # Negative or out-of-range floats to uint8 are undefined in C++; compare in range only.
    y = torch.tensor([1.7, 250.2, 0.0])
    assert_close(y.to(device).to(torch.uint8), y.to(torch.uint8))


FLAGS_CODE = """
    import torch, torch_xla
    from torch_xla.lazy import functional
    d = torch_xla.device()
    f = torch.tensor([1.0, 1.0 + 2 ** -10]).to(d)
    d64 = torch.tensor([1.0], dtype=torch.float64).to(d)
    i = torch.tensor([5]).to(d)
    arr = lambda t: functional.unwrap(t)
    torch_xla.sync()
    print(f.dtype, d64.dtype, i.dtype)
    print(arr(f)._node.array.dtype, arr(d64)._node.array.dtype, arr(i)._node.array.dtype)
    print((f * 2).cpu().tolist(), (i + 1).cpu().dtype)
"""


@pytest.mark.parametrize(
    "flag, stored, values",
    [
        ("XLA_USE_BF16", "bfloat16 bfloat16 int64", [2.0, 2.0]),
        ("XLA_DOWNCAST_BF16", "bfloat16 float32 int64", [2.0, 2.0]),
        ("XLA_USE_32BIT_LONG", "float32 float64 int32", [2.0, 2.0 + 2**-9]),
    ],
)
def test_dtype_flags_store_reduced_types_but_report_torch_dtypes(flag, stored, values):
    lines = run_python(FLAGS_CODE, env={flag: "1"}).strip().splitlines()
    assert lines[-3] == "torch.float32 torch.float64 torch.int64"
    assert lines[-2] == stored
    assert lines[-1] == f"{values} torch.int64"


LATCH_CODE = """
import os
import torch
import torch_xla
from torch_xla.lazy.functional import unwrap

def stored(t):
    return str(unwrap(t.to('xla'))._node.array.dtype)

print(stored(torch.ones(2)))                 # float32 stored before any flag is set
os.environ['XLA_USE_BF16'] = '1'              # too late for float32: read on first use
os.environ['XLA_USE_32BIT_LONG'] = '1'        # in time for int64: none stored yet
print(stored(torch.ones(2)), stored(torch.ones(2, dtype=torch.int64)),
      stored(torch.ones(2, dtype=torch.uint64)))
os.environ.pop('XLA_USE_32BIT_LONG')          # latched: int64 stays 32-bit
longs = torch.ones(2, dtype=torch.int64)
print(stored(longs), (longs.to('xla') + 1).dtype)
"""


def test_dtype_flags_are_read_on_first_use_of_the_dtypes_they_affect():
    """As PyTorch/XLA: a flag set after import applies if no tensor of its dtypes was stored
    yet, and is then fixed for the run."""
    lines = run_python(LATCH_CODE).strip().splitlines()
    assert lines[-3:] == ["float32", "float32 int32 uint32", "int32 torch.int64"]


def test_a_dtype_without_an_xla_element_type_is_refused_when_made(device):
    """complex32 has no XLA type: converting to it failed with a bare KeyError, and a
    factory only when a later sync lowered it; both now say what to do at the call."""
    t = torch.randn(2, device=device)
    for make in (t.chalf, lambda: torch.zeros(2, dtype=torch.complex32, device=device),
                 lambda: torch.empty(3, dtype=torch.complex32, device=device),
                 lambda: torch.zeros(2, dtype=torch.complex32).to(device)):
        with pytest.raises(TypeError, match=r"torch.complex32 has no XLA element type.*"
                                            r"\.to\(torch.complex64\)"):
            make()
    torch.testing.assert_close(t.to(torch.complex64).cpu(), t.cpu().to(torch.complex64))
