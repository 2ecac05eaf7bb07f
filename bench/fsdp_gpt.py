"""The small GPT of bench/small_gpt.py trained with SGD by 2 processes (`xmp.spawn`, one
CPU device each): data parallel (`xm.optimizer_step`, gradients all-reduced) against FSDP
v1 (`XlaFullyShardedDataParallel`, each Block its own unit) in three configurations.

    python bench/fsdp_gpt.py [--steps 10] [--windows 5]

Each process trains on its half of small_gpt's batch (16 sequences of T=64 tokens).
Reported per mode: steps/s (median over --windows timed windows of --steps steps, each
drained at both ends, 3 warm-up steps excluded; rank 0's timing), the parameter bytes one
process holds between steps (what the optimizer steps: the whole model for data parallel,
the shards for FSDP), the collectives in one step's program, and the loss of the last
step averaged over the two processes (equal across modes: they train the same model).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = {
    "data parallel": None,
    "FSDP": {},
    "FSDP, no reshard": {"reshard_after_forward": False},
    "FSDP, flat": {"flatten_parameters": True},
}
LR = 0.01


def _run(index: int, mode: str, steps: int, windows: int) -> dict:
    from functools import partial

    import torch
    import torch.nn.functional as F
    from common import median_rate
    from small_gpt import BATCH, GPT, VOCAB, Block, T

    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy

    device, rank, world = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    torch.manual_seed(0)
    tokens = torch.randint(0, VOCAB, (BATCH, T + 1))
    half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    x, y = tokens[half, :-1].to(device), tokens[half, 1:].to(device)
    torch.manual_seed(0)
    model = GPT()
    config = MODES[mode]
    if config is None:
        model = model.to(device)
    else:
        policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
        model = FSDP(model, auto_wrap_policy=policy, **config)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []

    def step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        if config is None:
            xm.optimizer_step(optimizer)
        else:
            optimizer.step()
        losses.append(loss.detach())
        torch_xla.sync()

    for _ in range(3):
        step()
    # one step's program: the updated parameters, before the sync
    optimizer.zero_grad()
    F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1)).backward()
    if config is None:
        xm.optimizer_step(optimizer)
    else:
        optimizer.step()
    hlo = torch_xla._XLAC._get_xla_tensors_hlo(list(model.parameters()))
    torch_xla.sync()
    rate = median_rate(step, xm.wait_device_ops, windows, steps)
    return {"steps_per_second": rate,
            "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "all_gathers": hlo.count(" all-gather("), "reduce_scatters": hlo.count(
                " reduce-scatter("), "all_reduces": hlo.count(" all-reduce("),
            "loss": losses[-1].item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--windows", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    os.environ["CPU_NUM_DEVICES"] = "2"
    import torch_xla.distributed.xla_multiprocessing as xmp

    print("| mode | steps/s | parameter bytes per process | all-gathers | reduce-scatters "
          "| all-reduces | last loss |")
    print("|---|---|---|---|---|---|---|")
    for mode in MODES:
        results = xmp.spawn(_run, args=(mode, args.steps, args.windows))
        first = results[0]
        loss = sum(r["loss"] for r in results.values()) / len(results)
        print(f"| {mode} | {first['steps_per_second']:.2f} | {first['parameter_bytes']:,} | "
              f"{first['all_gathers']} | {first['reduce_scatters']} | {first['all_reduces']} "
              f"| {loss:.6f} |", flush=True)


if __name__ == "__main__":
    main()
