"""PyTorch/XLA's private helpers that its tests and some tools import (`torch_xla._internal`)."""
