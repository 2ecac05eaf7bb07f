"""The `torch-xla plugins` listing."""

import shutil
import subprocess
import sys

from conftest import run_python


def test_plugins_listing_shows_plugins_hardware_and_choice():
    result = run_python(
        "from torch_xla.cli import main; raise SystemExit(main(['plugins', '--devices']))",
        env={"CPU_NUM_DEVICES": "2"},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "cpu  (torch-xla-cpu" in out
    assert "library:  built into jaxlib (platform 'cpu')" in out
    assert "chips:    2" in out and "hardware: present" in out
    assert "Chosen device: CPU (automatic, PJRT_DEVICE unset)" in out
    assert "xla:0  cpu" in out and "xla:1  cpu" in out


def test_module_entry_point_and_console_script_agree():
    module = subprocess.run(
        [sys.executable, "-m", "torch_xla.plugins"], capture_output=True, text=True, timeout=120
    )
    assert module.returncode == 0, module.stderr
    script = shutil.which("torch-xla", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert script is not None, "the torch-xla console script is not installed"
    console = subprocess.run([script, "plugins"], capture_output=True, text=True, timeout=120)
    assert console.returncode == 0, console.stderr
    assert module.stdout == console.stdout


def test_listing_with_unknown_device_says_so_and_fails_to_start():
    result = run_python(
        "from torch_xla.cli import main; raise SystemExit(main(['plugins', '--devices']))",
        env={"PJRT_DEVICE": "nope"},
    )
    assert result.returncode == 1
    assert "Chosen device: none. Unknown PJRT device 'nope'" in result.stdout
    assert "Cannot start the chosen device" in result.stderr
