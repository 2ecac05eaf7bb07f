"""`torch_xla.experimental.xla_sharding`: PyTorch/XLA's old home of the SPMD API, kept as
an alias of `torch_xla.distributed.spmd` (its `xla_sharding` module's names, and the
sharded-tensor classes that module imported there). Importing it warns, as in PyTorch/XLA.
"""

import warnings

from torch_xla.distributed.spmd.xla_sharded_tensor import XLAShard, XLAShardedTensor  # noqa: F401
from torch_xla.distributed.spmd.xla_sharding import *  # noqa: F403

warnings.warn(
    "Importing from `torch_xla.experimental.xla_sharding` will be deprecated after 2.2 "
    "release. Please use `torch_xla.distributed.spmd` instead.", DeprecationWarning, 2)
