"""Build the core and CPU wheels, install them into a fresh venv, run discovery there."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv

import pytest

ROOT = pathlib.Path(__file__).parents[1]
TORCH = os.environ.get("TORCH_XLA_TEST_TORCH", "torch==2.13.0")


def build_wheel(package: str, out: pathlib.Path) -> pathlib.Path:
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(ROOT / "packages" / package)],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = out.glob(f"torch_xla_{package.removeprefix('plugin-')}-*.whl")
    return wheel


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("wheels")
    wheels = [build_wheel("core", root), build_wheel("plugin-cpu", root)]
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", TORCH, *map(str, wheels)],
        check=True, capture_output=True, text=True, timeout=1200,
    )
    return env_dir


def test_wheels_have_the_declared_names(fresh_venv):
    python = fresh_venv / "bin" / "python"
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout
    assert "torch-xla-core==0.1.0" in out and "torch-xla-cpu==0.1.0" in out


def test_discovery_command_runs_from_the_installed_wheels(fresh_venv):
    env = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "PYTHONPATH")}
    result = subprocess.run(
        [str(fresh_venv / "bin" / "torch-xla"), "plugins", "--devices"],
        capture_output=True, text=True, env=env, timeout=300, cwd=fresh_venv,
    )
    assert result.returncode == 0, result.stderr
    assert "cpu  (torch-xla-cpu 0.1.0 (torch_xla_cpu:CpuPlugin))" in result.stdout
    assert "Chosen device: CPU" in result.stdout
    assert "xla:0  cpu" in result.stdout
    site = subprocess.run(
        [str(fresh_venv / "bin" / "python"), "-c", "import torch_xla; print(torch_xla.__file__)"],
        capture_output=True, text=True, env=env, cwd=fresh_venv,
    ).stdout
    assert str(fresh_venv) in site, f"torch_xla imported from outside the venv: {site}"
