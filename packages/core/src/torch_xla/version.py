"""The version of torch-xla-core, and the oldest torch it supports."""

__version__ = "0.1.0"

# The xla device needs the Python PrivateUse1 guard/hooks API of this release.
MIN_TORCH_VERSION = (2, 13)
