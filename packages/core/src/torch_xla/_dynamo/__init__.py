"""`torch.compile(backend='openxla')`: dynamo's FX graphs run as compiled XLA programs.

`dynamo_bridge` turns an FX graph into one compiled program per signature of its
arguments (PyTorch's own `openxla` backend imports it as `torch_xla.core.dynamo_bridge`);
`config` holds its switches; `dynamo_backend2` is a second backend for `torch.compile`
with the same engine under AOTAutograd's `aot_function`.
"""
