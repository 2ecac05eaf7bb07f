"""How many NVIDIA GPUs this host has, asked of the driver, never of a PJRT client."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

from torch_xla.plugins import env_int

NUM_DEVICES_ENV = "GPU_NUM_DEVICES"
DRIVER_GPUS = "/proc/driver/nvidia/gpus"  # one directory per GPU the driver manages
NVIDIA_SMI_TIMEOUT = 10.0  # seconds; `nvidia-smi -L` normally answers in well under one

logger = logging.getLogger("torch_xla")


def count_gpus(driver_gpus: str = DRIVER_GPUS, nvidia_smi: str = "nvidia-smi") -> int:
    """`GPU_NUM_DEVICES` if set, else the driver's GPUs, limited to `CUDA_VISIBLE_DEVICES`."""
    count = env_int(NUM_DEVICES_ENV, None, minimum=0)
    if count is not None:
        return count
    found = driver_gpu_count(driver_gpus, nvidia_smi)
    visible = visible_device_count()
    return found if visible is None else min(found, visible)


def driver_gpu_count(driver_gpus: str = DRIVER_GPUS, nvidia_smi: str = "nvidia-smi") -> int:
    """GPUs listed by the loaded driver in /proc, else by `nvidia-smi -L`, else 0."""
    if os.path.isdir(driver_gpus):
        return len(os.listdir(driver_gpus))
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return 0
    try:
        done = subprocess.run(
            [executable, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.warning("Counting GPUs with %s -L failed (%s); assuming none.", executable, error)
        return 0
    if done.returncode != 0:
        logger.warning(
            "%s -L exited with %d (%s); assuming no GPU.",
            executable,
            done.returncode,
            done.stderr.strip() or done.stdout.strip(),
        )
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def visible_device_count() -> int | None:
    """Entries of `CUDA_VISIBLE_DEVICES`, or None when it is unset (all GPUs visible)."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return None
    return len([entry for entry in text.split(",") if entry.strip()])
