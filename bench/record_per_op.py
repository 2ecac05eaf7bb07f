"""Host cost of recording one op: 200 x `(y @ w).relu() * 0.5 + 1.0` on xla:0, median of 15.

    python bench/record_per_op.py
"""

from __future__ import annotations

import time

import torch

import torch_xla.core.xla_model as xm

OPS_PER_ROUND = 4 * 200


def main() -> None:
    device = xm.xla_device()
    x = torch.ones(64, 64, device=device)
    w = torch.ones(64, 64, device=device, requires_grad=True)
    xm.mark_step()

    def record() -> torch.Tensor:
        y = x
        for _ in range(200):
            y = (y @ w).relu() * 0.5 + 1.0
        return y

    for _ in range(3):
        record()
        xm.mark_step()
    times = []
    for _ in range(15):
        start = time.perf_counter()
        record()
        times.append(time.perf_counter() - start)
        xm.mark_step()
    print(f"record_per_op: {1e6 * sorted(times)[len(times) // 2] / OPS_PER_ROUND:.1f} us/op")


if __name__ == "__main__":
    main()
