"""`torch_xla.distributed.data_parallel`: one model replica and one thread per device, in
one process (PyTorch/XLA's "MultiCore - MultiThreading").

    model_parallel = DataParallel(MNIST, device_ids=xm.get_xla_supported_devices())

    def train_loop_fn(model, loader, device, context):
        optimizer = context.getattr_or("optimizer", lambda: optim.SGD(model.parameters(), lr))
        for data, target in loader:
            optimizer.zero_grad()
            loss_fn(model(data), target).backward()
            xm.optimizer_step(optimizer)     # averages the gradients over the replicas

    for epoch in range(epochs):
        model_parallel(train_loop_fn, train_loader)

Each call runs one epoch: consecutive batches of `loader` go to the devices in turn
(a last incomplete round is dropped), and `loop_fn` runs in one thread per device with
that device's model copy, loader, device and context. The threads are the replicas of
one job (see `torch_xla.pjrt.threads`): `xm.optimizer_step` all-reduces the gradients
inside each step's compiled program.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from torch_xla.core import xla_model as xm
from torch_xla.distributed import parallel_loader as pl
from torch_xla.pjrt import distributed, threads


class Context:
    """Per-device state kept for the life of the `DataParallel` (across epochs)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def getattr_or(self, name: str, defval: Any) -> Any:
        """Attribute `name`, first set to `defval` (or `defval()` if callable)."""
        value = getattr(self, name, None)
        if value is None:
            value = defval() if callable(defval) else defval
            setattr(self, name, value)
        return value


class DataParallel:
    """Replicates `network` on `device_ids` and trains the copies in threads.

    `network` is a module or a function returning one; `device_ids` defaults to every
    device of this process. With no device (`[]`) the network runs on its own device
    (the CPU) in the calling thread.
    """

    def __init__(self, network: torch.nn.Module | Callable[[], torch.nn.Module],
                 device_ids: list[str | torch.device] | None = None, **kwargs: Any) -> None:
        if device_ids is None:
            device_ids = xm.get_xla_supported_devices()
        self._device_ids = [str(d) for d in device_ids]
        self._kwargs = kwargs  # for the ParallelLoader of each call
        module = network if isinstance(network, torch.nn.Module) else network()
        self._native_run = not self._device_ids
        if self._native_run:
            self._device_ids = [_device_of(module)]
            self._models = [module]
        else:
            self._check_devices()
            self._models = [copy.deepcopy(module).to(torch.device(d)) for d in self._device_ids]
        self._contexts = [Context(torch.device(d)) for d in self._device_ids]

    @property
    def devices(self) -> list[str]:
        return self._device_ids

    @property
    def models(self) -> list[torch.nn.Module]:
        return self._models

    def _check_devices(self) -> None:
        for d in self._device_ids:
            device = torch.device(d)
            if device.type != "xla" or device.index is None:
                raise ValueError(f"DataParallel device_ids must be XLA devices such as 'xla:0', "
                                 f"got {d!r} in {self._device_ids}.")
        if len(set(self._device_ids)) != len(self._device_ids):
            raise ValueError(f"DataParallel device_ids {self._device_ids} name a device twice.")

    def __call__(self, loop_fn: Callable[..., Any], loader: Iterable,
                 fixed_batch_size: bool = False, batchdim: int = 0, **kwargs: Any) -> list[Any]:
        """Run one epoch: `loop_fn(model, device_loader, device, context, **kwargs)` in one
        thread per device; returns the values `loop_fn` returned, in device order.

        `fixed_batch_size`: stop the epoch at the first batch whose size (along
        `batchdim`) differs from the first one's. If a thread raises, the others stop at
        their next step with collectives and the error is raised here.
        """
        if fixed_batch_size:
            loader = _same_size_batches(loader, batchdim)
        if self._native_run:
            device = torch.device(self._device_ids[0])
            return [loop_fn(self._models[0], iter(loader), device, self._contexts[0], **kwargs)]
        xm.wait_device_ops()
        para_loader = pl.ParallelLoader(loader, self._device_ids, batchdim=batchdim,
                                        **self._kwargs)
        indices = [torch.device(d).index for d in self._device_ids]

        def on_my_device() -> Any:
            k = indices.index(threads.current_index())
            device = torch.device(self._device_ids[k])
            return loop_fn(self._models[k], para_loader.per_device_loader(device), device,
                           self._contexts[k], **kwargs)

        try:
            return threads.run(on_my_device, indices, distributed.collective_timeout)
        finally:
            para_loader.close()


def _device_of(module: torch.nn.Module) -> str:
    devices = {str(p.device) for p in module.parameters()}
    if len(devices) > 1:
        raise RuntimeError(f"The model's parameters are on several devices: {sorted(devices)}; "
                           "DataParallel without device_ids runs a model of one device.")
    return devices.pop() if devices else "cpu"


def _same_size_batches(loader: Iterable, batchdim: int) -> Iterator[Any]:
    size = None
    for batch in loader:
        sizes = {t.shape[batchdim] for t in tree_leaves(batch) if isinstance(t, torch.Tensor)}
        this = sizes.pop() if len(sizes) == 1 else None
        if size is None:
            size = this
        elif this != size:
            return
        yield batch
