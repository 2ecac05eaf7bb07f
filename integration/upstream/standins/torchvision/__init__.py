"""A stand-in for torchvision in the upstream runs: torchvision's wheels need CUDA torch and
do not load against the CPU torch here. It provides only the names PyTorch/XLA's test files
import (`from torchvision import datasets, transforms`); their `--fake_data` runs never use
them, and anything that does use them fails loudly."""

from torchvision import datasets, transforms  # noqa: F401
