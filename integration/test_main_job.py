"""The README's main job: examples/train_digits.py on the default plugin."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import torch

EXAMPLE = pathlib.Path(__file__).parents[1] / "examples" / "train_digits.py"


def run(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, env=env,
        cwd=cwd, timeout=900, check=False,
    )


def test_trains_digits_to_at_least_95_percent_and_checkpoints(tmp_path):
    result = run("--num_epochs", "6", "--checkpoint", "digits.pt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "training on xla:0 (CPU)" in result.stdout
    assert "epoch 6 [" in result.stderr  # the progress bar
    epochs = re.findall(r"epoch (\d+): train loss ([\d.]+), held-out accuracy ([\d.]+)%",
                        result.stdout)
    assert [int(e[0]) for e in epochs] == [1, 2, 3, 4, 5, 6]
    assert float(epochs[-1][1]) < float(epochs[0][1])  # the loss went down
    final = float(re.search(r"final held-out accuracy: ([\d.]+)%", result.stdout).group(1))
    assert final >= 95.0, result.stdout
    state = torch.load(tmp_path / "digits.pt")
    assert state["conv1.weight"].device.type == "cpu"
    assert state["conv1.weight"].shape == (16, 1, 3, 3)


def test_fake_data_runs_like_pytorch_xla_examples(tmp_path):
    result = run("--fake_data", "--num_epochs", "1", "--checkpoint", "fake.pt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "epoch 1: train loss" in result.stdout
    assert (tmp_path / "fake.pt").exists()
