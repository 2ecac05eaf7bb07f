"""Host memory that reading device tensors leaves behind, way by way.

Each way runs in its own fresh process, which puts `--tensors` tensors of `--megabytes`
MB each on the xla device, synchronises, returns freed heap memory to the system
(`malloc_trim`, with glibc serving every allocation of 1 MB or more from its own
mapping) and resets the kernel's resident-memory high-water mark. Then it reads every
tensor to the host in one way, dropping each host copy, and reports:

- retained: resident memory after the reads (garbage collected, heap trimmed) minus
  before, while the device tensors still live: what the reads left behind. Expected 0.
- peak: the high-water mark minus before. Expected about one tensor.
- after delete: the same as retained once the device tensors are deleted too. Memory
  that goes with them was held on them (a cached host copy); memory that stays was
  kept elsewhere. On the CPU plugin deleting them frees their buffers, which are host
  memory, so the figure goes below zero by their size.

The ways: `.cpu()`, `.detach().to("cpu")`, `torch.save` of each `.cpu()` copy to a file,
`torch_xla.utils.serialization.save` (which moves and writes one tensor at a time), and
the same save without its first step (running pending computations). On the CPU plugin
device buffers are host memory too, so the figures are about the copies alone there as
well. Written to find out where, on an H200, `xser.save` kept a host copy of every tensor
it wrote (docs/performance.md, "Checkpoint memory"). Linux only.

    python bench/host_read_retention.py [--megabytes 16] [--tensors 6] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

WAYS = ("cpu", "detach_to", "torch_save", "xser", "xser_no_pending")

CHILD = r"""
import ctypes, gc, json, os, sys, tempfile
import torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

way, megabytes, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def settle():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


device = xm.xla_device()
state = {f"t{i}": torch.full((megabytes * 2**18,), float(i)).to(device) for i in range(count)}
xm.mark_step()
xm.wait_device_ops()
settle()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS")
folder = tempfile.mkdtemp()


def each(read):  # a loop in a function: no loop variable keeps the last tensor alive
    for name, t in state.items():
        read(name, t)


if way == "cpu":
    each(lambda name, t: t.cpu())
elif way == "detach_to":
    each(lambda name, t: t.detach().to("cpu"))
elif way == "torch_save":
    each(lambda name, t: torch.save(t.cpu(), os.path.join(folder, name)))
else:
    if way == "xser_no_pending":
        xser.compute_pending = lambda data: None
    xser.save(state, os.path.join(folder, "ckpt"))
peak = status("VmHWM") - before
settle()
retained = status("VmRSS") - before
kind = xm.xla_device_hw(device)
state.clear()  # the device tensors go: what the reads left on them goes too
settle()
print(json.dumps({"retained_mb": round(retained, 1), "peak_mb": round(peak, 1),
                  "after_delete_mb": round(status("VmRSS") - before, 1), "kind": kind}))
"""


def run(way: str, args: argparse.Namespace) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}
    done = subprocess.run([sys.executable, "-c", CHILD, way, str(args.megabytes),
                           str(args.tensors)], env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=16, help="size of each tensor, MB")
    parser.add_argument("--tensors", type=int, default=6)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    results = {way: run(way, args) for way in WAYS}
    first = next((r for r in results.values() if "kind" in r), {})
    print(f"host memory left by reading {args.tensors} tensors of {args.megabytes} MB "
          f"({first.get('kind', '?')}), MB:")
    print(f"  {'way':<18} {'retained':>9} {'peak':>7} {'after delete':>13}")
    for way, r in results.items():
        if "error" in r:
            print(f"  {way:<18} failed: {r['error']}")
        else:
            print(f"  {way:<18} {r['retained_mb']:>9.1f} {r['peak_mb']:>7.1f} "
                  f"{r['after_delete_mb']:>13.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
