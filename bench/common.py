"""Shared timing for the side-by-side benchmarks: eager CPU, torch-xla, and the JAX floor."""

from __future__ import annotations

import time
from collections.abc import Callable


def steps_per_second(step: Callable[[], None], drain: Callable[[], None], warmup: int, steps: int):
    for _ in range(warmup):
        step()
    drain()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    drain()
    return steps / (time.perf_counter() - start)


def xla_host_cost(record: Callable[[], None], steps: int = 10) -> tuple[float, float, float]:
    """(ms recording forward+backward+optimizer, ms inside mark_step, us per recorded op),
    each measured with the device drained first so no device work is counted."""
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    rec, sync, ops = [], [], []
    for _ in range(steps):
        xm.wait_device_ops()
        created = met.counter_value("CreateXlaTensor") or 0
        t0 = time.perf_counter()
        record()
        t1 = time.perf_counter()
        xm.mark_step()
        t2 = time.perf_counter()
        xm.wait_device_ops()
        rec.append(t1 - t0)
        sync.append(t2 - t1)
        ops.append((met.counter_value("CreateXlaTensor") or 0) - created)
    rec_ms = 1e3 * sorted(rec)[len(rec) // 2]
    sync_ms = 1e3 * sorted(sync)[len(sync) // 2]
    n_ops = sorted(ops)[len(ops) // 2]
    return rec_ms, sync_ms, 1e3 * rec_ms / max(1, n_ops)


def report(name: str, eager: float, xla: float, floor: float, host: tuple) -> None:
    rec_ms, sync_ms, us_per_op = host
    print(
        f"{name}: eager-cpu {eager:.1f} steps/s | torch-xla {xla:.1f} steps/s | "
        f"jax-jit floor {floor:.1f} steps/s | xla/floor {xla / floor:.2f}x | "
        f"record {rec_ms:.1f} ms, mark_step {sync_ms:.2f} ms, {us_per_op:.1f} us/op"
    )


def measure_torch(base, make_optimizer, torch_step, x, y, steps: int):
    """Eager CPU and torch-xla steps/s, plus torch-xla host cost, for copies of `base`.

    `make_optimizer(params)` builds the optimizer; `torch_step(model, opt, x, y)` is one
    training step written in plain PyTorch.
    """
    import copy

    import torch_xla.core.xla_model as xm

    eager = copy.deepcopy(base)
    eager_opt = make_optimizer(eager.parameters())
    eager_sps = steps_per_second(lambda: torch_step(eager, eager_opt, x, y), lambda: None, 3, steps)

    device = xm.xla_device()
    model = copy.deepcopy(base).to(device)
    opt = make_optimizer(model.parameters())
    xd, yd = x.to(device), y.to(device)

    def xla_step():
        torch_step(model, opt, xd, yd)
        xm.mark_step()

    xla_sps = steps_per_second(xla_step, xm.wait_device_ops, 3, steps)
    host = xla_host_cost(lambda: torch_step(model, opt, xd, yd))
    return eager_sps, xla_sps, host
