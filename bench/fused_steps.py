"""Training steps with `fused=True` optimizers in lazy mode: steps/s of a 784-256-10 MLP
(batch 64) with fused SGD (momentum), fused Adagrad and fused AdamW given a tensor
learning rate, each step ending in a sync.

    python bench/fused_steps.py [--windows 5] [--steps 20]

Prints the median of the windows' rates and the ops the engine ran on the CPU (a fused
step whose shapes the engine cannot infer runs there: `met.executed_fallback_ops()`).
"""

from __future__ import annotations

import argparse

import torch
from common import median_rate

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

OPTIMIZERS = {
    "SGD (momentum 0.9)": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, fused=True),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.01, fused=True),
    "AdamW (tensor lr)": lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(0.01), fused=True),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    device = torch_xla.device()
    for name, make in OPTIMIZERS.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)).to(device)
        opt = make(model.parameters())
        x = torch.randn(64, 784).to(device)

        def step(model=model, opt=opt, x=x):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            xm.mark_step()

        for _ in range(3):
            step()
        xm.wait_device_ops()
        met.clear_all()
        rate = median_rate(step, xm.wait_device_ops, args.windows, args.steps)
        print(f"{name:20s} {rate:7.1f} steps/s   "
              f"on the CPU: {met.executed_fallback_ops() or 'nothing'}")


if __name__ == "__main__":
    main()
