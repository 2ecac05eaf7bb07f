"""The `xla` backend of `torch.distributed`, so `dist.*` collectives and DDP run on XLA.

    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # registers "xla" and the "xla://" init method

    def _mp_fn(index):
        dist.init_process_group("xla", init_method="xla://")
        dist.all_reduce(t)                     # t on the xla device
        model = DDP(model)                     # gradients averaged by the backend

Each call records the matching `xm` collective, so it runs inside the step's compiled
program (see docs/guide/distributed.md); the returned work is already complete.

A group made with `dist.new_group(ranks)` runs its collectives over *replica groups*
(`_mesh`, as in PyTorch/XLA): XLA programs are replicated over the whole job, so every
process takes part and each runs the collective within its own group. The groups are
inferred from `ranks` as PyTorch/XLA does: all ranks, one rank (every rank alone), or, with
`pg_options={'xla_pg_options': {'spmd': True}}`, the rectangular mesh of which `ranks` is
a row or a column (`{'xla_pg_options': {'mesh': [[...], ...]}}` gives it explicitly).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import torch
import torch._dynamo
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, ReduceOp, Work, _DistributedBackendOptions

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla._internal import rendezvous
from torch_xla.lowering import collectives

BACKEND = "xla"
logger = logging.getLogger("torch_xla")

def _ret_work(result: Any) -> Work:
    """A finished `Work` holding `result`: the collective is already part of the graph."""
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


class ProcessGroupXla(ProcessGroup):
    """A `torch.distributed` group whose collectives become XLA collectives in the step."""

    def __init__(self, prefix_store: Any, rank: int, size: int,
                 timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)
        self.prefix_store = prefix_store
        self.timeout = timeout
        self._mesh: list[list[int]] = []  # replica groups; [] is one group of everyone
        self._group_name = ""

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    # --- helpers ------------------------------------------------------------------

    def replica_groups(self) -> list[list[int]] | None:
        """This group's replica groups (None: one group of every replica), which torch's
        functional collectives on XLA tensors also use (`lazy/functional_collectives.py`)."""
        return self._mesh or None

    def _group_size(self) -> int:
        return len(self._mesh[0]) if self._mesh else self.size()

    def _is_identity(self) -> bool:
        """Whether reducing or broadcasting over this group changes nothing and records
        nothing: groups of one replica each (`new_group([r])`, whatever the world), or a
        world of one without XLA_ALWAYS_ALLREDUCE."""
        return self._group_size() == 1 and (bool(self._mesh) or not collectives.records(1))

    def _reduce_type(self, op: Any) -> tuple[str, float]:
        """(xm reduce type, scale) for a `ReduceOp` (AVG is SUM scaled by the group size)."""
        if op == ReduceOp.AVG:
            return xm.REDUCE_SUM, 1.0 / self._group_size()
        for name, reduce_type in collectives.REDUCE_TYPE_OF_TORCH_OP.items():
            if op == getattr(ReduceOp, name.upper()):
                return reduce_type, 1.0
        raise NotImplementedError(
            f"The xla backend cannot reduce with {op}; use SUM, AVG, PRODUCT, MIN, MAX, BAND "
            "or BOR."
        )

    # --- all-reduce and broadcast ---------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        reduce_type, scale = self._reduce_type(opts.reduceOp if opts else ReduceOp.SUM)
        if not self._is_identity():
            xm.all_reduce(reduce_type, tensors, scale=scale, groups=self.replica_groups(),
                          pin_layout=False)
        return _ret_work(tensors)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        root = opts.rootRank if opts is not None else 0
        if not self._is_identity():
            # Every process passes its own group's root: the 1-or-0 factor is data.
            xm.collective_broadcast(tensors, self._global_rank_of(root),
                                    groups=self.replica_groups(), pin_layout=False)
        return _ret_work(tensors)

    def _global_rank_of(self, group_rank: int) -> int:
        """The global ordinal of rank `group_rank` of this process's replica group."""
        if not self._mesh:
            return group_rank
        me = xr.global_ordinal()
        mine = next((g for g in self._mesh if me in g), None)
        if mine is None:
            raise ValueError(f"Process {me} is in none of this group's replica groups "
                             f"{self._mesh}.")
        return mine[group_rank]

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        # Every rank gets the result; torch only promises it on the root.
        return self.allreduce(tensors, opts)

    # --- all-gather -----------------------------------------------------------------

    def _gathered(self, value: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Every group member's `value`, concatenated along dim 0 (0-d values as 1-d)."""
        scalar = value.dim() == 0
        value = value.reshape(1) if scalar else value
        return xm.all_gather(value, dim=0, groups=self.replica_groups(), pin_layout=False), scalar

    def allgather(self, output_tensors_list: list[list[torch.Tensor]],
                  input_tensors: list[torch.Tensor], opts: Any = None) -> Work:
        for value, outputs in zip(input_tensors, output_tensors_list, strict=True):
            gathered, scalar = self._gathered(value)
            parts = torch.split(gathered, 1 if scalar else value.shape[0])
            with torch.no_grad():
                for out, part in zip(outputs, parts, strict=False):
                    out.copy_(part.reshape(()) if scalar else part)
        return _ret_work([t for outputs in output_tensors_list for t in outputs])

    def allgather_coalesced(self, output_tensors_list: list[list[torch.Tensor]],
                            input_tensors: list[torch.Tensor], opts: Any = None) -> Work:
        """Every input gathered by one collective (`xm.all_gather` of a list)."""
        flat = [t.reshape(1) if t.dim() == 0 else t for t in input_tensors]
        gathered = xm.all_gather(flat, dim=0, groups=self.replica_groups(), pin_layout=False)
        for value, result, outputs in zip(input_tensors, gathered, output_tensors_list,
                                          strict=True):
            parts = torch.split(result, max(value.numel(), 1) if value.dim() == 0
                                else value.shape[0])
            with torch.no_grad():
                for out, part in zip(outputs, parts, strict=False):
                    out.copy_(part.reshape(()) if value.dim() == 0 else part)
        return _ret_work([t for outputs in output_tensors_list for t in outputs])

    def _allgather_base(self, output: torch.Tensor, value: torch.Tensor,
                        opts: Any = None) -> Work:
        """`all_gather_into_tensor`: `output` holds the parts concatenated or stacked."""
        gathered, _ = self._gathered(value)
        if gathered.shape != output.shape:
            gathered = gathered.reshape(output.shape) if gathered.numel() == output.numel() \
                else None
        if gathered is None:
            raise ValueError(
                f"all_gather_into_tensor: input shape {tuple(value.shape)} and output shape "
                f"{tuple(output.shape)} are not compatible for a group of "
                f"{self._group_size()}; the output must hold the inputs concatenated along "
                "dim 0 or stacked."
            )
        with torch.no_grad():
            output.copy_(gathered)
        return _ret_work([output])

    def all_gather_single(self, output: torch.Tensor, value: torch.Tensor,
                          opts: Any = None) -> Work:
        return self._allgather_base(output, value, opts)

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> Work:
        for output, value in zip(outputs, inputs, strict=True):
            self._allgather_base(output, value, opts)
        return _ret_work(outputs)

    # --- reduce-scatter and all-to-all ------------------------------------------------

    def _reduce_scatter_into(self, output: torch.Tensor, value: torch.Tensor, opts: Any) -> None:
        reduce_type, scale = self._reduce_type(opts.reduceOp if opts else ReduceOp.SUM)
        xm.reduce_scatter(reduce_type, value, scale, 0, self._group_size(),
                          groups=self.replica_groups(), output=output, pin_layout=False)

    def reduce_scatter(self, output_tensors: list[torch.Tensor],
                       input_tensors_list: list[list[torch.Tensor]], opts: Any = None) -> Work:
        for output, parts in zip(output_tensors, input_tensors_list, strict=True):
            shapes = {tuple(p.shape) for p in parts}
            if len(shapes) != 1:
                raise ValueError(f"reduce_scatter: every input must have one shape, got "
                                 f"{[tuple(p.shape) for p in parts]}.")
            self._reduce_scatter_into(output, torch.cat(list(parts)), opts)
        return _ret_work(output_tensors)

    def reduce_scatter_coalesced(self, output_tensors: list[torch.Tensor],
                                 input_tensors_list: list[list[torch.Tensor]],
                                 opts: Any = None) -> Work:
        return self.reduce_scatter(output_tensors, input_tensors_list, opts)

    def _reduce_scatter_base(self, output: torch.Tensor, value: torch.Tensor,
                             opts: Any = None) -> Work:
        self._reduce_scatter_into(output, value, opts)
        return _ret_work(output)

    def reduce_scatter_single(self, output: torch.Tensor, value: torch.Tensor,
                              opts: Any = None) -> Work:
        return self._reduce_scatter_base(output, value, opts)

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> Work:
        for output, value in zip(outputs, inputs, strict=True):
            self._reduce_scatter_into(output, value, opts)
        return _ret_work(outputs)

    def alltoall_base(self, output: torch.Tensor, value: torch.Tensor,
                      output_split_sizes: list[int] | None, input_split_sizes: list[int] | None,
                      opts: Any = None) -> Work:
        if output_split_sizes or input_split_sizes:
            raise NotImplementedError(
                "The xla backend's all_to_all_single needs equal splits: XLA's all-to-all "
                f"cannot take split sizes (got {input_split_sizes} / {output_split_sizes})."
            )
        result = xm.all_to_all(value, 0, 0, self._group_size(), groups=self.replica_groups(),
                               pin_layout=False)
        with torch.no_grad():
            output.copy_(result)
        return _ret_work(output)

    def all_to_all_single(self, output: torch.Tensor, value: torch.Tensor,
                          output_split_sizes: list[int] | None,
                          input_split_sizes: list[int] | None, opts: Any = None) -> Work:
        return self.alltoall_base(output, value, output_split_sizes, input_split_sizes, opts)

    def barrier(self, opts: Any = None) -> Work:
        xm.rendezvous("torch_xla.distributed.xla_backend.barrier")
        return _ret_work([])

    # --- not supported (as in PyTorch/XLA) ---------------------------------------

    def _unsupported(self, name: str) -> Work:
        raise NotImplementedError(
            f"ProcessGroupXla.{name} is not supported by the xla backend; use a gloo process "
            "group on CPU tensors for it."
        )

    def allreduce_coalesced(self, *args: Any) -> Work:
        return self._unsupported("allreduce_coalesced (use dist.all_reduce per tensor)")

    def alltoall(self, *args: Any) -> Work:
        return self._unsupported("alltoall (use all_to_all_single)")

    def gather(self, *args: Any) -> Work:
        return self._unsupported("gather")

    def scatter(self, *args: Any) -> Work:
        return self._unsupported("scatter")

    def send(self, *args: Any) -> Work:
        return self._unsupported("send")

    def recv(self, *args: Any) -> Work:
        return self._unsupported("recv")

    def recv_anysource(self, *args: Any) -> Work:
        return self._unsupported("recv_anysource")

    def monitored_barrier(self, *args: Any) -> Work:
        return self._unsupported("monitored_barrier (use barrier)")

    def Options(self, *args: Any) -> Any:  # noqa: N802 - torch's name
        return self._unsupported("Options")


# --- creating groups -----------------------------------------------------------------


class SpmdBackendError(AssertionError):
    """The 'xla' backend was asked for in SPMD mode (an AssertionError, as PyTorch/XLA's)."""


def _create_xla_process_group(prefix_store: Any, rank: Any = None, size: int | None = None,
                              timeout: datetime.timedelta | None = None) -> ProcessGroupXla:
    """The backend's creator. torch calls it with its extended arguments (the backend
    options, then the group's `pg_options`); PyTorch/XLA's tests call it as
    `(prefix_store, rank, size, timeout)`."""
    if xr.is_spmd():
        raise SpmdBackendError(
            "The 'xla' torch.distributed backend does not run in SPMD mode: there one "
            "process drives every device and XLA's partitioner inserts the collectives. "
            "Shard tensors with torch_xla.distributed.spmd instead, or leave SPMD mode "
            "(no xr.use_spmd(), XLA_USE_SPMD unset) to use torch.distributed.")
    if not isinstance(prefix_store, _DistributedBackendOptions):
        return ProcessGroupXla(prefix_store, rank, size, timeout or dist.default_pg_timeout)
    options, pg_options = prefix_store, rank
    group = ProcessGroupXla(options.store, options.group_rank, options.group_size,
                            options.timeout)
    group._mesh = _mesh_for(list(options.global_ranks_in_group), pg_options)
    return group


def _mesh_for(ranks: list[int], pg_options: Any) -> list[list[int]]:
    """The replica groups of a group of global `ranks` ([] for the default group)."""
    world = dist.group.WORLD
    if not ranks or world is None:
        return []
    if not isinstance(world, ProcessGroupXla):
        raise RuntimeError("The xla backend needs the default process group to be an xla one; "
                           f"it is {type(world).__name__}. Call "
                           "dist.init_process_group('xla', init_method='xla://') first.")
    size = world.size()
    options = pg_options.get("xla_pg_options", {}) if isinstance(pg_options, dict) else {}
    if ranks == list(range(size)):
        return [ranks]
    if len(ranks) == 1:
        if not 0 <= ranks[0] < size:
            raise ValueError(f"Rank {ranks[0]} is out of range for world size {size}.")
        return [[r] for r in range(size)]
    if 1 < len(ranks) < size:
        if options.get("mesh") is not None:
            return [list(g) for g in options["mesh"]]
        if options.get("spmd"):
            return infer_mesh(ranks, size)
        return [ranks]
    logger.warning("Cannot infer the replica groups of ranks %s in a world of %d; the group "
                   "runs its collectives over every process.", ranks, size)
    return []


def infer_mesh(slice_ranks: list[int], world_size: int) -> list[list[int]]:
    """The rectangular mesh of `world_size` ranks of which `slice_ranks` is a row (a run of
    consecutive ranks) or a column (ranks `world_size // len` apart), as PyTorch/XLA infers.

    Raises ValueError when `slice_ranks` is neither.
    """
    count = len(slice_ranks)
    if world_size % count != 0:
        raise ValueError(f"A group of {count} ranks cannot be a side of a rectangle of "
                         f"{world_size} ranks: {slice_ranks}.")
    start = slice_ranks[0]
    step = slice_ranks[1] - start
    if slice_ranks != list(range(start, start + step * count, step)):
        raise ValueError(f"Ranks {slice_ranks} are not evenly spaced: not a row or column of "
                         "a mesh.")
    rows = world_size // count
    if step == 1:
        if start % count != 0:
            raise ValueError(f"Row {slice_ranks} does not start at a multiple of {count} in a "
                             f"world of {world_size}.")
        return [list(range(i * count, (i + 1) * count)) for i in range(rows)]
    if start >= rows or step != rows:
        raise ValueError(f"Column {slice_ranks} of a world of {world_size} must start below "
                         f"{rows} and step by {rows}.")
    return [list(range(i, world_size, rows)) for i in range(rows)]


def new_xla_process_group(ranks: list[int] | range | None = None,
                          timeout: datetime.timedelta | None = None, backend: Any = None,
                          pg_options: Any = None) -> Any:
    """`dist.new_group(ranks, timeout, backend, pg_options)`, by PyTorch/XLA's name for it
    (which patches `dist.new_group` to it). The replica groups of an xla group are inferred
    from `ranks` and `pg_options` when the backend creates it, so both give the same group."""
    return dist.new_group(ranks=list(ranks) if isinstance(ranks, range) else ranks,
                          timeout=timeout, backend=backend, pg_options=pg_options)


# torch's C++ (DDP's reducer, c10d) calls this backend's Python methods while dynamo's frame
# callback may be set (a DDP module under torch.compile): dynamo must run their frames, not
# compile them (it cannot trace a process group's Python attributes).
torch._dynamo.trace_rules.add(__name__)

if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create_xla_process_group, extended_api=True,
                                  devices=["xla"])
    dist.register_rendezvous_handler("xla", rendezvous.pjrt_rendezvous_handler)
