"""Switches of the dynamo bridge (PyTorch/XLA's `torch_xla._dynamo.config` names)."""

# Skip the per-call check that every input of a compiled graph is already device data.
# Saves a little host time per call; an input that is still pending IR then raises.
skip_input_data_check = False
