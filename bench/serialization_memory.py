"""Peak host memory of a checkpoint save: xm.save against torch_xla.utils.serialization.

Each method runs in its own fresh process. The process builds a model of about
`--megabytes` MB (`--layers` square Linear layers) one layer at a time on the CPU,
moves each layer to the xla device, synchronises, collects garbage and returns
freed heap memory to the system (`malloc_trim`), so the baseline holds only live
data and allocator reuse cannot hide what the save needs. Right before the save
it resets the kernel's resident-memory high-water mark (`/proc/self/clear_refs`,
Linux >= 4.0) and reads the resident size; after the save, the high-water mark
minus that baseline is the save's own peak. `ru_maxrss` (the process's lifetime
peak, which cannot be reset) is printed too: building the model one layer at a
time keeps the setup's peak low, so it is meaningful when the save's peak is larger.

On the CPU plugin the device buffers are host memory as well, and are part of
the baseline. Linux only.

    python bench/serialization_memory.py [--megabytes 400] [--layers 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

METHODS = ("xm.save", "xser.save", "torch.save (CPU model)")

CHILD = r"""
import ctypes, gc, json, math, os, resource, sys, time
import torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

megabytes, layers, method, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
MB = 2**20


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise KeyError(field)


def settle():
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


width = int(math.sqrt(megabytes * MB / 4 / layers))
device = "cpu" if method.startswith("torch.save") else xm.xla_device()
torch.manual_seed(0)
model = torch.nn.Sequential()
for i in range(layers):  # one layer at a time: the setup never holds two copies of the model
    model.append(torch.nn.Linear(width, width).to(device))
    if device != "cpu":
        xm.mark_step()
        xm.wait_device_ops()
state = model.state_dict()
model_bytes = sum(t.numel() * t.element_size() for t in state.values())
largest = max(t.numel() * t.element_size() for t in state.values())
settle()

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the high-water mark restarts from the current resident size
baseline = status("VmRSS")
start = time.perf_counter()
if method == "xm.save":
    xm.save(state, path)
elif method == "xser.save":
    xser.save(state, path)
else:
    torch.save(state, path)
seconds = time.perf_counter() - start
print(json.dumps({
    "method": method,
    "model_mb": model_bytes / MB,
    "largest_tensor_mb": largest / MB,
    "baseline_mb": baseline / MB,
    "save_peak_growth_mb": (status("VmHWM") - baseline) / MB,
    "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB,
    "seconds": seconds,
}))
"""


def measure(method: str, megabytes: int, layers: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(megabytes), str(layers), method, f"{folder}/ckpt"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=400)
    parser.add_argument("--layers", type=int, default=8)
    args = parser.parse_args()
    print("method                  model MB  largest MB  baseline MB  save peak MB  "
          "ru_maxrss MB  seconds")
    for method in METHODS:
        r = measure(method, args.megabytes, args.layers)
        print(f"{method:22s} {r['model_mb']:9.1f} {r['largest_tensor_mb']:11.1f} "
              f"{r['baseline_mb']:12.1f} {r['save_peak_growth_mb']:13.1f} "
              f"{r['ru_maxrss_mb']:13.1f} {r['seconds']:8.2f}")


if __name__ == "__main__":
    main()
