"""Registration, discovery from entry points, and the choice of the active plugin."""

from __future__ import annotations

import logging
import textwrap
import warnings

import pytest
from conftest import run_python

from torch_xla.plugins import DevicePlugin, PluginError


class FakeAccelerator(DevicePlugin):
    priority = 50

    def __init__(self, chips: int = 1) -> None:
        self.chips = chips

    def library_path(self):
        return "/nonexistent/fake_pjrt.so"

    def physical_chip_count(self):
        return self.chips


class FakeHost(DevicePlugin):
    priority = -100

    def library_path(self):
        return None

    def jax_platform(self):
        return "cpu"

    def physical_chip_count(self):
        return 1


def make_distribution(root, name: str, entry_points: dict[str, str], modules: dict[str, str]):
    """An installed distribution on `root`: dist-info with entry points, plus its modules."""
    info = root / f"{name.replace('-', '_')}-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2.3\n")
    lines = ["[torch_xla.plugins]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


def make_good_distribution(root) -> None:
    """`vendor-good`, whose entry point `good` loads a working plugin."""
    make_distribution(root, "vendor-good", {"good": "good_vendor_mod:GoodPlugin"},
                      {"good_vendor_mod": GOOD_MODULE})


GOOD_MODULE = """
from torch_xla.plugins import DevicePlugin

class GoodPlugin(DevicePlugin):
    priority = 10
    def library_path(self):
        return None
    def jax_platform(self):
        return "cpu"
    def physical_chip_count(self):
        return 1
"""


def test_register_by_hand_is_case_insensitive(clean_registry):
    plugin = FakeAccelerator()
    clean_registry.register_plugin("Fake", plugin)
    assert clean_registry.get_plugin("FAKE") is plugin
    assert clean_registry.get_plugin("fake") is plugin
    assert clean_registry.record("fAkE").name == "FAKE"


def test_register_accepts_a_class(clean_registry):
    clean_registry.register_plugin("host", FakeHost)
    assert isinstance(clean_registry.get_plugin("host"), FakeHost)


def test_registering_twice_by_hand_needs_override(clean_registry):
    clean_registry.register_plugin("fake", FakeAccelerator())
    with pytest.raises(PluginError, match="already registered.*override=True"):
        clean_registry.register_plugin("FAKE", FakeAccelerator())
    replacement = FakeAccelerator()
    clean_registry.register_plugin("fake", replacement, override=True)
    assert clean_registry.get_plugin("fake") is replacement


def test_registration_validates_the_plugin(clean_registry):
    with pytest.raises(PluginError, match="'THING'.*expected an instance of .*DevicePlugin.*got"):
        clean_registry.register_plugin("thing", object())

    class BadRng(FakeAccelerator):
        def rng_algorithm(self):
            return "xorshift"

    with pytest.raises(PluginError, match="rng_algorithm\\(\\) returned 'xorshift'"):
        clean_registry.register_plugin("bad", BadRng())

    class BadPriority(FakeAccelerator):
        priority = "high"

    with pytest.raises(PluginError, match="priority must be an int"):
        clean_registry.register_plugin("bad", BadPriority())


def test_discovery_loads_entry_points_of_installed_distributions(
    clean_registry, tmp_path, monkeypatch
):
    make_good_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # so the modules import
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no failure, so no warning
        failures = clean_registry.register_installed_plugins([str(tmp_path)])
    assert failures == []
    record = clean_registry.record("good")
    assert type(record.plugin).__name__ == "GoodPlugin"
    assert (record.distribution, record.version) == ("vendor-good", "1.2.3")
    assert record.entry_point == "good_vendor_mod:GoodPlugin"


def test_a_broken_entry_point_warns_once_and_others_still_work(
    clean_registry, tmp_path, monkeypatch
):
    make_good_distribution(tmp_path)
    make_distribution(
        tmp_path, "vendor-broken", {"broken": "broken_vendor_mod:Plugin"},
        {"broken_vendor_mod": "raise ImportError('libvendor.so: cannot open shared object')\n"},
    )
    make_distribution(tmp_path, "vendor-missing", {"missing": "no_such_module_xyz:Plugin"}, {})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(RuntimeWarning) as caught:
        failures = clean_registry.register_installed_plugins([str(tmp_path)])
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "2 installed plugin(s) failed to load" in message
    assert "vendor-broken 1.2.3" in message and "libvendor.so" in message
    assert "vendor-missing 1.2.3" in message and "no_such_module_xyz" in message
    assert {r.name for r in failures} == {"BROKEN", "MISSING"}
    assert clean_registry.get_plugin("good").physical_chip_count() == 1
    with pytest.raises(PluginError, match="'BROKEN' from vendor-broken.*failed to load.*libvendor"):
        clean_registry.get_plugin("broken")


def test_an_entry_point_that_calls_sys_exit_is_a_broken_plugin_like_one_that_raises(
    clean_registry, tmp_path, monkeypatch
):
    make_good_distribution(tmp_path)
    make_distribution(
        tmp_path, "vendor-exits", {"exits": "exiting_vendor_mod:Plugin"},
        {"exiting_vendor_mod": "import sys\nsys.exit(3)\n"},
    )
    make_distribution(
        tmp_path, "vendor-exits-text", {"exits_text": "exiting_text_vendor_mod:Plugin"},
        {"exiting_text_vendor_mod": "raise SystemExit('no libvendor.so on this host')\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(RuntimeWarning) as caught:
        failures = clean_registry.register_installed_plugins([str(tmp_path)])
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "2 installed plugin(s) failed to load" in message
    assert "'exits' from vendor-exits 1.2.3" in message and "sys.exit(3)" in message
    assert "vendor-exits-text 1.2.3" in message and "no libvendor.so on this host" in message
    assert {r.name for r in failures} == {"EXITS", "EXITS_TEXT"}
    assert all(isinstance(r.error, SystemExit) for r in failures)
    assert clean_registry.get_plugin("good").physical_chip_count() == 1
    with pytest.raises(
        PluginError, match=r"'EXITS' from vendor-exits .*failed to load.*sys\.exit\(3\).*Reinstall"
    ) as info:
        clean_registry.get_plugin("exits")
    assert isinstance(info.value.__cause__, SystemExit)
    assert [r.name for r in clean_registry.records()][-2:] == ["EXITS", "EXITS_TEXT"]


def test_a_keyboard_interrupt_while_loading_plugins_still_stops_the_program(
    clean_registry, tmp_path, monkeypatch
):
    make_distribution(
        tmp_path, "vendor-interrupted", {"interrupted": "interrupted_vendor_mod:Plugin"},
        {"interrupted_vendor_mod": "raise KeyboardInterrupt\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        clean_registry.register_installed_plugins([str(tmp_path)])


def test_hand_registration_wins_over_discovery(clean_registry, tmp_path, monkeypatch):
    make_good_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = FakeAccelerator()
    clean_registry.register_plugin("good", mine)
    clean_registry.register_installed_plugins([str(tmp_path)])
    assert clean_registry.get_plugin("good") is mine


def test_unknown_pjrt_device_lists_installed_plugins_and_the_package(clean_registry, monkeypatch):
    clean_registry.register_plugin("host", FakeHost())
    clean_registry.register_plugin("fake", FakeAccelerator())
    monkeypatch.setenv("PJRT_DEVICE", "warp")
    with pytest.raises(PluginError) as info:
        clean_registry.active()
    message = str(info.value)
    assert "Unknown PJRT device 'warp'" in message
    assert "Installed plugins: FAKE, HOST" in message
    assert "pip install torch-xla-warp" in message


def test_pjrt_device_picks_a_plugin_case_insensitively(clean_registry, monkeypatch):
    clean_registry.register_plugin("host", FakeHost())
    clean_registry.register_plugin("fake", FakeAccelerator())
    monkeypatch.setenv("PJRT_DEVICE", "Host")
    assert clean_registry.active().name == "HOST"


def test_automatic_choice_prefers_priority_with_hardware_present_and_logs_once(
    clean_registry, caplog
):
    clean_registry.register_plugin("host", FakeHost())
    clean_registry.register_plugin("absent", FakeAccelerator(chips=0))
    clean_registry.register_plugin("fake", FakeAccelerator(chips=2))

    class Bigger(FakeAccelerator):
        priority = 99

    clean_registry.register_plugin("bigger_absent", Bigger(chips=0))
    with caplog.at_level(logging.WARNING, logger="torch_xla"):
        assert clean_registry.active().name == "FAKE"
        assert clean_registry.active().name == "FAKE"
    choices = [r for r in caplog.records if "PJRT_DEVICE is not set" in r.getMessage()]
    assert len(choices) == 1 and "FAKE" in choices[0].getMessage()


def test_automatic_choice_falls_back_to_the_host_plugin_last(clean_registry):
    clean_registry.register_plugin("host", FakeHost())
    clean_registry.register_plugin("absent", FakeAccelerator(chips=0))
    assert clean_registry.active().name == "HOST"


def test_no_plugin_at_all_says_what_to_install(clean_registry):
    with pytest.raises(PluginError, match="No PJRT device is available.*torch-xla-cpu"):
        clean_registry.active()


def test_records_order_is_priority_then_broken(clean_registry):
    clean_registry.register_plugin("host", FakeHost())
    clean_registry.register_plugin("fake", FakeAccelerator())
    assert [r.name for r in clean_registry.records()] == ["FAKE", "HOST"]


def test_import_registers_installed_plugins():
    result = run_python(
        "import torch_xla.plugins as p; print(sorted(r.name for r in p.records()))"
    )
    assert result.returncode == 0, result.stderr
    assert "CPU" in result.stdout


def test_importing_a_plugin_package_before_torch_xla_is_fine():
    result = run_python(
        "import torch_xla_cpu\n"
        "import torch_xla.plugins as p\n"
        "print(type(p.get_plugin('cpu')).__name__)",
        env={"PYTHONWARNINGS": "error"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "CpuPlugin"


def test_xla_register_installed_plugins_0_turns_discovery_off():
    result = run_python(
        "import torch_xla.plugins as p; print(sorted(r.name for r in p.records()))",
        env={"XLA_REGISTER_INSTALLED_PLUGINS": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_experimental_plugins_api_as_pytorch_xla_users_call_it():
    result = run_python(
        """
        import torch_xla.experimental.plugins as plugins
        from torch_xla_cpu import CpuPlugin
        plugins.use_dynamic_plugins()
        assert plugins.using_dynamic_plugins()
        plugins.register_plugin('CPU', CpuPlugin())
        import torch_xla.runtime as xr
        xr.set_device_type('CPU')
        print(type(plugins.default()).__name__, xr.device_type())
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["CpuPlugin", "CPU"]
