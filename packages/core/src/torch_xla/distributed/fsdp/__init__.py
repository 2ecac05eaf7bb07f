"""`torch_xla.distributed.fsdp`: fully sharded data parallel over XLA replicas (FSDP v1,
ZeRO-3 with collectives between processes), its checkpoint consolidation and auto-wrap
policies.

The SPMD implementation of FSDP (FSDPv2) is
`torch_xla.experimental.spmd_fully_sharded_data_parallel` (docs/guide/spmd.md); this one
is for multi-process training (`torch_xla.launch`, `xmp.spawn`; docs/guide/distributed.md).
"""

from torch_xla.distributed.fsdp.state_dict_utils import (
    consolidate_sharded_model_checkpoints,
    consolidate_sharded_state_dicts,
)
from torch_xla.distributed.fsdp.utils import checkpoint_module
from torch_xla.distributed.fsdp.wrap import (
    always_wrap_policy,
    lambda_auto_wrap_policy,
    recursive_wrap,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel import (
    XlaFullyShardedDataParallel,
)

__all__ = ["XlaFullyShardedDataParallel", "always_wrap_policy", "checkpoint_module",
           "consolidate_sharded_model_checkpoints", "consolidate_sharded_state_dicts",
           "lambda_auto_wrap_policy", "recursive_wrap", "size_based_auto_wrap_policy",
           "transformer_auto_wrap_policy"]
