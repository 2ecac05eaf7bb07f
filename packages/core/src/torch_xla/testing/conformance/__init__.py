"""The plugin conformance kit: what every torch-xla device plugin must pass.

Run it against an installed plugin, on a machine that has its hardware:

    PJRT_DEVICE=NAME python -m pytest --pyargs torch_xla.testing.conformance

It checks, through the public API only: the plugin is discovered and loads,
its devices start, tensors of every dtype cross to the device and back
exactly, a compiled training step matches eager PyTorch on the CPU and hits
the compile cache from the second step, random numbers are reproducible, and
bad input gets the documented errors. Numbers honour the plugin's declared
`dtype_policy()` (a float64 stored as float32 is compared as float32).
"""
