"""What starting `xmp.spawn`'s processes costs, against what a fresh interpreter pays to import.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python bench/spawn_startup.py

`xmp.spawn` (start_method="spawn", the default) forks its children from a fork server that
has imported torch, jax and torch_xla once. Prints, in wall seconds:
- fresh import: a new interpreter importing `torch_xla.core.xla_model` and running one op
  (what every child paid when each was a fresh interpreter), median of 3, one at a time;
- the first spawn of a process (it starts the fork server) and the median of the next
  ones, each running a one-collective function on every device.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp

SPAWNS = 5
FRESH_IMPORT = (
    "import torch, torch_xla.core.xla_model as xm; "
    "(torch.ones(2, device=xm.xla_device()) + 1).cpu()"
)


def one_collective(index: int) -> float:
    value = torch.tensor([float(index)]).to(xm.xla_device())
    return xm.all_reduce(xm.REDUCE_SUM, value).cpu().item()


def fresh_import_s() -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", FRESH_IMPORT], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    print(f"fresh import and one op: {fresh_import_s():.1f} s per interpreter")
    times = []
    for _ in range(SPAWNS):
        start = time.perf_counter()
        results = xmp.spawn(one_collective)
        times.append(time.perf_counter() - start)
        world = len(results)
        assert set(results.values()) == {sum(range(world))}, results
    print(f"xmp.spawn of {world} processes: first {times[0]:.1f} s (starts the fork "
          f"server), then median {statistics.median(times[1:]):.1f} s")


if __name__ == "__main__":
    main()
