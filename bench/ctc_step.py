"""A CTC training step in lazy mode: steps/s of a 2-layer MLP acoustic model (80 features
-> 256 -> 32 classes, 200 frames, batch 16, targets padded to 40) trained with
`nn.CTCLoss` and SGD, each batch with new input and target lengths (the longest target
always 40), each step ending in a sync; beside eager PyTorch on the CPU.

    python bench/ctc_step.py [--windows 5] [--steps 10]

Prints the median of the windows' rates, the programs compiled in the timed steps and
the ops the engine ran on the CPU.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from common import median_rate
from torch import nn

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

FRAMES, BATCH, FEATURES, CLASSES, LONGEST = 200, 16, 80, 32, 40


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(8):
        input_lengths = torch.randint(FRAMES // 2, FRAMES + 1, (BATCH,), generator=g)
        target_lengths = torch.randint(1, LONGEST + 1, (BATCH,), generator=g)
        target_lengths[0] = LONGEST
        batches.append((torch.randn(FRAMES, BATCH, FEATURES, generator=g),
                        torch.randint(1, CLASSES, (BATCH, LONGEST), generator=g),
                        input_lengths.tolist(), target_lengths.tolist()))
    for where in (torch.device("cpu"), torch_xla.device()):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(),
                              nn.Linear(256, CLASSES)).to(where)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = [(x.to(where), t.to(where), il, tl) for x, t, il, tl in batches]
        sync = xm.mark_step if where.type == "xla" else (lambda: None)

        def step(i, model=model, opt=opt, data=data, sync=sync):
            x, targets, input_lengths, target_lengths = data[i % len(data)]
            opt.zero_grad()
            log_probs = model(x).log_softmax(-1)
            loss = nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths)
            loss.backward()
            opt.step()
            sync()
            return loss

        for i in range(3):
            step(i)
        met.clear_all()
        turns = itertools.count()  # each call takes the next batch
        rate = median_rate(lambda step=step, turns=turns: step(next(turns)),
                           xm.wait_device_ops, args.windows, args.steps)
        compiled = (met.metric_data("CompileTime") or (0,))[0]
        print(f"{'eager CPU' if where.type == 'cpu' else 'xla':10s} "
              f"{rate:7.1f} steps/s   compiled: {compiled}   "
              f"ran on the CPU: {sorted(set(met.executed_fallback_ops())) or 'nothing'}")


if __name__ == "__main__":
    main()
