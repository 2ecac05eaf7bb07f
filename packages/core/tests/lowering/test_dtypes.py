"""dtype maps and torch's type promotion reproduced on jax inputs."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from torch_xla.lowering import dtypes

ALL = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
       torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
       torch.complex128]


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_round_trip(dtype):
    assert dtypes.to_torch(dtypes.to_jax(dtype)) is dtype


def test_bfloat16_is_jax_bfloat16():
    assert dtypes.to_jax(torch.bfloat16) == jnp.bfloat16


def test_unknown_dtype_message():
    with pytest.raises(TypeError, match="complex32 has no jax equivalent"):
        dtypes.to_jax(torch.complex32)


def _jax_like(t: torch.Tensor):
    return jnp.zeros(t.shape, dtypes.to_jax(t.dtype))


# complex32 (torch's float16 + complex) has no XLA type.
_PAIRS = [(a, b) for a, b in itertools.product(ALL, ALL)
          if {a, b} & {torch.float16} == set() or not ({a, b} & {torch.complex64,
                                                                  torch.complex128})]


@pytest.mark.parametrize("a,b", _PAIRS, ids=str)
def test_result_type_matches_torch(a, b):
    for shape_a, shape_b in [((2,), (2,)), ((), (2,)), ((2,), ())]:
        ta, tb = torch.zeros(shape_a, dtype=a), torch.zeros(shape_b, dtype=b)
        got = dtypes.result_type(_jax_like(ta), _jax_like(tb))
        assert dtypes.to_torch(got) == torch.result_type(ta, tb), (shape_a, shape_b)


@pytest.mark.parametrize("dtype", [d for d in ALL if d != torch.float16], ids=str)
@pytest.mark.parametrize("scalar", [True, 3, 2.5, 1j])
def test_result_type_with_python_scalars(dtype, scalar):
    t = torch.zeros((2,), dtype=dtype)
    got = dtypes.result_type(_jax_like(t), scalar)
    assert dtypes.to_torch(got) == torch.result_type(t, scalar)


def test_float_type_and_sum_type():
    ints = jnp.zeros((2,), np.int32)
    assert dtypes.float_type(ints, ints) == np.float32
    assert dtypes.float_type(jnp.zeros((2,), jnp.bfloat16)) == jnp.bfloat16
    assert dtypes.sum_type(np.bool_) == np.int64
    assert dtypes.sum_type(np.float16) == np.float16


def test_default_float_follows_torch():
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert dtypes.default_float() == np.float64
    finally:
        torch.set_default_dtype(previous)
    assert dtypes.default_float() == np.float32
