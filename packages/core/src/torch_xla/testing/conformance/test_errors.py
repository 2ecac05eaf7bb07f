"""Bad input gets the documented, clear errors."""

import pytest
import torch


def test_cpu_tensor_mixed_with_xla_tensor(device):
    with pytest.raises(RuntimeError, match="Input tensor is not an XLA tensor: torch.FloatTensor"):
        torch.ones(3, device=device) + torch.ones(3)


def test_device_index_out_of_range(device):
    with pytest.raises(RuntimeError, match="xla:99 does not exist"):
        torch.ones(1, device=torch.device("xla", 99)).cpu()
