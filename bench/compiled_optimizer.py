"""The optimizer step under `torch.compile(backend='openxla')`: six ways to run AdamW
after a compiled forward and backward (the small GPT of `small_gpt.py`).

    python bench/compiled_optimizer.py [--steps 10] [--windows 5]

- **lazy**: `opt.step()` recorded op by op, run by the step's `torch_xla.sync()` (the
  dynamo mode of `small_gpt.py`);
- **lazy, capturable**: the same with `AdamW(capturable=True)` (step counts on the device);
- **lazy, fused**: the same with `AdamW(fused=True)`, recorded as one op
  (`backend/optimizer_ops.py`);
- **lazy, foreach=False**: the same with torch's single-tensor loop (in-place ops on each
  parameter, `backend/in_place.py`);
- **compiled**: `torch.compile(opt.step, backend='openxla')`. AdamW keeps its step counts
  on the CPU: the CPU ops run first and feed the program their results;
- **compiled, capturable**: the same with `capturable=True`: one program per step.

Interleaved windows as in `common.py`; for each way it prints steps/s (median window),
the host time of `opt.step()` alone with the device drained before it (on the CPU
plugin it includes running a compiled step's program: host and device share the cores),
and per step the programs run, the syncs made before a compiled call to compute pending
arguments, and the engine tensors made. The last losses must agree.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
from common import WARMUP, Mode, parse_args
from small_gpt import BATCH, LR, WD, T, loss_of, seeded_batch_and_model

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

WAYS = {  # name: (compile the step, AdamW's keyword arguments)
    "lazy": (False, {}),
    "lazy, capturable": (False, {"capturable": True}),
    "lazy, fused": (False, {"fused": True}),
    "lazy, foreach=False": (False, {"foreach": False}),
    "compiled": (True, {}),
    "compiled, capturable": (True, {"capturable": True}),
}


def counts() -> tuple:
    return (met.metric_data("ExecuteTime")[0] if met.metric_data("ExecuteTime") else 0,
            met.counter_value("DynamoSyncInputExecuteTime") or 0,
            met.counter_value("CreateXlaTensor") or 0)


def way(base, x, y, compiled_step: bool, options: dict):
    device = torch_xla.device()
    model = copy.deepcopy(base).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, **options)
    xd, yd = x.to(device), y.to(device)
    forward = torch.compile(lambda a, b: loss_of(model, a, b), backend="openxla")
    opt_step = torch.compile(opt.step, backend="openxla") if compiled_step else opt.step
    timed = []

    def step():
        opt.zero_grad()
        loss = forward(xd, yd)
        loss.backward()
        opt_step()
        torch_xla.sync()
        return loss

    def host_time():  # opt.step() alone, the device drained first
        opt.zero_grad()
        forward(xd, yd).backward()
        xm.wait_device_ops()
        start = time.perf_counter()
        opt_step()
        timed.append(time.perf_counter() - start)
        torch_xla.sync()
        xm.wait_device_ops()

    return Mode(step, xm.wait_device_ops, xla=True), host_time, timed


def main() -> None:
    args = parse_args()
    x, y, base = seeded_batch_and_model()
    ways = {name: way(base, x, y, *how) for name, how in WAYS.items()}
    for mode, _, _ in ways.values():
        mode.warm_up()
    per_step = {}
    for _ in range(args.windows):
        for name, (mode, _, _) in ways.items():
            before = counts()
            mode.window(args.steps)
            after = counts()
            per_step.setdefault(name, []).append(
                [(b - a) / args.steps for a, b in zip(before, after, strict=True)])
    for _, host_time, _ in ways.values():
        for _ in range(args.steps):
            host_time()
    losses = {name: float(mode.last.item()) for name, (mode, _, _) in ways.items()}
    print(f"AdamW after a compiled forward and backward, small GPT (batch {BATCH}, T {T}), "
          f"{args.windows} windows of {args.steps} steps + {WARMUP} warm-up per way:")
    for name, (mode, _, timed) in ways.items():
        programs, syncs, tensors = (statistics.median(c) for c in zip(*per_step[name],
                                                                         strict=True))
        print(f"  {name:21s} {statistics.median(mode.rates):5.1f} steps/s | opt.step "
              f"{1e3 * statistics.median(timed):5.2f} ms | per step: {programs:.0f} programs, "
              f"{syncs:.0f} argument syncs, {tensors:.0f} engine tensors | "
              f"loss {losses[name]:.6f}")
    spread = max(losses.values()) - min(losses.values())
    if spread > 1e-3 * max(abs(v) for v in losses.values()):
        print(f"  WARNING: the last losses differ by {spread:.2e}")


if __name__ == "__main__":
    main()
