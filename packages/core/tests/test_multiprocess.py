"""xmp.spawn on the CPU plugin: real processes, a real coordinator, collectives over gloo.

Each test starts a fresh interpreter that calls xmp.spawn (the runtime is one per
process, and the pytest process keeps its own); the per-process functions live in
torch_xla.testing.multiprocess so the spawned children can import them.
"""

from __future__ import annotations

import pickle
import time

import pytest
import torch
from conftest import run_python

from torch_xla.testing import multiprocess as mp


def spawn(tmp_path, call: str, devices: int, timeout: float = 240):
    """Run `xmp.spawn(<call>)` in a fresh interpreter; returns its results (or the error)."""
    out = tmp_path / "results.pkl"
    result = run_python(
        f"""
        import pickle
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import multiprocess as mp
        try:
            value = ("ok", xmp.spawn({call}))
        except Exception as error:
            value = ("error", f"{{type(error).__name__}}: {{error}}")
        with open({str(out)!r}, "wb") as f:
            pickle.dump(value, f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices)},
        timeout=timeout,
    )
    assert out.exists(), result.stderr[-3000:]
    with open(out, "rb") as f:
        return pickle.load(f)


def test_each_process_owns_one_device_of_the_job(tmp_path):
    status, results = spawn(tmp_path, "mp.topology_worker", devices=2)
    assert status == "ok", results
    assert sorted(results) == [0, 1]
    for index, seen in results.items():
        assert seen["index"] == seen["global_ordinal"] == seen["local_ordinal"] == index
        assert seen["world_size"] == seen["global_devices"] == seen["process_count"] == 2
        assert seen["addressable"] == 1 and seen["devices"] == ["xla:0"]
        assert seen["process_index"] == index
        assert seen["master"] == (index == 0)


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_match_eager(tmp_path, world):
    status, results = spawn(tmp_path, "mp.collectives_worker", devices=world)
    assert status == "ok", results
    mp.assert_collectives(results, world)


def test_data_parallel_training_equals_eager_on_the_whole_batch(tmp_path):
    checkpoint = tmp_path / "model.pt"
    status, results = spawn(
        tmp_path, f"mp.training_worker, args=(5, 16, {str(checkpoint)!r})", devices=2
    )
    assert status == "ok", results
    want = mp.expected_training(5, 16)
    for index in (0, 1):
        for name, value in want.items():
            torch.testing.assert_close(
                results[index]["state"][name], value, rtol=1e-5, atol=1e-5,
                msg=f"{name} on replica {index}",
            )
        compiles = results[index]["compiles"]
        assert compiles[-1] == compiles[-2], f"a steady step recompiled: {compiles}"
    for name in want:  # the replicas hold bit-identical parameters
        assert torch.equal(results[0]["state"][name], results[1]["state"][name])
    assert results[0]["loss"] == results[1]["loss"]
    saved = torch.load(checkpoint)  # written once, by the master
    for name, value in want.items():
        torch.testing.assert_close(saved[name], value, rtol=1e-5, atol=1e-5)


def test_torch_distributed_xla_backend_and_ddp(tmp_path):
    status, results = spawn(tmp_path, "mp.torch_distributed_worker, args=(4, 16)", devices=2)
    assert status == "ok", results
    want_state = mp.expected_training(4, 16)
    for index in (0, 1):
        got = results[index]
        for name, value in mp.expected_torch_distributed(index, 2).items():
            mp.assert_equal(got[name], value, f"{name} on rank {index}")
        for name, value in want_state.items():  # DDP on halves == eager on whole batches
            torch.testing.assert_close(got["state"][name], value, rtol=1e-5, atol=1e-5,
                                       msg=f"{name} on rank {index}")
        assert got["compiles"][-1] == got["compiles"][-2], got["compiles"]


def test_a_failing_process_stops_the_job_with_its_traceback(tmp_path):
    start = time.monotonic()
    status, error = spawn(tmp_path, "mp.failing_worker", devices=2)
    assert status == "error"
    assert "ProcessFailedError" in error and "Process 1" in error
    assert "replica 1 failed on purpose" in error and "failing_worker" in error
    assert time.monotonic() - start < 120


def test_processes_building_different_collective_graphs_get_a_clear_error(tmp_path):
    status, error = spawn(tmp_path, "mp.divergent_worker", devices=2)
    assert status == "error"
    assert "built a different graph" in error and "torch.tensor(rank)" in error


def test_more_processes_than_devices_is_refused(tmp_path):
    status, error = spawn(tmp_path, "mp.topology_worker, nprocs=3", devices=2)
    assert status == "error"
    assert "nprocs=3" in error and "2 device(s)" in error and "CPU_NUM_DEVICES" in error


def test_one_process_runs_in_place(tmp_path):
    status, results = spawn(tmp_path, "mp.topology_worker, nprocs=1", devices=2)
    assert status == "ok", results
    assert list(results) == [0]
    assert results[0]["world_size"] == 1 and results[0]["addressable"] == 2
