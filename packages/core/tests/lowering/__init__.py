"""Tests of the lowering layer (torch_xla.lowering); PyTorch eager on CPU is the oracle."""
