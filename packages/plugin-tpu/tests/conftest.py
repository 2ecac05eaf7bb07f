import os
from pathlib import Path

import pytest

TPU_ENV = (
    "TPU_LIBRARY_PATH",
    "TPU_VISIBLE_CHIPS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS",
    "TPU_PROCESS_BOUNDS",
    "TPU_CHIPS_PER_HOST_BOUNDS",
    "TPU_HOST_BOUNDS",
    "TPU_PROCESS_ADDRESSES",
    "TPU_PROCESS_PORT",
    "CLOUD_TPU_TASK_ID",
    "TPU_WORKER_ID",
    "TPU_WORKER_HOSTNAMES",
    "XLA_TPU_MAX_INFLIGHT_COMPUTATIONS",
    "XLA_DENSE_GATHER_FACTOR",
    "PJRT_DEVICE",
)


@pytest.fixture(autouse=True)
def clean_tpu_env(monkeypatch):
    """Every test starts without TPU variables; whatever it sets is undone."""
    for name in TPU_ENV:
        monkeypatch.delenv(name, raising=False)


def make_pci_tree(root: Path, devices: list[tuple[str, str]]) -> Path:
    """A fake /sys/bus/pci/devices: one directory per (vendor, device) PCI function."""
    root.mkdir(parents=True, exist_ok=True)
    for index, (vendor, device) in enumerate(devices):
        function = root / f"0000:00:{index + 4:02x}.0"
        function.mkdir()
        (function / "vendor").write_text(vendor + "\n")
        (function / "device").write_text(device + "\n")
    return root


@pytest.fixture
def pci_tree(tmp_path):
    def build(devices: list[tuple[str, str]]) -> str:
        return os.fspath(make_pci_tree(tmp_path / "pci", devices))

    return build
