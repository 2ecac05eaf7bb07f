"""A stand-in for torchvision in the upstream runs: torchvision's wheels need CUDA torch and
do not load against the CPU torch here. It provides the names PyTorch/XLA's test files
use: `datasets` and `transforms` for imports only (their `--fake_data` runs never use
them, and anything that does fails loudly), and real `ops.nms` / `ops.remove_small_boxes`
(`ops.py`) and `models.resnet18` (`models.py`)."""

from torchvision import datasets, models, ops, transforms  # noqa: F401
