"""`torch.xla`: the device module PyTorch consults for the xla device (seeding, counts)."""

from __future__ import annotations

import contextlib

import torch

_STATE_BYTES = 8  # the device RNG state (`lazy/rng.py`) is one 64-bit integer per process


class XlaDeviceModule:
    """The functions PyTorch looks up on a backend's device module."""

    def is_available(self) -> bool:
        return True

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        """The dtypes `torch.autocast('xla', dtype=...)` accepts."""
        from torch_xla.backend import autocast

        return list(autocast.SUPPORTED_DTYPES)

    def is_initialized(self) -> bool:
        from torch_xla.pjrt.client import started

        return started() is not None

    def device_count(self) -> int:
        from torch_xla.pjrt.client import client

        return client().device_count()

    def current_device(self) -> int:
        return 0

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed(self, seed: int) -> None:
        from torch_xla.lazy import rng

        rng.set_state(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def get_rng_state(self, device=None) -> torch.Tensor:
        """The device generator's state as a CPU uint8 tensor, like `torch.cuda.get_rng_state`.

        There is one state per process, shared by every xla device."""
        from torch_xla.lazy import rng

        state = rng.get_state().to_bytes(_STATE_BYTES, "little")
        return torch.frombuffer(bytearray(state), dtype=torch.uint8)

    def set_rng_state(self, new_state: torch.Tensor, device=None) -> None:
        """Restore a state returned by `get_rng_state`."""
        from torch_xla.lazy import rng

        if new_state.dtype != torch.uint8 or new_state.numel() != _STATE_BYTES:
            raise ValueError(
                f"an xla RNG state is {_STATE_BYTES} uint8 values (from "
                f"torch.xla.get_rng_state()); got {new_state.numel()} {new_state.dtype} "
                "values. To seed the device use torch.xla.manual_seed(seed)."
            )
        rng.set_state(int.from_bytes(bytes(new_state.cpu().tolist()), "little"))

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.get_rng_state(i) for i in range(self.device_count())]

    def set_rng_state_all(self, new_states: list[torch.Tensor]) -> None:
        for state in new_states:
            self.set_rng_state(state)

    def synchronize(self, device=None) -> None:
        from torch_xla.lazy import graph

        graph.wait_device_ops()

    # XLA orders a device's work itself: one stream per process stands for it, enough for
    # callers that overlap copies with streams (torch.distributed.checkpoint's writer).
    def current_stream(self, device=None) -> XlaStream:
        return _STREAM

    def default_stream(self, device=None) -> XlaStream:
        return _STREAM

    def stream(self, stream: XlaStream | None) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(stream)


class XlaStream:
    """The one stream of the xla device: waiting on it waits for all queued device work."""

    def synchronize(self) -> None:
        from torch_xla.lazy import graph

        graph.wait_device_ops()

    def wait_stream(self, stream: XlaStream) -> None:
        """Nothing to wait for: there is no other stream."""

    def query(self) -> bool:
        return True


_STREAM = XlaStream()
