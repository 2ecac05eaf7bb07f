"""The `xla://` init method of `torch.distributed` (`pjrt_rendezvous_handler`).

Rank and world size come from the runtime, so the same line works under every launcher:

- `xmp.spawn` / `torch_xla.launch`: one process per device, MASTER_ADDR/MASTER_PORT set
  by the launcher;
- torchrun (or any launcher that exports RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT): the runtime joins the job from those variables (see
  `torch_xla.pjrt.distributed`); under torchrun's agent store
  (TORCHELASTIC_USE_AGENT_STORE=True) the process connects to the agent's store;
- a single process with no launcher: a world of one.

In SPMD mode the ranks are the processes (`xr.process_index()` of `xr.process_count()`),
not the devices: one program drives every device of a process.

As in PyTorch/XLA, MASTER_ADDR defaults to `localhost` and MASTER_PORT to 12355. The store
is made once per process and shared by every group built on it.
"""

from __future__ import annotations

import datetime
import os
import threading
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

import torch_xla.runtime as xr
from torch_xla.pjrt.distributed import DistributedError

DEFAULT_MASTER_ADDR = "localhost"
DEFAULT_MASTER_PORT = 12355

_store: Any = None
_store_lock = threading.Lock()


def _master_port() -> int:
    text = os.environ.get("MASTER_PORT", "").strip()
    if not text:
        return DEFAULT_MASTER_PORT
    try:
        return int(text)
    except ValueError:
        raise DistributedError(
            f"MASTER_PORT={text!r} is not a port number; set it to a free TCP port (e.g. "
            f"{DEFAULT_MASTER_PORT}) or unset it for that default."
        ) from None


def _make_store(timeout: datetime.timedelta) -> Any:
    """The job's key-value store: the process 0 hosts it, the others connect."""
    count = xr.process_count()
    if count == 1 and not dist.is_torchelastic_launched():
        return dist.HashStore()  # one process: nothing to connect to, no port to take
    host = os.environ.get("MASTER_ADDR", "").strip() or DEFAULT_MASTER_ADDR
    port = _master_port()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
        agent = dist.TCPStore(host, port, count, is_master=False, timeout=timeout)
        return dist.PrefixStore(f"/worker/attempt_{attempt}", agent)
    return dist.TCPStore(host, port, count, is_master=xr.process_index() == 0, timeout=timeout)


def pjrt_rendezvous_handler(
    url: str, timeout: datetime.timedelta = dist.default_pg_timeout, **kwargs: Any
) -> Iterator[tuple[Any, int, int]]:
    """Yield (store, rank, world size) for `init_process_group(init_method='xla://')`:
    one rank per replica, or in SPMD mode (one program over every device, a process per
    host) one rank per process, the group `torch.distributed.checkpoint` saves over."""
    global _store
    with _store_lock:
        if _store is None:
            _store = _make_store(timeout)
    if xr.is_spmd():
        yield _store, xr.process_index(), xr.process_count()
    else:
        yield _store, xr.global_ordinal(), xr.world_size()
    raise DistributedError("the xla:// rendezvous cannot be restarted")
