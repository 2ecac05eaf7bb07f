"""`torch_xla.experimental.plugins`, the plugin API under the name PyTorch/XLA users import."""

from __future__ import annotations

from torch_xla.plugins import registry
from torch_xla.plugins.base import DevicePlugin, DtypePolicy
from torch_xla.plugins.registry import register_installed_plugins, register_plugin

__all__ = [
    "DevicePlugin",
    "DtypePolicy",
    "default",
    "register_installed_plugins",
    "register_plugin",
    "use_dynamic_plugins",
    "using_dynamic_plugins",
]


def use_dynamic_plugins() -> None:
    """Kept for PyTorch/XLA programs: plugins are always dynamic here."""


def using_dynamic_plugins() -> bool:
    return True


def default() -> DevicePlugin:
    """The plugin of the active device type."""
    plugin = registry.active().plugin
    assert plugin is not None
    return plugin
