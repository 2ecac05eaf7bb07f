"""The `xla` backend of `torch.distributed`, so `dist.*` collectives and DDP run on XLA.

    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # registers "xla" and the "xla://" init method

    def _mp_fn(index):
        dist.init_process_group("xla", init_method="xla://")
        dist.all_reduce(t)                     # t on the xla device
        model = DDP(model)                     # gradients averaged by the backend

Each call records the matching `xm` collective, so it runs inside the step's
compiled program (see docs/guide/distributed.md); the returned work is already
complete. Only the default group (every process) is supported: XLA programs
are replicated over the whole job.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceOp, Work

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

BACKEND = "xla"
_REDUCE_TYPES = {
    ReduceOp.SUM: xm.REDUCE_SUM,
    ReduceOp.PRODUCT: xm.REDUCE_MUL,
    ReduceOp.MIN: xm.REDUCE_MIN,
    ReduceOp.MAX: xm.REDUCE_MAX,
    ReduceOp.BAND: xm.REDUCE_AND,
    ReduceOp.BOR: xm.REDUCE_OR,
}


def _done(result: Any) -> Work:
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


def _reduce_type(opts: Any) -> tuple[str, float]:
    """(xm reduce type, scale) for the ReduceOp of torch.distributed options (SUM if none)."""
    op = opts.reduceOp if opts is not None else ReduceOp.SUM
    if op == ReduceOp.AVG:
        return xm.REDUCE_SUM, 1.0 / xr.world_size()
    for known, reduce_type in _REDUCE_TYPES.items():
        if op == known:
            return reduce_type, 1.0
    raise ValueError(f"The xla backend cannot reduce with {op}; use SUM, AVG, PRODUCT, MIN, "
                     "MAX, BAND or BOR.")


class ProcessGroupXla(ProcessGroup):
    """Every process of the job; collectives become XLA collectives in the step's graph."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)
        if size != xr.world_size():
            raise NotImplementedError(
                f"The xla backend supports only the group of every process ({xr.world_size()}); "
                f"a group of {size} was requested. Use xm collectives with `groups=` for "
                "replica groups."
            )
        self._store = store
        self._timeout = timeout

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        reduce_type, scale = _reduce_type(opts)
        xm.all_reduce(reduce_type, tensors, scale=scale)
        return _done(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        return self.allreduce(tensors, opts)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> Work:
        for out_list, value in zip(outputs, inputs, strict=True):
            gathered = xm.all_gather(value.unsqueeze(0), dim=0)
            with torch.no_grad():
                for k, out in enumerate(out_list):
                    out.copy_(gathered[k])
        return _done(outputs)

    def _allgather_base(self, output: torch.Tensor, value: torch.Tensor,
                        opts: Any = None) -> Work:
        with torch.no_grad():
            output.copy_(xm.all_gather(value, dim=0).view_as(output))
        return _done(output)

    def all_gather_single(self, output: torch.Tensor, value: torch.Tensor,
                          opts: Any = None) -> Work:
        return self._allgather_base(output, value, opts)

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> Work:
        for output, value in zip(outputs, inputs, strict=True):
            self._allgather_base(output, value, opts)
        return _done(outputs)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        root = opts.rootRank if opts is not None else 0
        for t in tensors:
            # The root flag is data, so every process records the same graph.
            is_root = torch.tensor(self.rank() == root).to(t.device)
            mine = torch.where(is_root, t, torch.zeros_like(t))
            if t.dtype == torch.bool:
                value = xm.all_reduce(xm.REDUCE_OR, mine)
            else:
                value = xm.all_reduce(xm.REDUCE_SUM, mine)
            with torch.no_grad():
                t.copy_(value)
        return _done(tensors)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        # Every rank gets the result; torch only promises it on the root.
        return self.allreduce(tensors, opts)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> Work:
        reduce_type, scale = _reduce_type(opts)
        for output, parts in zip(outputs, inputs, strict=True):
            stacked = torch.stack(list(parts))
            part = xm.reduce_scatter(reduce_type, stacked, scale, 0, self.size())
            with torch.no_grad():
                output.copy_(part[0])
        return _done(outputs)

    def _reduce_scatter_base(self, output: torch.Tensor, value: torch.Tensor,
                             opts: Any = None) -> Work:
        reduce_type, scale = _reduce_type(opts)
        with torch.no_grad():
            output.copy_(xm.reduce_scatter(reduce_type, value, scale, 0, self.size()))
        return _done(output)

    def reduce_scatter_single(self, output: torch.Tensor, value: torch.Tensor,
                              opts: Any = None) -> Work:
        return self._reduce_scatter_base(output, value, opts)

    def alltoall_base(self, output: torch.Tensor, value: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int],
                      opts: Any = None) -> Work:
        if output_split_sizes or input_split_sizes:
            raise NotImplementedError("The xla backend's all_to_all_single needs equal splits "
                                      "(no split sizes).")
        with torch.no_grad():
            output.copy_(xm.all_to_all(value, 0, 0, self.size()))
        return _done(output)

    def barrier(self, opts: Any = None) -> Work:
        xm.rendezvous("torch_xla.distributed.xla_backend.barrier")
        return _done(None)

    def _unsupported(self, name: str) -> None:
        raise NotImplementedError(
            f"torch.distributed.{name} is not supported by the xla backend; use a gloo "
            "process group on CPU tensors for it."
        )

    def send(self, *args: Any) -> Work:
        self._unsupported("send")

    def recv(self, *args: Any) -> Work:
        self._unsupported("recv")

    def recv_anysource(self, *args: Any) -> Work:
        self._unsupported("recv")

    def gather(self, *args: Any) -> Work:
        self._unsupported("gather")

    def scatter(self, *args: Any) -> Work:
        self._unsupported("scatter")


def _create(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> ProcessGroupXla:
    return ProcessGroupXla(store, rank, size, timeout)


def _rendezvous(url: str, timeout: datetime.timedelta = dist.default_pg_timeout,
                **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
    """`xla://`: rank and size from the runtime, a TCP store on MASTER_ADDR:MASTER_PORT."""
    rank, size = xr.global_ordinal(), xr.world_size()
    host = os.environ.get("MASTER_ADDR", "localhost")
    port = os.environ.get("MASTER_PORT")
    if not port:
        raise ValueError(
            "init_method='xla://' needs MASTER_PORT (xmp.spawn sets it; with another launcher "
            "export MASTER_ADDR and MASTER_PORT)."
        )
    store = dist.TCPStore(host, int(port), size, is_master=rank == 0, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("the xla:// rendezvous cannot be restarted")


if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create, devices=["xla"])
    dist.register_rendezvous_handler("xla", _rendezvous)
