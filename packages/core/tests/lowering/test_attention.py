"""The fused CPU attention kernels and their backward."""

import torch

from .harness import check_op

aten = torch.ops.aten


def test_sdpa_cpu_kernels():
    q, k, v = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    for causal in (False, True):
        check_op(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, k, v, 0.0, causal))
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal)
        check_op(aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                 (torch.randn(*out.shape), q, k, v, out, lse, 0.0, causal))
