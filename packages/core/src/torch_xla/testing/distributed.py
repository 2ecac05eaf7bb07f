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


def functional_collectives_worker(index: int = 0) -> dict[str, Any]:
    """torch's functional collectives on XLA tensors (`torch.distributed.
    _functional_collectives`, on the world and on a subgroup), `dist.all_reduce` and xm's
    collectives inside `torch.compile(backend='openxla')`; this process's results, with
    the number of programs the compiled xm function ran."""
    import warnings

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.xla_backend  # noqa: F401 - registers "xla"

    warnings.simplefilter("ignore", FutureWarning)  # torch renamed some funcol functions
    dist.init_process_group("xla", init_method="xla://")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch_xla.device()
    x = (torch.arange(8, dtype=torch.float32).reshape(4, 2) + 10 * rank).to(device)
    world_group = dist.group.WORLD
    out = {
        "sum": funcol.all_reduce(x, "sum", world_group),
        "avg": funcol.all_reduce(x, "avg", world_group),
        "max": funcol.all_reduce(x, "max", world_group),
        "gather0": funcol.all_gather_tensor(x, 0, world_group),
        "gather1": funcol.all_gather_tensor(x, 1, world_group),
        "scatter": funcol.reduce_scatter_tensor(x, "sum", 0, world_group),
        "broadcast": funcol.broadcast(x, 1, world_group),
        "all_to_all": funcol.all_to_all_single(x, None, None, world_group),
        "coalesced": funcol.all_reduce_coalesced([x, x * 2], "sum", world_group),
    }
    # The root's bits arrive exactly (NaN, -0.0); ints and bools too.
    special = torch.tensor([float("nan"), -0.0, 1.5, -2.0]) if rank == 1 else torch.ones(4)
    out["broadcast_bits"] = funcol.broadcast(special.to(device), 1, world_group)
    out["broadcast_int"] = funcol.broadcast(torch.tensor([rank, -rank]).to(device), 1,
                                            world_group)
    out["broadcast_bool"] = funcol.broadcast(torch.tensor([rank == 1, rank != 1]).to(device),
                                             1, world_group)
    # Rows of a 2 x (world / 2) mesh: ranks 0-1, 2-3, ... each reduce among themselves.
    options = {"xla_pg_options": {"spmd": True}}
    rows = [dist.new_group(list(range(r, r + 2)), pg_options=options)
            for r in range(0, world, 2)]
    row = rows[rank // 2]
    out["row_sum"] = funcol.all_reduce(x, "sum", row)
    out["row_broadcast"] = funcol.broadcast(x, 1, row)

    def add_then_double(t):
        dist.all_reduce(t)  # in place: dynamo writes it back to the caller's tensor
        return t * 2

    y = x.clone()
    out["compiled_dist"] = torch.compile(add_then_double, backend="openxla")(y)
    out["written_back"] = y

    def xm_collectives(t):
        return (xm.all_gather(t, dim=1), xm.reduce_scatter(xm.REDUCE_SUM, t, 0.5, 0, world),
                xm.all_reduce(xm.REDUCE_MAX, t, scale=2.0))

    torch_xla.sync()
    met.clear_all()
    out["compiled_xm"] = torch.compile(xm_collectives, backend="openxla")(x)
    torch_xla.sync()
    out["programs"] = met.metric_data("ExecuteTime")[0]

    # torch breaks the graph at dist.broadcast (c10d's options object); the backend then
    # runs it eagerly, and xm's frames it calls run too, not compiled alone by dynamo.
    def broadcast_inside(t):
        t = t.clone()
        dist.broadcast(t, src=1)
        return t * 2

    out["broadcast_graphs"] = torch._dynamo.explain(broadcast_inside)(x).graph_count
    out["compiled_broadcast"] = torch.compile(broadcast_inside, backend="openxla")(x)

    # DDP under torch.compile: DDP's C++ reducer calls the backend's Python methods while
    # dynamo's frame callback is set.
    model = make_model().to(device)
    ddp = torch.compile(torch.nn.parallel.DistributedDataParallel(model), backend="openxla")
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for inputs, labels in make_batches(3, 2 * world):
        part = slice(2 * rank, 2 * rank + 2)
        optimizer.zero_grad()
        F.cross_entropy(ddp(inputs[part].to(device)), labels[part].to(device)).backward()
        optimizer.step()
        torch_xla.sync()
    out["ddp_state"] = model.state_dict()
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
