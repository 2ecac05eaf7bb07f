import os

import pytest

from torch_xla.plugins import PluginError
from torch_xla_tpu import topology

GOOGLE = "0x1ae0"
INTEL = "0x8086"
HOST_BRIDGE = (INTEL, "0x1237")  # every fake host also has unrelated PCI devices
NIC = (GOOGLE, "0x0001")  # a Google device that is not a TPU (gVNIC)


# (generation, PCI device id, chips on one host, PJRT devices)
HOSTS = [
    ("v2/v3", "0x0027", 4, 8),  # v2-8 / v3-8: two cores per chip
    ("v4", "0x005e", 4, 4),
    ("v5p", "0x0062", 4, 4),
    ("v5e", "0x0063", 8, 8),
    ("v6e", "0x006f", 8, 8),
    ("v6e", "0x006f", 1, 1),
]


@pytest.mark.parametrize(("name", "device_id", "chips", "devices"), HOSTS)
def test_find_chips_counts_tpus_on_fake_pci_trees(pci_tree, name, device_id, chips, devices):
    root = pci_tree([HOST_BRIDGE, NIC] + [(GOOGLE, device_id)] * chips)
    found = topology.find_chips(root)
    assert (found.count, found.generation.name, found.devices) == (chips, name, devices)


def test_find_chips_ignores_non_tpu_and_unreadable_entries(pci_tree, tmp_path):
    root = pci_tree([HOST_BRIDGE, NIC, (INTEL, "0x0027")])
    os.mkdir(os.path.join(root, "not-a-pci-function"))
    assert topology.find_chips(root) == topology.LocalChips(0, None)


def test_find_chips_on_a_missing_root_finds_none(tmp_path):
    assert topology.find_chips(tmp_path / "absent").count == 0


def test_this_machine_has_no_tpu():
    assert topology.find_chips().count == 0  # the real /sys/bus/pci/devices here


def test_parse_bounds():
    assert topology.parse_bounds("X", "2,2,1") == (2, 2, 1)
    for bad in ("2,2", "a,b,c", "0,1,1", ""):
        with pytest.raises(PluginError, match="three positive integers"):
            topology.parse_bounds("TPU_PROCESS_BOUNDS", bad)


def test_process_bounds_size(monkeypatch):
    assert topology.process_bounds_size() is None
    monkeypatch.setenv("TPU_PROCESS_BOUNDS", "2,2,1")
    assert topology.process_bounds_size() == 4


def test_single_process_sets_defaults_without_overriding(monkeypatch):
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "3")
    topology.configure_single_process()
    assert os.environ["TPU_VISIBLE_CHIPS"] == "3"
    assert os.environ["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,1,1"
    assert os.environ["TPU_PROCESS_BOUNDS"] == "1,1,1"


V4 = topology.GENERATIONS["0x005e"]
V3 = topology.GENERATIONS["0x0027"]


def test_multiprocess_env_one_host_four_chips():
    env = topology.multiprocess_env(1, 4, V4)
    assert env == {
        "TPU_VISIBLE_CHIPS": "1",
        "TPU_PROCESS_PORT": "8477",
        "TPU_PROCESS_ADDRESSES": "localhost:8476,localhost:8477,localhost:8478,localhost:8479",
        "CLOUD_TPU_TASK_ID": "1",
        "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_BOUNDS": "2,2,1",
    }


def test_multiprocess_env_second_host_of_two(monkeypatch):
    monkeypatch.setenv("TPU_WORKER_ID", "1")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "10.0.0.1,10.0.0.2")
    monkeypatch.setenv("TPU_HOST_BOUNDS", "1,1,2")
    env = topology.multiprocess_env(2, 4, V4)
    assert env["CLOUD_TPU_TASK_ID"] == "6"
    assert env["TPU_PROCESS_BOUNDS"] == "2,2,2"
    assert env["TPU_PROCESS_ADDRESSES"].split(",") == [
        f"10.0.0.{host}:{port}" for host in (1, 2) for port in range(8476, 8480)
    ]


def test_multiprocess_env_eight_chip_host():
    assert topology.multiprocess_env(7, 8, V4)["TPU_PROCESS_BOUNDS"] == "2,4,1"


def test_v2_v3_get_no_bounds_as_in_pytorch_xla():
    env = topology.multiprocess_env(0, 4, V3)
    assert "TPU_PROCESS_BOUNDS" not in env and "TPU_CHIPS_PER_PROCESS_BOUNDS" not in env
    assert env["TPU_VISIBLE_CHIPS"] == "0"


def test_unknown_host_layout_needs_explicit_bounds(monkeypatch):
    with pytest.raises(PluginError, match="TPU_CHIPS_PER_HOST_BOUNDS"):
        topology.multiprocess_env(0, 3, V4)
    monkeypatch.setenv("TPU_CHIPS_PER_HOST_BOUNDS", "3,1,1")
    assert topology.multiprocess_env(0, 3, V4)["TPU_PROCESS_BOUNDS"] == "3,1,1"


def test_bad_rank_is_an_error():
    with pytest.raises(PluginError, match="rank 4 is outside 0..3"):
        topology.multiprocess_env(4, 4, V4)


def test_configure_multiprocess_keeps_user_values(monkeypatch):
    monkeypatch.setenv("TPU_PROCESS_BOUNDS", "4,4,1")  # a user-given slice; not re-derived
    monkeypatch.setenv("TPU_PROCESS_PORT", "9000")
    topology.configure_multiprocess(2, 3, V4)  # 3 processes: no known layout, but not needed
    assert os.environ["TPU_PROCESS_BOUNDS"] == "4,4,1"
    assert os.environ["TPU_PROCESS_PORT"] == "9000"
    assert os.environ["TPU_VISIBLE_CHIPS"] == "2"
    assert os.environ["CLOUD_TPU_TASK_ID"] == "2"


def test_bad_worker_id_is_an_error(monkeypatch):
    monkeypatch.setenv("TPU_WORKER_ID", "first")
    with pytest.raises(PluginError, match="TPU_WORKER_ID='first' is not a non-negative integer"):
        topology.worker_id()
