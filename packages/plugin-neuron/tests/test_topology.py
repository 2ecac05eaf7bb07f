import os

import pytest

from torch_xla.plugins import PluginError
from torch_xla_neuron import topology


def test_core_count_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURONCORE_NUM_DEVICES", "32")
    assert topology.core_count(os.fspath(tmp_path)) == 32
    monkeypatch.setenv("NEURONCORE_NUM_DEVICES", "-1")
    with pytest.raises(PluginError, match="NEURONCORE_NUM_DEVICES='-1'"):
        topology.core_count()


def test_core_count_from_device_nodes(tmp_path):
    assert topology.core_count(os.fspath(tmp_path)) == 0
    (tmp_path / "neuron0").write_text("")  # a fake /dev/neuron0
    assert topology.core_count(os.fspath(tmp_path)) == 1


def test_this_machine_has_no_neuron_device():
    assert topology.core_count() == 0


def test_parse_cores():
    assert topology.parse_cores("3") == [3]
    assert topology.parse_cores("0-3") == [0, 1, 2, 3]
    assert topology.parse_cores("0,2,4-5") == [0, 2, 4, 5]
    with pytest.raises(PluginError, match="not a core list"):
        topology.parse_cores("a-b")


def test_multiprocess_env_one_core_per_process():
    assert topology.multiprocess_env(2, 4) == {
        "NEURON_RT_VISIBLE_CORES": "2",
        "NEURON_PJRT_PROCESS_INDEX": "2",
        "NEURON_PJRT_PROCESSES_NUM_DEVICES": "1,1,1,1",
        "NEURON_PJRT_WORLD_SIZE": "4",
    }


def test_multiprocess_env_under_torchrun_on_two_hosts(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    env = topology.multiprocess_env(1, 4)
    assert env["NEURON_PJRT_PROCESS_INDEX"] == "5"
    assert env["NEURON_PJRT_PROCESSES_NUM_DEVICES"] == ",".join(["1"] * 8)
    assert env["NEURON_RT_VISIBLE_CORES"] == "1"


def test_user_visible_cores_are_split_across_processes(monkeypatch):
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4-7")
    assert topology.multiprocess_env(3, 4)["NEURON_RT_VISIBLE_CORES"] == "7"
    with pytest.raises(PluginError, match="lists 4 core.*8 processes"):
        topology.multiprocess_env(0, 8)


def test_bad_rank_is_an_error():
    with pytest.raises(PluginError, match="rank 2 is outside 0..1"):
        topology.multiprocess_env(2, 2)


def test_configure_multiprocess_sets_the_root_communicator(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    topology.configure_multiprocess(0, 2)
    assert os.environ["NEURON_RT_ROOT_COMM_ID"] == "10.1.2.3:62182"
    assert os.environ["NEURON_PJRT_WORLD_SIZE"] == "2"
    monkeypatch.setenv("NEURON_RT_ROOT_COMM_ID", "host:1234")
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES")  # as in a fresh process
    topology.configure_multiprocess(1, 2)
    assert os.environ["NEURON_RT_ROOT_COMM_ID"] == "host:1234"  # the user's value is kept
