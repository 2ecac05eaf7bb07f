"""Per-process functions for `xmp.spawn` tests, and the eager results they must match.

They live in the installed package so spawned processes can import them (a
function defined in a test file or `python -c` cannot be sent to a child).
The core tests and the conformance kit both use them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_map_only

# --- collectives ----------------------------------------------------------------------


def replica_value(index: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """What replica `index` contributes: a 4x4 tensor distinct per replica."""
    base = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    return (base * (index + 1) - 3 * index).to(dtype)


def groups_for(world: int) -> list[list[int]] | None:
    """Two interleaved groups when the world splits evenly, else None."""
    if world < 4 or world % 2:
        return None
    return [list(range(0, world, 2)), list(range(1, world, 2))]


def collectives_worker(index: int) -> dict[str, Any]:
    """Run every collective on this replica's values; results as CPU tensors."""
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    device = xm.xla_device()
    world = xr.world_size()
    x = replica_value(index).to(device)
    out = {
        "world": world,
        "sum": xm.all_reduce(xm.REDUCE_SUM, x),
        "mean": xm.all_reduce(xm.REDUCE_SUM, x, scale=1.0 / world),
        "max": xm.all_reduce(xm.REDUCE_MAX, x),
        "min": xm.all_reduce(xm.REDUCE_MIN, x),
        "mul": xm.all_reduce(xm.REDUCE_MUL, x),
        "int_sum": xm.all_reduce(xm.REDUCE_SUM, replica_value(index, torch.int64).to(device)),
        "bool_or": xm.all_reduce(xm.REDUCE_OR, (replica_value(index) > 40).to(device)),
        "bool_and": xm.all_reduce(xm.REDUCE_AND, (replica_value(index) > 10).to(device)),
        "scalar": xm.all_reduce(xm.REDUCE_SUM, torch.tensor(float(index), device=device)),
        "gather0": xm.all_gather(x, dim=0),
        "gather1": xm.all_gather(x, dim=1),
        "scatter": xm.reduce_scatter(xm.REDUCE_SUM, x, 0.5, 0, world),
        "to_all": xm.all_to_all(x, 0, 1, world),
        "permute": xm.collective_permute(x, [[r, (r + 1) % world] for r in range(world)]),
        # Built from constants only (the same in every process).
        "const_sum": xm.all_reduce(xm.REDUCE_SUM, torch.full((2,), 3.0, device=device)),
        "const_gather": xm.all_gather(torch.full((2,), 7, device=device)),
        # A per-process value passed as data, as it must be.
        "rank_sum": xm.all_reduce(xm.REDUCE_SUM, torch.tensor(index + 1.0).to(device)),
    }
    in_place = [x.clone(), x * 2]
    xm.all_reduce(xm.REDUCE_SUM, in_place)
    out["in_place"] = in_place
    groups = groups_for(world)
    if groups is not None:
        size = len(groups[0])
        out["g_sum"] = xm.all_reduce(xm.REDUCE_SUM, x, groups=groups)
        out["g_max"] = xm.all_reduce(xm.REDUCE_MAX, x, groups=groups)
        out["g_gather"] = xm.all_gather(x, dim=1, groups=groups)
        out["g_scatter"] = xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, size, groups=groups)
        out["g_to_all"] = xm.all_to_all(x, 0, 1, size, groups=groups)
    xm.mark_step()
    out["rendezvous"] = xm.rendezvous("collectives_worker", f"r{index}".encode())
    out["mesh_reduce"] = xm.mesh_reduce("collectives_worker", torch.tensor([index]), torch.cat)
    return _cpu(out)


def expected_collectives(index: int, world: int) -> dict[str, Any]:
    """What `collectives_worker(index)` must return, computed eagerly on the CPU."""
    xs = [replica_value(r) for r in range(world)]
    total = torch.stack(xs).sum(0)
    out = {
        "world": world,
        "sum": total,
        "mean": total / world,
        "max": torch.stack(xs).amax(0),
        "min": torch.stack(xs).amin(0),
        "mul": torch.stack(xs).prod(0),
        "int_sum": torch.stack([replica_value(r, torch.int64) for r in range(world)]).sum(0),
        "bool_or": torch.stack([v > 40 for v in xs]).any(0),
        "bool_and": torch.stack([v > 10 for v in xs]).all(0),
        "scalar": torch.tensor(float(sum(range(world)))),
        "gather0": torch.cat(xs, 0),
        "gather1": torch.cat(xs, 1),
        "scatter": (total * 0.5).chunk(world, 0)[index],
        "to_all": torch.cat([v.chunk(world, 0)[index] for v in xs], 1),
        "permute": xs[(index - 1) % world],
        "const_sum": torch.full((2,), 3.0 * world),
        "const_gather": torch.full((2 * world,), 7),
        "rank_sum": torch.tensor(world * (world + 1) / 2),
        "in_place": [total, total * 2],
        "rendezvous": [f"r{r}".encode() for r in range(world)],
        "mesh_reduce": torch.arange(world),
    }
    groups = groups_for(world)
    if groups is not None:
        group = next(g for g in groups if index in g)
        mine = [xs[r] for r in group]
        position = group.index(index)
        out["g_sum"] = torch.stack(mine).sum(0)
        out["g_max"] = torch.stack(mine).amax(0)
        out["g_gather"] = torch.cat(mine, 1)
        out["g_scatter"] = torch.stack(mine).sum(0).chunk(len(group), 0)[position]
        out["g_to_all"] = torch.cat([v.chunk(len(group), 0)[position] for v in mine], 1)
    return out


