"""`torch.ops.xla.dynamo_set_buffer_donor_`, under PyTorch/XLA's module name: the op is
defined in `torch_xla._dynamo.buffer_donor` (see there), where the dynamo bridge
registers it."""

from torch_xla._dynamo.buffer_donor import dynamo_set_buffer_donor_, dynamo_set_buffer_donor_xla_

__all__ = ["dynamo_set_buffer_donor_", "dynamo_set_buffer_donor_xla_"]
