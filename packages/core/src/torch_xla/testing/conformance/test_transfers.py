"""Tensors of every dtype go to the device and back unchanged."""

import pytest
import torch

DTYPES = [
    torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
]


def sample(dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(4, 5, generator=generator) > 0.5
    if dtype.is_complex:
        return torch.randn(4, 5, dtype=dtype, generator=generator)
    if dtype.is_floating_point:
        return (torch.randn(4, 5, generator=generator, dtype=torch.float64) * 100).to(dtype)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -(2**40)), min(info.max, 2**40)
    values = torch.randint(low, high, (4, 5), generator=generator, dtype=torch.int64)
    values[0, :2] = torch.tensor([low, high - 1])  # the range's ends
    return values.to(dtype)


def stored_exactly(plugin, dtype: torch.dtype) -> bool:
    policy = plugin.dtype_policy()
    if dtype == torch.float64 and policy.f64_as_f32:
        return False
    if dtype == torch.float32 and policy.f32_as_bf16:
        return False
    return True


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip(device, plugin, dtype):
    host = sample(dtype)
    on_device = host.to(device)
    assert on_device.device == device
    assert on_device.dtype == dtype and on_device.shape == host.shape
    back = on_device.cpu()
    assert back.dtype == dtype
    if stored_exactly(plugin, dtype):
        torch.testing.assert_close(back, host, rtol=0, atol=0)
    else:  # the device stores a narrower type, as the plugin declares
        torch.testing.assert_close(back, host, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_computed_values_come_back(device, dtype):
    host = sample(dtype)
    result = (host.to(device) == host.to(device)).all().item()
    assert result is True
