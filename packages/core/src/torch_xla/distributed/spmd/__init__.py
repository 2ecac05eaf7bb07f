"""`torch_xla.distributed.spmd` (`xs`): one program sharded over every device (issue 11).

Device meshes (`Mesh`, `HybridMesh`, `get_1d_mesh`, the global mesh) and partition
specs become jax `NamedSharding`s (`mesh.py`); `mark_sharding` lays a tensor out as
one (`xla_sharding.py`), and XLA's partitioner shards the compiled step from there.
PyTorch's DTensor API on an xla `DeviceMesh` comes through `api.py`.
The virtual device is `xr.use_spmd()`'s. See docs/guide/spmd.md.
"""

from torch_xla.distributed.spmd.api import (
    auto_policy,
    convert_to_xla_mesh,
    convert_to_xla_partition_spec,
    xla_distribute_module,
    xla_distribute_tensor,
)
from torch_xla.distributed.spmd.debugging import visualize_sharding, visualize_tensor_sharding
from torch_xla.distributed.spmd.mesh import (
    HybridMesh,
    Mesh,
    ShardingType,
    get_1d_mesh,
    get_global_mesh,
    set_global_mesh,
)
from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShard, XLAShardedTensor
from torch_xla.distributed.spmd.xla_sharding import (
    MarkShardingFunction,
    ShardingSpec,
    XLAPatchedLinear,
    _mark_manual_sharding,
    annotate_custom_sharding,
    apply_backward_optimization_barrier,
    clear_sharding,
    disable_manual_sharding,
    enable_manual_sharding,
    mark_sharding,
    mark_sharding_with_gradients,
    shard_as,
    unwrap_sharded_tensor,
    wrap_as_sharded_tensor,
    wrap_if_sharded,
    xla_patched_nn_linear_forward,
)

__all__ = ["HybridMesh", "MarkShardingFunction", "Mesh", "ShardingSpec", "ShardingType",
           "XLAPatchedLinear", "XLAShard", "XLAShardedTensor",
           "_mark_manual_sharding", "annotate_custom_sharding",
           "apply_backward_optimization_barrier", "clear_sharding",
           "disable_manual_sharding", "enable_manual_sharding", "get_1d_mesh",
           "get_global_mesh",
           "mark_sharding", "mark_sharding_with_gradients", "set_global_mesh", "shard_as",
           "unwrap_sharded_tensor", "visualize_sharding", "visualize_tensor_sharding",
           "wrap_as_sharded_tensor", "wrap_if_sharded", "xla_patched_nn_linear_forward",
           "auto_policy", "convert_to_xla_mesh", "convert_to_xla_partition_spec",
           "xla_distribute_module", "xla_distribute_tensor"]