def assert_collectives(results: dict[int, dict[str, Any]], world: int) -> None:
    """Every replica's `collectives_worker` results equal `expected_collectives`."""
    assert sorted(results) == list(range(world)), sorted(results)
    for index in range(world):
        want = expected_collectives(index, world)
        assert set(results[index]) == set(want), sorted(results[index])
        for name, value in want.items():
            assert_equal(results[index][name], value, f"{name} on replica {index}")


def assert_equal(got: Any, want: Any, name: str) -> None:
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}"
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6, msg=name)
    elif isinstance(want, list):
        assert len(got) == len(want), name
        for g, w in zip(got, want, strict=True):
            assert_equal(g, w, name)
    else:
        assert got == want, f"{name}: {got!r}, expected {want!r}"


def _cpu(data: Any) -> Any:
    return tree_map_only(torch.Tensor, lambda t: t.cpu(), data)


# --- data-parallel training -----------------------------------------------------------


def make_model() -> nn.Module:
    """A small CNN without batch norm (whose statistics are per replica by design)."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 10), nn.LogSoftmax(dim=1),
    )


def make_batches(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(batch, 1, 8, 8, generator=generator),
         torch.randint(0, 10, (batch,), generator=generator))
        for _ in range(steps)
    ]


def training_worker(index: int, steps: int, batch: int, checkpoint: str) -> dict[str, Any]:
    """Train on this replica's share of every batch with `xm.optimizer_step`."""
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.runtime as xr

    device = xm.xla_device()
    world = xr.world_size()
    share = batch // world
    shards = [
        (x[index * share:(index + 1) * share], y[index * share:(index + 1) * share])
        for x, y in make_batches(steps, batch)
    ]
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    compiles = []
    for x, y in pl.MpDeviceLoader(shards, device):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        compiles.append(met.counter_value("UncachedCompile") or 0)
    xm.save(model.state_dict(), checkpoint)
    return {
        "state": _cpu(model.state_dict()),
        "compiles": compiles,
        "loss": xm.mesh_reduce("loss", loss.item(), lambda losses: sum(losses) / len(losses)),
    }


def expected_training(steps: int, batch: int) -> dict[str, torch.Tensor]:
    """The same training eagerly on the CPU, one process, whole batches."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in make_batches(steps, batch):
        optimizer.zero_grad()
        F.nll_loss(model(x), y).backward()
        optimizer.step()
    return model.state_dict()


def torch_distributed_worker(index: int, steps: int, batch: int) -> dict[str, Any]:
    """`torch.distributed` collectives and DDP over the xla backend."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.distributed.xla_backend  # noqa: F401 - registers "xla"

    dist.init_process_group("xla", init_method="xla://")
    device = xm.xla_device()
    world = dist.get_world_size()
    x = replica_value(index).to(device)
    summed, averaged = x.clone(), x.clone()
    dist.all_reduce(summed)
    dist.all_reduce(averaged, op=dist.ReduceOp.AVG)
    gathered = [torch.zeros_like(x) for _ in range(world)]
    dist.all_gather(gathered, x)
    into = torch.zeros(world * 4, 4, device=device)
    dist.all_gather_into_tensor(into, x)
    scattered = torch.zeros(4 // world, 4, device=device)
    dist.reduce_scatter_tensor(scattered, x)
    broadcast = x.clone()
    dist.broadcast(broadcast, src=world - 1)
    dist.barrier()
    out = {"sum": summed, "avg": averaged, "gather": gathered, "gather_into": into,
           "scatter": scattered, "broadcast": broadcast, "rank": dist.get_rank()}

    share = batch // world
    model = make_model().to(device)
    ddp = DistributedDataParallel(model, gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    compiles = []
    for x, y in make_batches(steps, batch):
        x, y = x[index * share:(index + 1) * share], y[index * share:(index + 1) * share]
        optimizer.zero_grad()
        F.nll_loss(ddp(x.to(device)), y.to(device)).backward()
        optimizer.step()
        xm.mark_step()
        compiles.append(met.counter_value("UncachedCompile") or 0)
    out["state"] = model.state_dict()
    out["compiles"] = compiles
    dist.destroy_process_group()
    return _cpu(out)


def expected_torch_distributed(index: int, world: int) -> dict[str, Any]:
    xs = [replica_value(r) for r in range(world)]
    total = torch.stack(xs).sum(0)
    return {"sum": total, "avg": total / world, "gather": xs, "gather_into": torch.cat(xs),
            "scatter": total.chunk(world)[index], "broadcast": xs[world - 1], "rank": index}


def failing_worker(index: int) -> None:
    """Replica 1 fails; the others wait in a collective that can never complete."""
    import torch_xla.core.xla_model as xm

    if index == 1:
        raise ValueError("replica 1 failed on purpose")
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=xm.xla_device())).cpu()


