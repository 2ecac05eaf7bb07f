"""A torch-xla plugin for "a PJRT C API library at a path" -- copy it to make your own.

As shipped it runs on the host CPU through `pjrt_c_api_cpu_plugin.so` from the
PyPI package lammps-jax-pjrt-cpu, loaded by path exactly as a vendor's
accelerator library would be. Select it with PJRT_DEVICE=TEMPLATE.
"""

from torch_xla_plugin_template.plugin import TemplatePlugin

__version__ = "0.1.0"

__all__ = ["TemplatePlugin", "__version__"]
