"""Train a small CNN on handwritten digits on the XLA device, as a PyTorch/XLA user writes it.

The data is scikit-learn's bundled 8x8 digits (1,797 images, no download):
80% train, 20% held out. The loop is plain PyTorch plus PyTorch/XLA's three
additions: `xm.xla_device()`, `pl.MpDeviceLoader` (which marks the step) and
`xm.optimizer_step`. A checkpoint is written with `xm.save` after every epoch.

    python examples/train_digits.py                 # real data, 12 epochs
    python examples/train_digits.py --fake_data     # synthetic batches, as PyTorch/XLA's examples
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.distributed.parallel_loader as pl
from torch_xla.utils.utils import SampleGenerator


class DigitsCNN(nn.Module):
    """Two conv-batchnorm-relu-pool blocks and two linear layers, for 1x8x8 images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def digits_split(seed: int = 0) -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(order))
    train, test = order[:cut], order[cut:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[test], labels[test])


def loaders(args: argparse.Namespace) -> tuple:
    if args.fake_data:
        images = torch.zeros(args.batch_size, 1, 8, 8)
        batch = (images, torch.zeros(args.batch_size, dtype=torch.int64))
        return SampleGenerator(batch, 1440 // args.batch_size), SampleGenerator(batch, 8)
    train, test = digits_split(args.seed)
    return (
        DataLoader(train, batch_size=args.batch_size, shuffle=True, drop_last=True,
                   generator=torch.Generator().manual_seed(args.seed)),
        DataLoader(test, batch_size=args.batch_size, drop_last=False),
    )


def progress(epoch: int, step: int, total: int, loss: float, rate: float) -> None:
    done = int(30 * step / max(total, 1))
    bar = "#" * done + "." * (30 - done)
    print(f"\repoch {epoch} [{bar}] {step}/{total} loss={loss:.4f} {rate:.1f} samples/s",
          end="", file=sys.stderr, flush=True)


def train_epoch(model, loader, optimizer, device, epoch: int, args) -> float:
    model.train()
    tracker = xm.RateTracker()
    losses = []
    for step, (data, target) in enumerate(pl.MpDeviceLoader(loader, device), start=1):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)
        tracker.add(args.batch_size)
        losses.append(loss.detach())
        if step % args.log_steps == 0 or step == len(loader):
            # Read the loss after the step ran, without cutting the step's graph.
            xm.add_step_closure(
                lambda s, loss: progress(epoch, s, len(loader), loss.item(), tracker.rate()),
                args=(step, loss),
            )
    xm.wait_device_ops()  # the last step's closures have printed
    print(file=sys.stderr)
    return torch.stack([loss.cpu() for loss in losses]).mean().item()


def evaluate(model, loader, device) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for data, target in pl.MpDeviceLoader(loader, device):
            predicted = model(data).argmax(dim=1)
            correct += (predicted == target).sum().item()
            total += target.numel()
    return 100.0 * correct / max(total, 1)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log_steps", type=int, default=5)
    parser.add_argument("--checkpoint", default="digits_cnn.pt")
    parser.add_argument("--fake_data", action="store_true")
    parser.add_argument("--metrics_debug", action="store_true")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = xm.xla_device()
    train_loader, test_loader = loaders(args)
    model = DigitsCNN().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    xm.master_print(f"training on {device} ({xm.xla_device_hw(device)}), "
                    f"{len(train_loader)} steps per epoch")
    accuracy = 0.0
    for epoch in range(1, args.num_epochs + 1):
        start = time.time()
        loss = train_epoch(model, train_loader, optimizer, device, epoch, args)
        accuracy = evaluate(model, test_loader, device)
        xm.save(model.state_dict(), args.checkpoint)
        xm.master_print(f"epoch {epoch}: train loss {loss:.4f}, held-out accuracy "
                        f"{accuracy:.2f}%, {time.time() - start:.1f}s")
    xm.master_print(f"final held-out accuracy: {accuracy:.2f}% (checkpoint: {args.checkpoint})")
    if args.metrics_debug:
        xm.master_print(met.short_metrics_report())
    return accuracy


if __name__ == "__main__":
    main()
