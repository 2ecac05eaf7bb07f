"""`python -m torch_xla.plugins`: list installed plugins (same as `torch-xla plugins`)."""

import sys

from torch_xla.cli import main

sys.exit(main(["plugins", *sys.argv[1:]]))
