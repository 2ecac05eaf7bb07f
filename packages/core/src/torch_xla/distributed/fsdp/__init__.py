"""`torch_xla.distributed.fsdp`: fully sharded data parallel helpers.

Only the auto-wrap policies (`wrap.py`) live here; the SPMD implementation of FSDP
(FSDPv2) is `torch_xla.experimental.spmd_fully_sharded_data_parallel`. See
docs/guide/spmd.md.
"""

from torch_xla.distributed.fsdp.wrap import (
    always_wrap_policy,
    lambda_auto_wrap_policy,
    recursive_wrap,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

__all__ = ["always_wrap_policy", "lambda_auto_wrap_policy", "recursive_wrap",
           "size_based_auto_wrap_policy", "transformer_auto_wrap_policy"]
