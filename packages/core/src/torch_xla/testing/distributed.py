"""Per-process functions of the `torch.distributed` and ZeRO tests (tests/test_distributed_*).

They live in the package so that processes started by `xmp.spawn` or by a torchrun-style
launcher can import them; each returns CPU values for the test to compare.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_map_only


def _cpu(data: Any) -> Any:
    return tree_map_only(torch.Tensor, lambda t: t.detach().to("cpu"), data)


def backend_worker(index: int = 0) -> dict[str, Any]:
    """`init_process_group('xla', init_method='xla://')` under any launcher, then the basic
    collectives; the results of this process."""
    import torch.distributed as dist

    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend  # noqa: F401 - registers "xla"
    from torch_xla._internal import rendezvous

    dist.init_process_group("xla", init_method="xla://")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch_xla.device()
    x = (torch.arange(4, dtype=torch.float32) + 10 * rank).to(device)  # rank as data
    summed = x.clone()
    dist.all_reduce(summed)
    gathered = [torch.zeros_like(x) for _ in range(world)]
    dist.all_gather(gathered, x)
    broadcast = x.clone()
    dist.broadcast(broadcast, src=world - 1)
    order = list(reversed(range(world)))
    payloads = xm.rendezvous("backend_worker", f"rank{rank}".encode(), replicas=order)
    alone = xm.rendezvous(f"alone{rank}", b"me", replicas=[rank])
    # Groups by PyTorch/XLA's name: every rank, and one rank (every rank in a group alone).
    everyone = torch_xla.distributed.xla_backend.new_xla_process_group(range(world))
    group_sum = x.clone()
    dist.all_reduce(group_sum, group=everyone)
    singles = torch_xla.distributed.xla_backend.new_xla_process_group([0])
    group_alone = x.clone()
    dist.all_reduce(group_alone, group=singles)
    out = {"rank": rank, "world": world, "sum": summed, "gather": gathered,
           "broadcast": broadcast, "payloads": [p.decode() for p in payloads],
           "alone": alone, "store": type(rendezvous._store).__name__,
           "group_sum": group_sum, "group_alone": group_alone}
    out = _cpu(out)
    dist.destroy_process_group()
    return out


# --- ZeRO-1 --------------------------------------------------------------------------------


def make_model() -> nn.Module:
    torch.manual_seed(0)
    # 5 output rows: not a multiple of the group size, so the shards are padded.
    return nn.Sequential(nn.Linear(6, 7), nn.Tanh(), nn.Linear(7, 5))


def make_batches(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 6, generator=generator),
             torch.randint(0, 5, (batch,), generator=generator)) for _ in range(steps)]


def _train_zero(model: nn.Module, optimizer: Any, batches: list, index: int, world: int,
                device: torch.device) -> None:
    import torch_xla

    share = batches[0][0].shape[0] // world
    for x, y in batches:
        x, y = x[index * share:(index + 1) * share], y[index * share:(index + 1) * share]
        optimizer.zero_grad()
        F.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
        torch_xla.sync()


def zero_worker(index: int, steps: int, batch: int, max_norm: float) -> dict[str, Any]:
    """ZeRO-1 (Adam, gradient clipping) on this replica's part of each batch; then a
    checkpoint round trip that must continue exactly as the original optimizer."""
    import torch_xla
    import torch_xla.runtime as xr
    from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

    device, world = torch_xla.device(), xr.world_size()
    model = make_model().to(device)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.05,
                                        max_norm=max_norm, save_master_weights=True)
    batches = make_batches(steps + 1, batch)
    _train_zero(model, optimizer, batches[:steps], index, world, device)
    shards = [s for g in optimizer.base_optimizer.param_groups for s in g["params"]]
    state = optimizer.state_dict()
    out = {"state": _cpu(model.state_dict()), "shard_shapes": [tuple(s.shape) for s in shards],
           "exp_avg_shapes": [tuple(optimizer.base_optimizer.state[s]["exp_avg"].shape)
                              for s in shards],
           "grad_norm": _cpu(optimizer.grad_norm), "shards": _cpu(shards)}
    # A fresh optimizer loaded from the checkpoint takes the same next step.
    reloaded = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=0.05,
                                       max_norm=max_norm, save_master_weights=True)
    reloaded.load_state_dict(state)
    _train_zero(model, reloaded, batches[steps:], index, world, device)
    out["after_reload"] = model.state_dict()
    return _cpu(out)


def expected_zero(steps: int, batch: int, max_norm: float) -> dict[str, Any]:
    """The same training eagerly on the CPU in one process, on whole batches."""
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    states, norms = [], []
    for x, y in make_batches(steps + 1, batch):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        optimizer.step()
        states.append({k: v.clone() for k, v in model.state_dict().items()})
    return {"state": states[steps - 1], "after_reload": states[steps],
            "grad_norm": norms[steps - 1]}
