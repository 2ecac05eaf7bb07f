"""`torch_xla.utils.dlpack` and `_XLAC._unsafe_buffer_pointer`: device buffers shared
with other libraries without copies. Reference: the values moved the ordinary way."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.utils.dlpack as xdlpack

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int8,
          torch.bool, torch.complex64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_round_trip_shares_the_buffer_and_a_capsule_is_used_once(dtype):
    device = torch_xla.device()
    cpu = torch.arange(6).reshape(2, 3).to(dtype)
    for t in (cpu.to(device), torch.arange(6, device=device).reshape(2, 3).to(dtype)):
        capsule = xdlpack.to_dlpack(t)  # the second one is pending: computed first
        back = xdlpack.from_dlpack(capsule)
        assert back.device == t.device and back.dtype == dtype
        assert torch.equal(back.cpu(), cpu)
        assert xlac._unsafe_buffer_pointer(back) == xlac._unsafe_buffer_pointer(t)
        with pytest.raises(RuntimeError, match="DLTensor capsule can be consumed only once"):
            xdlpack.from_dlpack(capsule)


def test_other_libraries_arrays_become_xla_tensors():
    device = torch_xla.device()
    cpu = torch.linspace(0, 1, 5)
    for external in (cpu, torch.utils.dlpack.to_dlpack(cpu), np.linspace(0, 1, 5),
                     jnp.linspace(0, 1, 5, dtype=jnp.float32)):
        t = xdlpack.from_dlpack(external)
        assert t.device == device
        torch.testing.assert_close(t.cpu().double(), cpu.double(), rtol=1e-6, atol=1e-7)
        assert torch.equal((t * 2).cpu(), t.cpu() * 2)  # computes like any XLA tensor
    with pytest.raises(TypeError, match="to_dlpack takes an XLA tensor"):
        xdlpack.to_dlpack(cpu)


def test_buffer_pointers_of_data_and_of_pending_values():
    device = torch_xla.device()
    a = torch.ones(5, 5).to(device)
    assert xlac._unsafe_buffer_pointer(a) == xlac._unsafe_buffer_pointer(a.detach()) > 0
    with pytest.raises(RuntimeError, match="still pending.*torch_xla.sync"):
        xlac._unsafe_buffer_pointer(a + 1)
    b = a + 1
    torch_xla.sync()
    assert xlac._unsafe_buffer_pointer(b) != xlac._unsafe_buffer_pointer(a)
    assert xlac._get_xla_tensor_shape_type(torch.ones(3, dtype=torch.half).to(device)) == "f16"
    assert xlac._get_xla_tensor_shape_type(a > 0) == "pred"
