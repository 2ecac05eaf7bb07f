"""transformers' `Trainer` on the xla device, unmodified, as PyTorch/XLA users run it
(accelerate's XLA path: `xm.set_replication`, `xm._fetch_gradients`, `xm.optimizer_step`,
`xm.mesh_reduce`, `xm._maybe_convert_to_cpu`, `MpDeviceLoader`, `xmp.spawn`). Reference:
the same job on the CPU (`USE_TORCH_XLA=0`), whose logged losses and gradient norms each
run must give (rtol 1e-4), and whose trained weights it must save."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

JOB = pathlib.Path(__file__).with_name("hf_trainer_job.py")


def _run(folder: pathlib.Path, batch: int, how: str, **env: str) -> dict:
    folder.mkdir()
    out = folder / "result.json"
    base = {k: v for k, v in os.environ.items() if k not in ("PJRT_DEVICE", "USE_TORCH_XLA")}
    done = subprocess.run([sys.executable, str(JOB), str(out), str(batch), how],
                          env={**base, **env}, capture_output=True, text=True, timeout=900,
                          check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(out.read_text())


def _same_log(got: dict, expected: dict) -> None:
    assert len(got["log"]) == len(expected["log"]) == 8  # 16 steps, logged every 2
    torch.testing.assert_close(torch.tensor(got["log"]), torch.tensor(expected["log"]),
                               rtol=1e-4, atol=0)


def _same_weights(got: dict, expected: dict) -> None:
    """AdamW divides each gradient by the root of its running square, so for a weight whose
    gradients stay near zero float rounding decides how far it steps: up to the learning
    rate (1e-3) a step, however small the rounding. XLA's CPU code and PyTorch's kernels
    round differently, and differently on different CPUs (one of 16384 elements of a
    tensor moved 2.6e-5 apart on an AVX-512/AMX host, none on the host before). So every
    element must be within a tenth of one step (1e-4) and all but one in a thousand of
    each tensor within rtol 1e-4, atol 1e-5."""
    ours, cpu = load_file(got["weights"]), load_file(expected["weights"])
    assert sorted(ours) == sorted(cpu)
    for name in cpu:
        torch.testing.assert_close(ours[name], cpu[name], rtol=0, atol=1e-4)
        far = (~torch.isclose(ours[name], cpu[name], rtol=1e-4, atol=1e-5)).sum().item()
        assert far <= cpu[name].numel() // 1000, f"{name}: {far} elements differ"


@pytest.fixture(scope="module")
def cpu(tmp_path_factory) -> dict:
    """The reference: one process on the CPU, batches of 8."""
    return _run(tmp_path_factory.mktemp("trainer") / "cpu", 8, "single", USE_TORCH_XLA="0")


def test_trainer_on_the_xla_device_trains_as_on_the_cpu(tmp_path, cpu):
    xla = _run(tmp_path / "xla", 8, "single", PJRT_DEVICE="CPU")
    assert cpu["device"] == "cpu" and xla["device"] == "xla:0"
    assert xla["tied"] and cpu["tied"]  # the head still shares the embedding's weight
    _same_log(xla, cpu)
    _same_weights(xla, cpu)


def test_trainer_on_two_spawned_processes_trains_as_one_cpu_process_on_both_batches(tmp_path,
                                                                                    cpu):
    """Each process takes every other batch of 4 of the one shuffled order (accelerate's
    sharding), so a step of 2 processes sees the 8 samples of the CPU's step of 8: the
    gradients must be averaged over the processes for the losses to agree."""
    xla = _run(tmp_path / "xla", 4, "spawn", PJRT_DEVICE="CPU", CPU_NUM_DEVICES="2")
    assert xla["processes"] == 2
    _same_log(xla, cpu)
    _same_weights(xla, cpu)
