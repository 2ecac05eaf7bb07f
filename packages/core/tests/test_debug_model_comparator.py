"""`torch_xla.debug.model_comparator`: a model's intermediate tensors saved from a CPU run
and an XLA run, then compared. Reference: the CPU run (float32 ops in another order
agree to 1e-3 through a small conv net)."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import run_python
from torch import nn

import torch_xla
import torch_xla.debug.model_comparator as mc


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(1, 4, 3)
        self.fc = nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        mc.save(None, x)  # named after this line
        x = torch.relu(self.conv(x))
        mc.save("conv", x)
        x = self.fc(x.flatten(1))
        return mc.save("out", x)


@pytest.fixture(autouse=True)
def unconfigured():
    yield
    mc.configure(None)


def test_a_cpu_run_and_an_xla_run_compare_equal_and_differences_are_reported(tmp_path):
    cpu_dir, xla_dir = str(tmp_path / "cpu"), str(tmp_path / "xla")
    os.mkdir(cpu_dir)
    os.mkdir(xla_dir)
    x = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    mc.configure(cpu_dir)
    want = Net()(x)
    mc.configure(xla_dir)
    got = Net().to(torch_xla.device())(x.to(torch_xla.device()))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    names = sorted(os.listdir(xla_dir))
    assert names == sorted(os.listdir(cpu_dir)) == [
        "conv.0", "out.0", "test_debug_model_comparator.py.l26.0"]
    assert mc.compare(cpu_dir, xla_dir, rtol=1e-3, atol=1e-3) == ""

    torch.save(torch.zeros(2, 5), os.path.join(xla_dir, "out.0"))
    os.remove(os.path.join(xla_dir, "conv.0"))
    report = mc.compare(cpu_dir, xla_dir, max_diffs=3)
    assert f"Mismatch: conv.0 not in {xla_dir}\n" in report
    assert 'Changes in saved tensor "out" with id=0\n' in report
    assert report.count("  [") == 3 and "  ... aborting after 3 differences" in report
    assert mc.main([cpu_dir, xla_dir]) == 1 and mc.main([cpu_dir, cpu_dir]) == 0


def test_unconfigured_save_does_nothing_and_steps_get_folders(tmp_path, monkeypatch):
    t = torch.ones(3)
    assert mc.save("x", t) is t and not any(tmp_path.iterdir())
    monkeypatch.setenv("MODELCMP_SAVEDIR", str(tmp_path))
    mc.save("x", t, step=1)
    mc.save("x", t, step=1)
    mc.save("x", t, step=2)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.*")) == [
        "step-1/x.0", "step-1/x.1", "step-2/x.0"]
    assert mc.compare_tensors(torch.ones(2), torch.ones(3)) == (
        "Tensors have different shape: [2] vs. [3]\n")
    assert mc.compare_tensors(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.0, 2.5]])) == (
        "[0, 1]: 2.0 vs. 2.5\n")


def test_the_command_line_prints_the_report_and_fails_on_differences(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    torch.save(torch.ones(2), tmp_path / "a" / "t.0")
    torch.save(torch.ones(2) * 2, tmp_path / "b" / "t.0")
    done = run_python(f"""
        import sys, torch_xla.debug.model_comparator as mc
        sys.exit(mc.main([{str(tmp_path / 'a')!r}, {str(tmp_path / 'b')!r}]))
    """, {"PJRT_DEVICE": "CPU"})
    assert done.returncode == 1
    assert 'Changes in saved tensor "t" with id=0' in done.stderr
