"""PyTorch/XLA's private checkpoint helpers, by their upstream names, over `_tiles`.

`_sharded_cpu_state_dict` stages a state dict on the host as `CheckpointManager.save_async`
does: a tensor whose data is split over devices becomes `_CpuShards` (the `HostTiles`
this process owns), any other XLA tensor a CPU tensor. `SPMDSavePlanner` takes such a
state dict as it takes the original, `_CpuShards` being leaves of its nesting.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.metadata import STATE_DICT_TYPE

from torch_xla.distributed.spmd.xla_sharded_tensor import ShardingType, XLAShardedTensor
from torch_xla.experimental.distributed_checkpoint._tiles import HostTiles, to_host

_CpuShards = HostTiles


def _is_sharded_tensor(x: Any) -> bool:
    """Whether `x` is an `XLAShardedTensor` whose data is split over devices."""
    return isinstance(x, XLAShardedTensor) and x.sharding_type != ShardingType.REPLICATED


def _unwrap_xla_sharded_tensor(x: Any) -> Any:
    return x.global_tensor if isinstance(x, XLAShardedTensor) else x


def _sharded_cpu_state_dict(state_dict: STATE_DICT_TYPE) -> STATE_DICT_TYPE:
    """`state_dict` on the host: `_CpuShards` for sharded tensors, CPU tensors for other
    XLA tensors, everything else as it is (`_tiles.to_host`)."""
    return to_host(state_dict)
