"""Host cost of recording one op: 200 x `(y @ w).relu() * 0.5 + 1.0` on xla:0, median of 15.

    python bench/record_per_op.py           # the arithmetic chain above
    python bench/record_per_op.py --index   # 800 x `y = y[idx]` (the index rule's cost)

Prints the wall-clock time per op and the recording thread's CPU time per op; on a
machine shared with other jobs the CPU time is the steadier of the two.
"""

from __future__ import annotations

import sys
import time

import torch

import torch_xla.core.xla_model as xm

OPS_PER_ROUND = 4 * 200


def main() -> None:
    device = xm.xla_device()
    x = torch.ones(64, 64, device=device)
    w = torch.ones(64, 64, device=device, requires_grad=True)
    xm.mark_step()

    idx = torch.arange(64, device=device)
    index = "--index" in sys.argv[1:]

    def record() -> torch.Tensor:
        y = x
        if index:
            for _ in range(OPS_PER_ROUND):
                y = y[idx]
            return y
        for _ in range(200):
            y = (y @ w).relu() * 0.5 + 1.0
        return y

    for _ in range(3):
        record()
        xm.mark_step()
    wall, cpu = [], []
    for _ in range(15):
        start, start_cpu = time.perf_counter(), time.thread_time()
        record()
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
        xm.mark_step()
    label = "record_per_op (index)" if index else "record_per_op"
    print(f"{label}: {_per_op(wall):.1f} us/op (thread CPU time {_per_op(cpu):.1f} us/op)")


def _per_op(seconds: list[float]) -> float:
    """Median microseconds per recorded op."""
    return 1e6 * sorted(seconds)[len(seconds) // 2] / OPS_PER_ROUND


if __name__ == "__main__":
    main()
