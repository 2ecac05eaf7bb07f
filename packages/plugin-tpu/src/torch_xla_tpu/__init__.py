"""torch-xla plugin for Google Cloud TPUs (libtpu's PJRT C API library).

Importing this package only defines `TpuPlugin`; libtpu is imported the first
time the library path is asked for, never at import.
"""

from torch_xla_tpu.plugin import TpuPlugin

__version__ = "0.1.0"

__all__ = ["TpuPlugin", "__version__"]
