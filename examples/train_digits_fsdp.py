"""Train the digits CNN of train_digits.py with FSDP over processes, as a PyTorch/XLA user
writes it: each process holds only its shard of every layer, trains on its part of the
data, and saves its shard; the shards are then consolidated into one checkpoint that an
ordinary model (no FSDP, no XLA device) loads and evaluates.

    CPU_NUM_DEVICES=2 python examples/train_digits_fsdp.py        # 2 processes on the CPU
    python examples/train_digits_fsdp.py --flatten_parameters     # one flat shard per layer

On an accelerator, one process per chip (`PJRT_DEVICE=TPU`, `CUDA`, ...).
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from train_digits import DigitsCNN, digits_split

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
from torch_xla.distributed.fsdp import consolidate_sharded_model_checkpoints
from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy


def train(index: int, args: argparse.Namespace) -> None:
    device, rank, world = xm.xla_device(), xr.global_ordinal(), xr.world_size()
    train_set, _ = digits_split(args.seed)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                        drop_last=True)
    torch.manual_seed(args.seed)  # the same initial weights in every process
    # Each conv and linear layer its own FSDP unit, the rest (batch norms) in the root.
    policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Conv2d, nn.Linear})
    model = FSDP(DigitsCNN(), auto_wrap_policy=policy,
                 flatten_parameters=args.flatten_parameters)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    xm.master_print(f"{world} processes; process 0 holds "
                    f"{sum(p.numel() for p in model.parameters())} of "
                    f"{sum(p.numel() for p in DigitsCNN().parameters())} parameters")
    for epoch in range(1, args.num_epochs + 1):
        sampler.set_epoch(epoch)
        model.train()
        losses = []
        for data, target in pl.MpDeviceLoader(loader, device):
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()  # not xm.optimizer_step: the shards' gradients are averaged
            losses.append(loss.detach())
        mean = torch.stack(losses).mean()
        mean = xm.all_reduce(xm.REDUCE_SUM, mean, scale=1.0 / world).item()
        xm.master_print(f"epoch {epoch}: train loss {mean:.4f}")
    os.makedirs(os.path.dirname(os.path.abspath(args.ckpt_prefix)), exist_ok=True)
    xm.save({"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()},
            f"{args.ckpt_prefix}_rank-{rank:08d}-of-{world:08d}.pth", master_only=False)
    xm.rendezvous("shards saved")


def evaluate_consolidated(args: argparse.Namespace) -> float:
    """Consolidate the shards and evaluate the whole model eagerly on the CPU."""
    state, path = consolidate_sharded_model_checkpoints(args.ckpt_prefix, "_rank-*-of-*.pth")
    print(f"consolidated checkpoint: {path}")
    model = DigitsCNN()
    model.load_state_dict(state)
    model.eval()
    _, test_set = digits_split(args.seed)
    with torch.no_grad():
        images, labels = test_set.tensors
        correct = (model(images).argmax(dim=1) == labels).sum().item()
    return 100.0 * correct / len(labels)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=16)  # per process
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flatten_parameters", action="store_true")
    parser.add_argument("--ckpt_prefix", default="digits-fsdp/ckpt")
    parser.add_argument("--target_accuracy", type=float, default=0.0,
                        help="exit with status 1 below this held-out accuracy (percent)")
    args = parser.parse_args(argv)
    torch_xla.launch(train, args=(args,))
    accuracy = evaluate_consolidated(args)
    print(f"held-out accuracy of the consolidated model: {accuracy:.2f}%")
    if accuracy < args.target_accuracy:
        sys.exit(1)
    return accuracy


if __name__ == "__main__":
    main()
