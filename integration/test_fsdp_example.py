"""examples/train_digits_fsdp.py: FSDP over two processes on the CPU plugin, its shards
consolidated into a checkpoint that a plain CPU model loads and evaluates."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import torch

EXAMPLES = pathlib.Path(__file__).parents[1] / "examples"


def test_fsdp_trains_digits_and_its_consolidated_checkpoint_is_a_plain_model(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"},
           "CPU_NUM_DEVICES": "2"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "train_digits_fsdp.py"), "--num_epochs", "4",
         "--flatten_parameters", "--target_accuracy", "90"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "2 processes" in result.stdout
    losses = [float(x) for x in re.findall(r"epoch \d+: train loss ([\d.]+)", result.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0]
    accuracy = float(re.search(r"consolidated model: ([\d.]+)%", result.stdout).group(1))
    assert accuracy >= 90.0
    shards = sorted(p.name for p in (tmp_path / "digits-fsdp").iterdir())
    assert shards == ["ckpt_consolidated.pth", "ckpt_rank-00000000-of-00000002.pth",
                      "ckpt_rank-00000001-of-00000002.pth"]
    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_digits import DigitsCNN
    finally:
        sys.path.remove(str(EXAMPLES))
    state = torch.load(tmp_path / "digits-fsdp" / "ckpt_consolidated.pth")["model"]
    assert sorted(state) == sorted(DigitsCNN().state_dict())
