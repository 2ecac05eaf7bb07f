"""Which device plugins exist, and which one this process uses.

Plugins arrive two ways: discovered from the entry-point group
``torch_xla.plugins`` of installed distributions, or registered by hand with
`register_plugin`. A plugin that fails to load is kept as a record with its
error, reported in one warning, and raised again (with the way out) only when
somebody asks for that plugin.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings

import importlib_metadata

from torch_xla.plugins.base import RNG_ALGORITHMS, DevicePlugin

ENTRY_POINT_GROUP = "torch_xla.plugins"

logger = logging.getLogger("torch_xla")


class PluginError(RuntimeError):
    """A plugin is unknown, broken, or cannot serve this machine."""


@dataclasses.dataclass
class PluginRecord:
    """One registered plugin, loaded or not."""

    name: str  # canonical (upper-case) name, as xr.device_type() reports it
    plugin: DevicePlugin | None  # None when loading failed
    error: BaseException | None = None  # why loading failed
    distribution: str | None = None  # installed package that declared it
    version: str | None = None
    entry_point: str | None = None  # "module:attr" of the declaration
    explicit: bool = False  # registered by hand with register_plugin()

    @property
    def origin(self) -> str:
        if self.distribution:
            return f"{self.distribution} {self.version} ({self.entry_point})"
        return "registered by hand" if self.explicit else "unknown origin"


_records: dict[str, PluginRecord] = {}
_active: PluginRecord | None = None
# Installed plugins are discovered on the first question asked of the registry,
# not while `torch_xla` is imported: a plugin package imports torch_xla itself,
# and loading its entry point during that import would see it half-initialised.
_discovered = False


def _ensure_discovered() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    if os.environ.get("XLA_REGISTER_INSTALLED_PLUGINS", "1") != "0":
        register_installed_plugins()


def canonical_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise PluginError(f"A plugin name must be a non-empty string, got {name!r}.")
    return name.strip().upper()


def validate(name: str, plugin: object) -> DevicePlugin:
    """Check a plugin object at registration, so its errors surface there and not later."""
    if isinstance(plugin, type) and issubclass(plugin, DevicePlugin):
        plugin = plugin()
    if not isinstance(plugin, DevicePlugin):
        raise PluginError(
            f"Plugin {name!r}: expected an instance of torch_xla.plugins.DevicePlugin, "
            f"got {type(plugin).__module__}.{type(plugin).__qualname__}. Subclass DevicePlugin."
        )
    if not isinstance(plugin.priority, int):
        raise PluginError(
            f"Plugin {name!r} ({plugin!r}): priority must be an int, got {plugin.priority!r}."
        )
    algorithm = plugin.rng_algorithm()
    if algorithm not in RNG_ALGORITHMS:
        raise PluginError(
            f"Plugin {name!r} ({plugin!r}): rng_algorithm() returned {algorithm!r}; "
            f"expected one of {RNG_ALGORITHMS}."
        )
    return plugin


def register_plugin(name: str, plugin: DevicePlugin | type, *, override: bool = False) -> None:
    """Register `plugin` under `name` (case-insensitive).

    A plugin registered by hand replaces a discovered one of the same name.
    Registering a name twice by hand is an error unless `override=True`.
    """
    key = canonical_name(name)
    previous = _records.get(key)
    if previous is not None and previous.explicit and not override:
        raise PluginError(
            f"Plugin {key!r} is already registered by hand ({previous.plugin!r}). "
            "Pass override=True to replace it."
        )
    _records[key] = PluginRecord(key, validate(key, plugin), explicit=True)
    _reset_choice_for(key)


def unregister_plugin(name: str) -> None:
    """Forget a plugin (mainly for tests and interactive use)."""
    key = canonical_name(name)
    _records.pop(key, None)
    _reset_choice_for(key)


def _reset_choice_for(key: str) -> None:
    global _active
    if _active is not None and _active.name == key:
        _active = None


def register_installed_plugins(path: list[str] | None = None) -> list[PluginRecord]:
    """Load every plugin declared under the entry-point group; return the failures.

    `path` limits the search to those directories (default: sys.path).
    """
    failures = [
        record
        for entry_point in _declared_entry_points(path)
        if (record := _load_entry_point(entry_point)).error is not None
    ]
    if failures:
        warnings.warn(_failure_summary(failures), RuntimeWarning, stacklevel=3)
    return failures


def _declared_entry_points(
    path: list[str] | None, group: str = ENTRY_POINT_GROUP
) -> list[importlib_metadata.EntryPoint]:
    """The entry points of `group` declared by installed distributions (under `path`)."""
    seen: set[str] = set()
    found = []
    search = {} if path is None else {"path": path}
    for dist in importlib_metadata.distributions(**search):
        name = dist.metadata["Name"]
        if name in seen:  # the first copy on the path is the one Python imports
            continue
        seen.add(name)
        found += list(dist.entry_points.select(group=group))
    return sorted(found, key=lambda ep: ep.name)


def _load_entry_point(entry_point: importlib_metadata.EntryPoint) -> PluginRecord:
    dist = entry_point.dist
    record = PluginRecord(
        name=canonical_name(entry_point.name),
        plugin=None,
        distribution=dist.name if dist else None,
        version=dist.version if dist else None,
        entry_point=entry_point.value,
    )
    existing = _records.get(record.name)
    if existing is not None and existing.explicit:
        return existing  # a hand registration wins over discovery
    try:
        record.plugin = validate(record.name, entry_point.load())
    # Any failure of third-party code is recorded, not fatal: sys.exit() at import as well
    # (SystemExit is no Exception). KeyboardInterrupt still stops the program.
    except (Exception, SystemExit) as error:
        record.error = error
    _records[record.name] = record
    return record


def _describe(error: BaseException | None) -> str:
    if isinstance(error, SystemExit):
        return f"SystemExit: it called sys.exit({error.code!r}) while loading"
    return f"{type(error).__name__}: {error}"


def _failure_summary(failures: list[PluginRecord]) -> str:
    lines = [f"torch_xla: {len(failures)} installed plugin(s) failed to load:"]
    lines += [f"  {r.name.lower()!r} from {r.origin}: {_describe(r.error)}" for r in failures]
    lines.append(
        "The other plugins work. Reinstall or uninstall the failing package, "
        "or set XLA_REGISTER_INSTALLED_PLUGINS=0 and register plugins by hand."
    )
    return "\n".join(lines)


def records() -> list[PluginRecord]:
    """All registered plugins, highest priority first, broken ones last."""
    _ensure_discovered()
    return sorted(
        _records.values(),
        key=lambda r: (r.plugin is None, -(r.plugin.priority if r.plugin else 0), r.name),
    )


def record(name: str) -> PluginRecord:
    """The record for `name`, or a PluginError naming what is installed."""
    key = canonical_name(name)
    _ensure_discovered()
    found = _records.get(key)
    if found is None:
        raise PluginError(
            f"Unknown PJRT device {name!r}. Installed plugins: {_installed_names()}. "
            f"Install the plugin package (for example `pip install torch-xla-{key.lower()}`) "
            "or set PJRT_DEVICE to one of the installed plugins."
        )
    if found.error is not None:
        raise PluginError(
            f"Plugin {key!r} from {found.origin} failed to load: "
            f"{_describe(found.error)}. Reinstall that package, "
            f"or choose another device with PJRT_DEVICE (installed: {_installed_names()})."
        ) from found.error
    return found


def _installed_names() -> str:
    usable = [r.name for r in records() if r.plugin is not None]
    return ", ".join(usable) if usable else "none (install torch-xla-cpu for the CPU)"


def get_plugin(name: str) -> DevicePlugin:
    plugin = record(name).plugin
    assert plugin is not None  # record() raised otherwise
    return plugin


def warn_about_xrt(environ: dict | os._Environ = os.environ) -> None:
    """One warning when a program still configures XRT (any `XRT_*` variable set), the
    runtime PJRT replaced."""
    found = sorted(name for name, value in environ.items() if name.startswith("XRT_") and value)
    if found:
        warnings.warn(
            f"{', '.join(found)} {'is' if len(found) == 1 else 'are'} set, but XRT is gone: "
            "torch_xla runs on PJRT, which needs no XRT configuration or server. Unset "
            f"{' and '.join(found)} and choose the device with PJRT_DEVICE (the device type "
            "of an installed plugin, e.g. PJRT_DEVICE=CPU); each host of a pod runs the same "
            "command (see docs/migration.md).",
            stacklevel=3,
        )


def active() -> PluginRecord:
    """The plugin this process uses: PJRT_DEVICE if set, else the best one present."""
    global _active
    if _active is None:
        warn_about_xrt()
        requested = os.environ.get("PJRT_DEVICE", "").strip()
        _active = record(requested) if requested else _automatic_choice()
    return _active


def _automatic_choice() -> PluginRecord:
    for candidate in records():
        if candidate.plugin is not None and candidate.plugin.hardware_present():
            logger.warning(
                "PJRT_DEVICE is not set; using %s, the highest-priority plugin whose "
                "hardware is present (set PJRT_DEVICE to choose).",
                candidate.name,
            )
            return candidate
    raise PluginError(
        "No PJRT device is available: no installed plugin found its hardware "
        f"(installed: {_installed_names()}). Install torch-xla-cpu to run on the CPU, "
        "or set PJRT_DEVICE."
    )


def set_active(name: str) -> None:
    """Make `name` the active plugin (the runtime checks it has not started).

    As PyTorch/XLA's `set_device_type`, this only sets PJRT_DEVICE: an unknown name
    is reported (with the installed plugins) when a device is first used."""
    global _active
    os.environ["PJRT_DEVICE"] = canonical_name(name)
    _active = None
