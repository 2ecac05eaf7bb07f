"""Host cost of keeping marked shardings through in-place updates (SPMD mode).

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python bench/spmd_kept_shardings.py

Trains the small GPT of bench/small_gpt.py wrapped in FSDPv2 (every parameter marked) with
SGD, and times `lazy.sharding.keep_annotations()` (what each `mark_step` runs first: the
optimizer's in-place updates gave the parameters new values, which get their constraint
back) in thread CPU time, with garbage collection off so a collection does not land in
the window. Prints the milliseconds per step and per marked tensor.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import small_gpt  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (  # noqa: E402
    SpmdFullyShardedDataParallel as FSDPv2,
)
from torch_xla.lazy import sharding  # noqa: E402

STEPS = 10


def main() -> None:
    xr.use_spmd()
    n = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(n), (n,), ("fsdp",))
    torch.manual_seed(0)
    model = FSDPv2(small_gpt.GPT().to("xla"), mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randint(0, 64, (16, 64)).to("xla")
    y = torch.randint(0, 64, (16, 64)).to("xla")
    marked = len(sharding._kept)
    gc.collect()
    gc.disable()
    times = []
    for step in range(STEPS + 2):
        opt.zero_grad()
        small_gpt.loss_of(model, x, y).backward()
        opt.step()
        start = time.thread_time()
        sharding.keep_annotations()
        if step >= 2:  # the first steps compile
            times.append(1e3 * (time.thread_time() - start))
        torch_xla.sync()
    gc.enable()
    median = statistics.median(times)
    print(f"spmd_kept_shardings: {n} devices, {marked} marked tensors: {median:.2f} ms per "
          f"step (median of {STEPS}; {1e3 * median / marked:.0f} us per tensor); "
          f"all: {' '.join(f'{t:.2f}' for t in times)}")


if __name__ == "__main__":
    main()
