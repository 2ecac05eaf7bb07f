"""Per-process functions of the FSDP tests (tests/test_distributed_fsdp.py).

They live in the package so that processes `xmp.spawn` starts can import them. Each
configuration trains the same small model on this replica's half of every batch and
writes an FSDP shard checkpoint; `expected` trains it eagerly on the CPU in one process
on the whole batches, which FSDP over two replicas must equal.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

STEPS, BATCH = 3, 8


class Block(nn.Module):
    """A residual MLP block: the unit the transformer auto-wrap policy wraps."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(self.norm(x))))


class Model(nn.Module):
    """Embedding, two blocks, a head tied to the embedding, and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.blocks = nn.Sequential(Block(6), Block(6))
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 6))
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight  # tied: one unit holds both names

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.scale * self.blocks(self.embed(tokens).mean(1)))


def make_model() -> Model:
    torch.manual_seed(0)
    return Model()


def batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 11, (BATCH, 5), generator=generator),
             torch.randint(0, 11, (BATCH,), generator=generator)) for _ in range(steps)]


def expected(max_norm: float | None = None, accumulate: bool = False) -> dict[str, Any]:
    """Eager CPU training on whole batches: the state dict and the losses."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, norms = [], []
    for tokens, labels in batches():
        optimizer.zero_grad()
        if accumulate:  # two half-batch micro-steps, as the replicas' no_sync runs do
            for part in (slice(0, BATCH // 2), slice(BATCH // 2, BATCH)):
                (F.cross_entropy(model(tokens[part]), labels[part]) / 2).backward()
        else:
            loss = F.cross_entropy(model(tokens), labels)
            loss.backward()
            losses.append(loss.item())
        if max_norm is not None:
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item())
        optimizer.step()
    return {"state": model.state_dict(), "losses": losses, "norms": norms}


def _policy() -> Any:
    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    return partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})


CONFIGS: dict[str, dict[str, Any]] = {
    "per_parameter": {},
    "nested": {"auto_wrap_policy": "blocks"},
    "nested_flat": {"auto_wrap_policy": "blocks", "flatten_parameters": True},
    "nested_dim0": {"auto_wrap_policy": "blocks", "shard_param_on_dim_0": True},
    "nested_no_reshard": {"auto_wrap_policy": "blocks", "reshard_after_forward": False},
    "nested_checkpointed": {"auto_wrap_policy": "blocks", "checkpoint": True,
                            "fp32_reduce_scatter": True},
    "clipped": {"auto_wrap_policy": "blocks", "max_norm": 0.05},
    "no_sync": {"auto_wrap_policy": "blocks", "accumulate": True},
}


def _build(config: dict[str, Any]) -> Any:
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP
    from torch_xla.distributed.fsdp import checkpoint_module
    kwargs = {k: v for k, v in config.items()
              if k not in ("auto_wrap_policy", "checkpoint", "max_norm", "accumulate")}
    if config.get("auto_wrap_policy"):
        kwargs["auto_wrap_policy"] = _policy()
    if config.get("checkpoint"):
        kwargs["auto_wrapper_callable"] = lambda m, *a, **k: FSDP(checkpoint_module(m), *a, **k)
    return FSDP(make_model(), **kwargs)


def worker(index: int, folder: str) -> dict[str, Any]:
    """Train every configuration on this replica's half of each batch; save shards."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    device, rank, world = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    out: dict[str, Any] = {}
    for name, config in CONFIGS.items():
        model = _build(config)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses, norms, hlo = [], [], ""
        for step, (tokens, labels) in enumerate(batches()):
            optimizer.zero_grad()
            tokens, labels = tokens[half].to(device), labels[half].to(device)
            if config.get("accumulate"):
                quarter = tokens.shape[0] // 2
                with model.no_sync():
                    (F.cross_entropy(model(tokens[:quarter]), labels[:quarter]) / 2).backward()
                (F.cross_entropy(model(tokens[quarter:]), labels[quarter:]) / 2).backward()
            else:
                loss = F.cross_entropy(model(tokens), labels)
                loss.backward()
                losses.append(loss.detach())
            if config.get("max_norm") is not None:
                norms.append(model.clip_grad_norm_(config["max_norm"]))
            if step == 0:
                grads = [p.grad for p in model.parameters()]
                hlo = torch_xla._XLAC._get_xla_tensors_hlo(grads)
            optimizer.step()
            torch_xla.sync()
        path = os.path.join(folder, f"{name}_rank-{rank:08d}-of-{world:08d}.pth")
        xm.save({"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()},
                path, master_only=False)
        first_block = model.module.blocks[0]
        out[name] = {
            "losses": [t.item() for t in losses], "norms": [t.item() for t in norms],
            "all_gathers": hlo.count(" all-gather("),
            "reduce_scatters": hlo.count(" reduce-scatter("),
            "shards": {n: tuple(p.shape) for n, p in model.named_parameters()},
            "between_steps": str(first_block.module.up.weight.device)
            if hasattr(first_block, "module") else str(first_block.up.weight.device),
        }
    out["grad_scaler"] = _scaler_step(device)
    try:  # the shards' gradients are parts, not copies: averaging them is refused
        xm.optimizer_step(optimizer)
        out["optimizer_step"] = "no error"
    except RuntimeError as error:
        out["optimizer_step"] = str(error)
    return out


def _scaler_step(device: Any) -> dict[str, Any]:
    """One GradScaler step whose overflow lands in rank 0's half of a parameter only
    (row 0 of a 4-row embedding; rank 1 holds rows 2-3, whose gradients are 0)."""
    from torch_xla.amp import GradScaler
    from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP

    torch.manual_seed(0)
    model = FSDP(nn.Embedding(4, 64), shard_param_on_dim_0=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=2.0**16)
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(torch.zeros(1, dtype=torch.int64, device=device)).sum() * 1e35
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    changed = any(not torch.equal(a.cpu(), p.detach().cpu())
                  for a, p in zip(before, model.parameters(), strict=True))
    return {"scale": scaler.get_scale(), "stepped": changed}
