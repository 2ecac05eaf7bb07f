"""`torch_xla.experimental.distributed_checkpoint`: checkpoints of sharded state (issue 11).

`torch.distributed.checkpoint` planners for state dicts holding sharded XLA tensors
(`SPMDSavePlanner`, `SPMDLoadPlanner`): each process writes only the tiles its devices
own and reads only what its devices need, so a model saved on one mesh loads onto
another. `CheckpointManager` keeps numbered checkpoints in a folder, saves them in the
background, and never leaves a half-written one in place. `prime_optimizer` creates an
optimizer's state so that a checkpoint can be restored into it. See docs/guide/spmd.md.
"""

from torch_xla.experimental.distributed_checkpoint.manager import CheckpointManager
from torch_xla.experimental.distributed_checkpoint.planners import (
    SPMDLoadPlanner,
    SPMDSavePlanner,
)
from torch_xla.experimental.distributed_checkpoint.util import prime_optimizer

__all__ = ["CheckpointManager", "SPMDLoadPlanner", "SPMDSavePlanner", "prime_optimizer"]
