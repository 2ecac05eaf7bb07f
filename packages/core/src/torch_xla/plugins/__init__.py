"""Device plugins: the `DevicePlugin` contract and the registry of installed plugins."""

from torch_xla.plugins.base import DevicePlugin, DtypePolicy
from torch_xla.plugins.registry import (
    ENTRY_POINT_GROUP,
    PluginError,
    PluginRecord,
    active,
    get_plugin,
    record,
    records,
    register_installed_plugins,
    register_plugin,
    unregister_plugin,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "DevicePlugin",
    "DtypePolicy",
    "PluginError",
    "PluginRecord",
    "active",
    "get_plugin",
    "record",
    "records",
    "register_installed_plugins",
    "register_plugin",
    "unregister_plugin",
]
