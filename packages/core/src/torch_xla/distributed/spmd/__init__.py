"""`torch_xla.distributed.spmd` (`xs`): one program sharded over every device (issue 11).

What exists so far: device meshes (`Mesh`, `HybridMesh`, `get_1d_mesh`, the global
mesh) and partition specs, translated into jax's `NamedSharding` for XLA's
partitioner (`mesh.py`). The annotations (`mark_sharding` & co) and the virtual
device come next; see docs/guide/spmd.md.
"""

from torch_xla.distributed.spmd.mesh import (
    HybridMesh,
    Mesh,
    ShardingType,
    get_1d_mesh,
    get_global_mesh,
    set_global_mesh,
)

__all__ = ["HybridMesh", "Mesh", "ShardingType", "get_1d_mesh", "get_global_mesh",
           "set_global_mesh"]
