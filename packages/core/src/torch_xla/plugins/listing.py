"""A human-readable table of the installed plugins and the device this process would use."""

from __future__ import annotations

import os

from torch_xla.plugins import registry
from torch_xla.plugins.registry import PluginError, PluginRecord


def _ask(fn, *args) -> str:  # noqa: ANN001 - any plugin method
    """Call a plugin method for display; a failure is shown, not raised."""
    try:
        return str(fn(*args))
    except Exception as error:  # the listing must show every plugin, even broken ones
        return f"error: {type(error).__name__}: {error}"


def _describe(record: PluginRecord) -> list[str]:
    lines = [f"{record.name.lower()}  ({record.origin})"]
    if record.plugin is None:
        lines.append(f"    status:   failed to load: {type(record.error).__name__}: {record.error}")
        return lines
    plugin = record.plugin
    library = _ask(plugin.library_path)
    if library == "None":
        library = f"built into jaxlib (platform {plugin.jax_platform()!r})"
    lines += [
        f"    class:    {plugin!r}",
        f"    priority: {plugin.priority}",
        f"    library:  {library}",
        f"    chips:    {_ask(plugin.physical_chip_count)}",
        f"    hardware: {'present' if _ask(plugin.hardware_present) == 'True' else 'absent'}",
    ]
    return lines


def _choice() -> str:
    requested = os.environ.get("PJRT_DEVICE")
    try:
        chosen = registry.active().name
    except PluginError as error:
        return f"Chosen device: none. {error}"
    why = f"PJRT_DEVICE={requested}" if requested else "automatic, PJRT_DEVICE unset"
    return f"Chosen device: {chosen} ({why})"


def describe() -> str:
    lines = ["Installed torch_xla plugins:"]
    records = registry.records()
    if not records:
        lines.append("  none (install torch-xla-cpu, or a vendor's plugin package)")
    for record in records:
        lines += ["  " + line for line in _describe(record)]
    lines.append(_choice())
    return "\n".join(lines)


def describe_devices() -> str:
    """Start the chosen plugin's runtime and list its devices."""
    from torch_xla.pjrt import client

    runtime = client()
    lines = [f"Devices of {runtime.name} (jax platform {runtime.platform!r}):"]
    lines += [
        f"  xla:{i}  {d.device_kind}  (PJRT id {d.id}, process {d.process_index})"
        for i, d in enumerate(runtime.devices)
    ]
    return "\n".join(lines)
