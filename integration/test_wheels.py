"""Every package builds a wheel; core + CPU wheels install into a fresh venv and work there."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = pathlib.Path(__file__).parents[1]
TORCH = os.environ.get("TORCH_XLA_TEST_TORCH", "torch==2.13.0")


# package folder -> (distribution, import package, entry point or None)
PACKAGES = {
    "core": ("torch_xla_core", "torch_xla", None),
    "plugin-cpu": ("torch_xla_cpu", "torch_xla_cpu", "cpu = torch_xla_cpu:CpuPlugin"),
    "plugin-tpu": ("torch_xla_tpu", "torch_xla_tpu", "tpu = torch_xla_tpu:TpuPlugin"),
    "plugin-cuda": ("torch_xla_cuda", "torch_xla_cuda", "cuda = torch_xla_cuda:CudaPlugin"),
    "plugin-neuron": ("torch_xla_neuron", "torch_xla_neuron",
                      "neuron = torch_xla_neuron:NeuronPlugin"),
    "plugin-template": ("torch_xla_plugin_template", "torch_xla_plugin_template",
                        "template = torch_xla_plugin_template:TemplatePlugin"),
}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_package_builds_a_wheel_with_its_module_and_entry_point(package, tmp_path):
    distribution, module, entry_point = PACKAGES[package]
    wheel = build_wheel(package, tmp_path, distribution)
    names = zipfile.ZipFile(wheel).namelist()
    assert f"{module}/__init__.py" in names
    assert not any(n.startswith(("tests/", "src/")) for n in names), names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")] or [None]
    if entry_point is not None:
        text = zipfile.ZipFile(wheel).read(entry_points).decode()
        assert "[torch_xla.plugins]" in text and entry_point in text


def build_wheel(package: str, out: pathlib.Path, distribution: str | None = None
                ) -> pathlib.Path:
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(ROOT / "packages" / package)],
        check=True, capture_output=True, text=True,
    )
    distribution = distribution or PACKAGES[package][0]
    (wheel,) = out.glob(f"{distribution}-*.whl")
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