# How a replica can end without returning, for `ending_worker`.
ENDINGS = {
    "exit": lambda: os._exit(3),
    "kill": lambda: os.kill(os.getpid(), signal.SIGKILL),
    "raise": lambda: _raise(ValueError("replica 1 failed on purpose")),
}
# Longer than any test waits: the parent stops a sleeping replica once the job has failed.
SLEEP_UNTIL_STOPPED_S = 120


def _raise(error: Exception) -> None:
    raise error


def ending_worker(index: int, how: str) -> None:
    """Replica 1 ends as `ENDINGS[how]` says; the others sleep until `spawn` stops them."""
    if index == 1:
        ENDINGS[how]()
    time.sleep(SLEEP_UNTIL_STOPPED_S)


def exiting_worker(index: int, code: int | None) -> None:
    """Ends as PyTorch/XLA's example programs end `_mp_fn`: `sys.exit(code)`."""
    import torch_xla

    (torch.ones(2, device=torch_xla.device()) * index).cpu()
    sys.exit(code)


def absent_peer_worker(index: int, where: str) -> None:
    """Replica 0 waits for replica 1 at `where`; replica 1 sleeps instead of coming.

    `where`: "rendezvous", "mesh_reduce", "compile" (the first step with a collective,
    whose compilation the processes check together) or "step" (a second, cached run of
    that step, which meets the others just before it runs).
    """
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()

    def step() -> torch.Tensor:
        return xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=device)).cpu()

    if where == "step":
        step()  # together, once
    if index == 1:
        time.sleep(SLEEP_UNTIL_STOPPED_S)
    elif where == "rendezvous":
        xm.rendezvous("absent_peer_worker")
    elif where == "mesh_reduce":
        xm.mesh_reduce("absent_peer_worker", index, sum)
    else:
        step()


def late_peer_worker(index: int, late_by_s: float) -> dict[str, Any]:
    """Replica 1 comes to a rendezvous `late_by_s` seconds after replica 0; both catch their
    `PeerTimeoutError` and return what it says, then meet again (the job goes on)."""
    import torch_xla.core.xla_model as xm
    from torch_xla.pjrt.distributed import PeerTimeoutError

    if index == 1:
        time.sleep(late_by_s)
    try:
        xm.rendezvous("late_peer_worker")
        error = None
    except PeerTimeoutError as caught:
        error = {"message": str(caught), "missing": caught.missing}
    return {"error": error, "after": xm.rendezvous("late_peer_worker.after", b"%d" % index)}


def divergent_worker(index: int) -> None:
    """Bakes the ordinal into the graph as a constant: the processes' programs differ."""
    import torch_xla.core.xla_model as xm

    xm.all_reduce(xm.REDUCE_SUM, torch.full((2,), index + 1.0, device=xm.xla_device())).cpu()


def ordinal_arithmetic_worker(index: int) -> list[list[float]]:
    """Python numbers that depend on the ordinal (0 or 1 on some processes) in ops before
    a collective: every process must still build the same program."""
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()
    x = torch.arange(2, dtype=torch.int64, device=device) + 1 + 2 * index
    y = torch.ones(3, device=device) * index - index
    return [xm.all_reduce(xm.REDUCE_SUM, x).cpu().tolist(),
            xm.all_reduce(xm.REDUCE_SUM, y).cpu().tolist()]


def topology_worker(index: int) -> dict[str, Any]:
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    return {
        "index": index,
        "world_size": xr.world_size(),
        "global_ordinal": xr.global_ordinal(),
        "local_ordinal": xr.local_ordinal(),
        "addressable": xr.addressable_device_count(),
        "global_devices": xr.global_device_count(),
        "process_index": xr.process_index(),
        "process_count": xr.process_count(),
        "devices": xm.get_xla_supported_devices(),
        "master": xm.is_master_ordinal(),
    }


def environment_worker(index: int, name: str) -> str | None:
    """Prints and returns the variable `name` as this replica sees it."""
    value = os.environ.get(name)
    os.write(1, f"replica {index} sees {name}={value}\n".encode())  # one write: lines whole
    return value


def orphan_worker(index: int, pid_dir: str) -> None:
    """Writes this replica's pid into `pid_dir`, then sleeps: a test kills the parent."""
    with open(os.path.join(pid_dir, f"{index}.pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(SLEEP_UNTIL_STOPPED_S)
