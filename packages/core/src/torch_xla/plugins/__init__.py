"""Device plugins: the `DevicePlugin` contract, the registry of installed plugins, and the
readers of a plugin's environment variables (`env_int`, `env_fraction`, ...)."""

from torch_xla.plugins.base import DevicePlugin, DtypePolicy
from torch_xla.plugins.env import env_file, env_flag, env_fraction, env_int, env_text
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
    "env_file",
    "env_flag",
    "env_fraction",
    "env_int",
    "env_text",
    "get_plugin",
    "record",
    "records",
    "register_installed_plugins",
    "register_plugin",
    "unregister_plugin",
]
