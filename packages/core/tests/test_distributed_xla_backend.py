"""The `xla` backend of torch.distributed and its `xla://` init method, under each launcher:
no launcher (a world of one), a torchrun-style launch (environment variables, real
processes on loopback) and xmp.spawn; and the replica groups inferred for `new_group`."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import run_python

from torch_xla.distributed.xla_backend import infer_mesh

WORKER = """
import pickle, sys
from torch_xla.testing import distributed as workers
with open(sys.argv[1], "wb") as f:
    pickle.dump(workers.backend_worker(), f)
"""


def expected(rank: int, world: int) -> dict:
    xs = [torch.arange(4, dtype=torch.float32) + 10 * r for r in range(world)]
    return {"rank": rank, "world": world, "sum": sum(xs), "gather": xs,
            "broadcast": xs[world - 1],
            "payloads": [f"rank{r}" for r in reversed(range(world))], "alone": [b"me"],
            "group_sum": sum(xs), "group_alone": xs[rank]}


def check(got: dict, rank: int, world: int) -> None:
    for name, want in expected(rank, world).items():
        if isinstance(want, torch.Tensor) or name == "gather":
            torch.testing.assert_close(got[name], want, msg=f"{name} on rank {rank}")
        else:
            assert got[name] == want, (name, rank)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_xla_init_method_without_a_launcher_is_a_world_of_one(tmp_path):
    out = tmp_path / "out.pkl"
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "1"}
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env[name] = ""  # unset: the defaults apply
    result = run_python(WORKER.replace("sys.argv[1]", repr(str(out))), env=env)
    assert out.exists(), result.stderr[-3000:]
    got = pickle.loads(out.read_bytes())
    check(got, 0, 1)
    assert got["store"] == "HashStore"  # one process takes no port


def test_xla_init_method_under_torchrun_variables(tmp_path):
    """Two processes started as torchrun starts them (no LOCAL_WORLD_SIZE: one host)."""
    base = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    base.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                XLA_COORDINATOR_ADDRESS=f"127.0.0.1:{free_port()}")
    procs = []
    for rank in range(2):
        env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WORKER), str(tmp_path / f"{rank}.pkl")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errors = [p.communicate(timeout=240)[1] for p in procs]
    for rank in range(2):
        assert procs[rank].returncode == 0, errors[rank][-3000:]
        got = pickle.loads((tmp_path / f"{rank}.pkl").read_bytes())
        check(got, rank, 2)
        assert got["store"] == "TCPStore"


def test_xla_init_method_under_xmp_spawn(tmp_path):
    out = tmp_path / "out.pkl"
    result = run_python(
        f"""
        import pickle
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import distributed as workers
        with open({str(out)!r}, "wb") as f:
            pickle.dump(xmp.spawn(workers.backend_worker), f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"}, timeout=240,
    )
    assert out.exists(), result.stderr[-3000:]
    results = pickle.loads(out.read_bytes())
    for rank in range(2):
        check(results[rank], rank, 2)


@pytest.mark.parametrize("ranks, world, mesh", [
    ([4, 5, 6, 7], 12, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]),
    ([0, 1], 4, [[0, 1], [2, 3]]),
    ([1, 5, 9], 12, [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]),
    ([0, 2], 4, [[0, 2], [1, 3]]),
])
def test_infer_mesh_from_a_row_or_a_column(ranks, world, mesh):
    assert infer_mesh(ranks, world) == mesh


@pytest.mark.parametrize("ranks, world, why", [
    ([4, 5, 6], 12, "does not start at a multiple"),
    ([0, 1, 2, 3, 4], 12, "cannot be a side"),
    ([1, 5], 12, "step by 6"),
    ([4, 7, 10], 12, "start below 4"),
    ([1, 5, 10], 12, "not evenly spaced"),
])
def test_infer_mesh_refuses_what_is_no_row_or_column(ranks, world, why):
    with pytest.raises(ValueError, match=why):
        infer_mesh(ranks, world)
