"""`torch.xla`: the device module PyTorch consults for the xla device (seeding, counts)."""

from __future__ import annotations


class XlaDeviceModule:
    """The functions PyTorch looks up on a backend's device module."""

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        from torch_xla.pjrt.client import started

        return started() is not None

    def device_count(self) -> int:
        from torch_xla.pjrt.client import client

        return len(client().devices)

    def current_device(self) -> int:
        return 0

    def _is_in_bad_fork(self) -> bool:
        return False

    def manual_seed(self, seed: int) -> None:
        from torch_xla.lazy import rng

        rng.set_state(seed)

    def manual_seed_all(self, seed: int) -> None:
        self.manual_seed(seed)

    def synchronize(self, device=None) -> None:
        from torch_xla.lazy import graph

        graph.wait_device_ops()
