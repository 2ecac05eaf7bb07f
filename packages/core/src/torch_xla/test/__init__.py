"""Helpers for PyTorch/XLA test and example scripts (`torch_xla.test.test_utils`)."""
