"""Peak host memory of xm.save against torch_xla.utils.serialization.save.

Each method runs in its own process on a model of about 400 MB (ten 40 MB
tensors), moved to the XLA device and synchronised before saving. We report
how far the process's resident memory, sampled every millisecond during the
save, rises above its size at the start of the save. On the CPU plugin device
memory is host memory too; the baseline already holds it. Linux only
(/proc/self/statm).

    python bench/serialization_memory.py [--megabytes 400]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap

CHILD = """
import os, sys, threading, time, torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

megabytes, method, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
device = xm.xla_device()
per_tensor = megabytes * 2**20 // 10 // 4
state = {{f"layer{{i}}.weight": torch.randn(per_tensor, device=device) for i in range(10)}}
xm.mark_step()
xm.wait_device_ops()
page = os.sysconf("SC_PAGE_SIZE")

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page

peak, done = [rss()], threading.Event()

def sample():  # the resident size, every millisecond, while the save runs
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)

before = rss()
sampler = threading.Thread(target=sample)
sampler.start()
(xm.save if method == "xm.save" else xser.save)(state, path)
done.set()
sampler.join()
print((max(peak[0], rss()) - before) / 2**20)
"""


def peak_growth_mb(method: str, megabytes: int) -> float:
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(CHILD.format()),
                str(megabytes),
                method,
                f"{folder}/ckpt",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=400)
    args = parser.parse_args()
    for method in ("xm.save", "xser.save"):
        growth = peak_growth_mb(method, args.megabytes)
        print(f"{method:10s} model {args.megabytes} MB: peak host memory grew {growth:7.1f} MB")


if __name__ == "__main__":
    main()
