"""Host reads in the middle of a step: what a `.item()` costs in lazy mode, beside eager.

    python bench/host_reads.py [--windows 5] [--steps 20] [--lbfgs-steps 3] [--constant-lr]

Two programs that read values on the host before the step's sync:

- **L-BFGS**: one `torch.optim.LBFGS` step with its defaults (20 inner iterations, each
  with several host reads: the stopping tests, `float(loss)`, the two-loop recursion's
  `alpha=-al[i]`) on a tanh regression (a 6x4 weight and a 6x1 bias, float32). Timed
  per step (the first step compiles; the next ones show the steady state), with the
  programs compiled and run.
- **MLP, loss read before backward**: a training step of a 784-256-256-10 MLP (batch 64,
  SGD with a step-decay learning-rate schedule, `--constant-lr` without) that reads
  `loss.item()`
  before `backward()`, against the same step reading it after the sync, and eager CPU.
  Steps/s as the median of interleaved windows (`common.py`); programs run per step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def _counts() -> tuple[int, int]:
    compiles = met.counter_value("UncachedCompile") or 0
    runs = (met.metric_data("ExecuteTime") or (0,))[0]
    return compiles, runs


def lbfgs(device: torch.device, steps: int = 3) -> list[tuple[float, int, int]]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(6, 4, generator=gen).to(device).requires_grad_(),
              torch.randn(6, 1, generator=gen).to(device).requires_grad_()]
    opt = torch.optim.LBFGS(params)
    rows = []
    for k in range(steps):
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(k)).to(device)

        def closure(x=x):
            opt.zero_grad()
            loss = (params[0] @ x + params[1]).tanh().square().sum()
            loss.backward()
            return loss

        met.clear_all()
        start = time.perf_counter()
        opt.step(closure)
        if device.type == "xla":
            xm.mark_step()
            xm.wait_device_ops()
        rows.append((time.perf_counter() - start, *_counts()))
    return rows


def mlp_steps(device: torch.device, read_before_backward: bool, scheduled: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    schedule = torch.optim.lr_scheduler.StepLR(opt, 10, gamma=0.9 if scheduled else 1.0)
    x = torch.randn(64, 784).to(device)
    y = torch.randint(0, 10, (64,)).to(device)
    xla = device.type == "xla"
    seen = []

    def step():
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        if read_before_backward:
            seen.append(loss.item())
        loss.backward()
        opt.step()
        schedule.step()
        if xla:
            torch_xla.sync()
        if not read_before_backward:
            seen.append(loss.item())

    def drain():
        if xla:
            xm.wait_device_ops()

    return step, drain, seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--constant-lr", action="store_true")
    parser.add_argument("--lbfgs-steps", type=int, default=3, help="0 skips L-BFGS")
    args = parser.parse_args()
    device = torch_xla.device()

    if args.lbfgs_steps:
        print("L-BFGS, one default step (20 iterations): seconds, programs compiled, run")
    for where in (torch.device("cpu"), device) if args.lbfgs_steps else ():
        for k, (seconds, compiles, runs) in enumerate(lbfgs(where, args.lbfgs_steps)):
            extra = f"  compiled {compiles:4d}  run {runs:4d}" if where.type == "xla" else ""
            print(f"  {where.type:4s} step {k}: {seconds:8.3f} s{extra}")

    modes = {
        "eager CPU, read after the step": (torch.device("cpu"), False),
        "lazy, read after the sync": (device, False),
        "lazy, read before backward": (device, True),
    }
    made = {name: mlp_steps(*spec, not args.constant_lr) for name, spec in modes.items()}
    for step, drain, _ in made.values():  # warm up: compile, settle the optimizer state
        for _ in range(3):
            step()
        drain()
    rates: dict[str, list[float]] = {name: [] for name in modes}
    runs: dict[str, float] = {}
    for _ in range(args.windows):
        for name, (step, drain, _) in made.items():
            met.clear_all()
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            drain()
            rates[name].append(args.steps / (time.perf_counter() - start))
            runs[name] = _counts()[1] / args.steps
    losses = {name: seen[-1] for name, (_, _, seen) in made.items()}
    lr = "a constant lr" if args.constant_lr else "StepLR"
    print(f"\nMLP 784-256-256-10, batch 64, SGD with {lr}: steps/s (median window), "
          "programs run per step, last loss")
    for name in modes:
        print(f"  {name:32s} {statistics.median(rates[name]):8.1f}  "
              f"{runs[name]:4.1f}  {losses[name]:.6f}")


if __name__ == "__main__":
    main()
