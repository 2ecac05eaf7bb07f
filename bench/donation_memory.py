"""Peak memory of a training step with and without buffer donation.

A sync that overwrites parameters and optimizer state (`p.add_`, AdamW's moments)
donates their old buffers to the program, so XLA writes the new values into them
(`XLA_ENABLE_PARAM_ALIASING`, on by default). Without donation the step holds the
old and the new copies at once.

Each setting runs in its own fresh process: a stack of `--layers` square Linear
layers of about `--megabytes` MB in all, trained with AdamW (so parameters plus state
are three times that). The first steps compile and create the optimizer state; the
measured steps run cached programs. Two figures per setting:

- device peak: on a device whose PJRT client reports memory statistics (GPU, TPU),
  `peak_bytes_in_use` after the measured steps minus `bytes_in_use` before them.
- host peak: on the CPU plugin device buffers are host memory, so the kernel's
  resident-memory high-water mark (`VmHWM`, reset through `/proc/self/clear_refs`
  before the measured steps, Linux only) minus the resident size before them.

`live` is the bytes of all live jax arrays after the steps (`jax.live_arrays()`).

    python bench/donation_memory.py [--megabytes 256] [--layers 8] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import ctypes, gc, json, math, sys
import jax
import torch
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

megabytes, layers, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
MB = 2**20


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise KeyError(field)


def settle():
    xm.wait_device_ops()
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def device_stats():
    stats = jax.devices()[0].memory_stats()
    return stats or {}


width = int(math.sqrt(megabytes * MB / 4 / layers))
device = xm.xla_device()
torch.manual_seed(0)
model = torch.nn.Sequential()
for i in range(layers):  # one layer at a time: the setup never holds two copies
    model.append(torch.nn.Linear(width, width, bias=False).to(device))
    xm.mark_step()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(8, width).to(device)


def step():
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    xm.mark_step()


for _ in range(3):  # compiles; creates the state; then the steady-state program
    step()
settle()
aliases = met.metric_data("InputOutputAliasCount")  # donated inputs, per compiled graph
donated = None if aliases is None else [int(v) for _, v in aliases[2]]
met.clear_all()
before_device = device_stats().get("bytes_in_use")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current resident size
before = status("VmRSS")
for _ in range(steps):
    step()
xm.wait_device_ops()
peak_device = device_stats().get("peak_bytes_in_use")
print(json.dumps({
    "host_peak_mb": (status("VmHWM") - before) / MB,
    "device_peak_mb": None if before_device is None or peak_device is None
    else (peak_device - before_device) / MB,
    "live_mb": sum(a.nbytes for a in jax.live_arrays()) / MB,
    "params_mb": sum(p.numel() * 4 for p in model.parameters()) / MB,
    "compiles": met.counter_value("UncachedCompile") or 0,  # in the measured steps
    "donated": donated,
    "device": str(jax.devices()[0].device_kind),
}))
"""


def run(aliasing: str, args: argparse.Namespace) -> dict:
    env = {**os.environ, "XLA_ENABLE_PARAM_ALIASING": aliasing}
    done = subprocess.run([sys.executable, "-c", CHILD, str(args.megabytes), str(args.layers),
                           str(args.steps)], env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"XLA_ENABLE_PARAM_ALIASING={aliasing} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=256, help="parameter bytes, MB")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="measured steps")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    figures = {label: run(value, args) for label, value in (("donation", "1"),
                                                             ("no donation", "0"))}
    print(f"AdamW step, {args.layers} Linear layers, "
          f"{figures['donation']['params_mb']:.0f} MB of parameters "
          f"(+2x state), {args.steps} measured steps, device {figures['donation']['device']}")
    print(f"{'':14}{'host peak MB':>14}{'device peak MB':>16}{'live MB':>10}"
          f"  donated inputs per graph (compiles while measured)")
    for label, f in figures.items():
        device = "n/a" if f["device_peak_mb"] is None else f"{f['device_peak_mb']:.0f}"
        print(f"{label:14}{f['host_peak_mb']:14.0f}{device:>16}{f['live_mb']:10.0f}"
              f"  {f['donated']} ({f['compiles']})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
