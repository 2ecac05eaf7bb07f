"""Host time of a lazy training step with and without `assume_pure`: the small GPT of
`small_gpt.py` (2 blocks, d=128, T=64, batch 16, AdamW), each block's forward either
recorded op by op (plain lazy mode) or replayed as one recorded node per block
(`torch_xla.experimental.assume_pure` over `torch.func.functional_call`).

    python bench/assume_pure.py [--layers 2] [--steps 10] [--rounds 5]

Per mode: the host milliseconds spent recording forward, backward and optimizer (the
device drained first, so no execution is counted), the milliseconds inside
`mark_step`, the engine tensors made per step, and steps/s; the rounds alternate the
modes and each figure is the median. The two modes start from one model and take the
same steps; their losses must agree (printed).
"""

from __future__ import annotations

import argparse
import copy
import statistics

import small_gpt
import torch
from common import steps_per_second, xla_host_cost
from torch import nn

import torch_xla
import torch_xla.core.xla_model as xm
from torch_xla.experimental.assume_pure import assume_pure


class PureBlock(nn.Module):
    """A block whose forward is an `assume_pure` replay of the block's own forward."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.call = assume_pure(
            lambda params, x: torch.func.functional_call(self.block, params, (x,)))

    def forward(self, x):
        return self.call(dict(self.block.named_parameters()), x)


def pure_blocks(model: small_gpt.GPT) -> None:
    """Replace each block by an `assume_pure` replay of it (parameters unchanged)."""
    for i, block in enumerate(model.blocks):
        model.blocks[i] = PureBlock(block)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=small_gpt.LAYERS)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    small_gpt.LAYERS = args.layers
    device = torch_xla.device()
    torch.manual_seed(0)
    base = small_gpt.GPT()
    x = torch.randint(0, small_gpt.VOCAB, (small_gpt.BATCH, small_gpt.T)).to(device)
    y = torch.randint(0, small_gpt.VOCAB, (small_gpt.BATCH, small_gpt.T)).to(device)
    modes = {}
    for name in ("lazy", "assume_pure"):
        model = copy.deepcopy(base).to(device)
        if name == "assume_pure":
            pure_blocks(model)
        opt = torch.optim.AdamW(model.parameters(), lr=small_gpt.LR, betas=small_gpt.BETAS,
                                eps=small_gpt.EPS, weight_decay=small_gpt.WD)
        modes[name] = (model, opt, [])
    losses = {}
    for name, (model, opt, _) in modes.items():  # warm-up: every program compiled
        for _ in range(3):
            losses[name] = small_gpt.torch_step(model, opt, x, y)
            xm.mark_step()
    for _ in range(args.rounds):
        for name, (model, opt, figures) in modes.items():
            def record(model=model, opt=opt):
                return small_gpt.torch_step(model, opt, x, y)

            host = xla_host_cost(record, steps=args.steps)

            def step(record=record, name=name):
                losses[name] = record()
                xm.mark_step()

            figures.append((*host, steps_per_second(step, xm.wait_device_ops, 0, args.steps)))
    print(f"assume_pure bench: small GPT, {args.layers} blocks, {args.rounds} rounds of "
          f"{args.steps} steps, medians")
    print("| mode | record ms | mark_step ms | us per engine tensor | steps/s |")
    print("|---|---|---|---|---|")
    for name, (_, _, figures) in modes.items():
        cols = [statistics.median(f[k] for f in figures) for k in range(4)]
        print(f"| {name} | {cols[0]:.1f} | {cols[1]:.2f} | {cols[2]:.1f} | {cols[3]:.1f} |")
    a, b = (float(losses[n].detach().cpu()) for n in modes)
    print(f"last losses: lazy {a:.6f}, assume_pure {b:.6f} (equal: "
          f"{abs(a - b) <= 1e-3 * abs(a) + 1e-5})")


if __name__ == "__main__":
    main()
