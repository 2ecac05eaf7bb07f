"""xmp.spawn on the CPU plugin: real processes, a real coordinator, collectives over gloo.

Each test starts a fresh interpreter that calls xmp.spawn (the runtime is one per
process, and the pytest process keeps its own); the per-process functions live in
torch_xla.testing.multiprocess so the spawned children can import them. The tests of
`SpawnContext.join` alone fork tiny children from the pytest process.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import struct
import subprocess
import sys
import time

import pytest
import torch
from conftest import run_python

from torch_xla.distributed import xla_multiprocessing as xmp
from torch_xla.pjrt import distributed
from torch_xla.testing import multiprocess as mp


def spawn(
    tmp_path, call: str, devices: int, timeout: float = 240, env: dict[str, str] | None = None
):
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
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(devices), **(env or {})},
        timeout=timeout,
    )
    assert out.exists(), result.stderr[-3000:]
    with open(out, "rb") as f:
        return pickle.load(f)


def spawn_repeatedly(
    tmp_path, call: str, times: int, env: dict[str, str] | None = None, timeout: float = 900
) -> list[dict]:
    """Run `xmp.spawn(<call>)` `times` times in one fresh interpreter; how each one ended.

    Each outcome: type (of the error, or "returned"), rank, exit_code, signal, message,
    seconds."""
    out = tmp_path / "outcomes.pkl"
    result = run_python(
        f"""
        import pickle, time
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import multiprocess as mp
        outcomes = []
        for _ in range({times}):
            start = time.monotonic()
            try:
                xmp.spawn({call})
                outcome = dict(type="returned")
            except xmp.ProcessFailedError as error:
                outcome = dict(type="ProcessFailedError", rank=error.rank,
                               exit_code=error.exit_code, signal=error.signal_name)
                outcome["message"] = str(error)
            except Exception as error:
                outcome = dict(type=type(error).__name__, message=str(error))
            outcome["seconds"] = time.monotonic() - start
            outcomes.append(outcome)
        with open({str(out)!r}, "wb") as f:
            pickle.dump(outcomes, f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", **(env or {})},
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


def test_numbers_that_depend_on_the_rank_give_every_process_one_program(tmp_path):
    """`x + 1 + 2 * rank` (PyTorch/XLA's torchrun test): rank 0's special 0 was a constant
    where rank 1 fed its 2 as data, so the processes' programs differed and were refused."""
    status, results = spawn(tmp_path, "mp.ordinal_arithmetic_worker", devices=2)
    assert status == "ok", results
    x_total = [float(v) for v in (torch.arange(2) + 1) * 2 + 2]  # [1, 2] + [3, 4]
    assert results == {0: [x_total, [0.0] * 3], 1: [x_total, [0.0] * 3]}


def test_sys_exit_zero_ends_a_process_normally_and_another_code_fails_the_job(tmp_path):
    assert spawn(tmp_path, "mp.exiting_worker, args=(0,)", devices=2) == (
        "ok", {0: None, 1: None})
    assert spawn(tmp_path, "mp.exiting_worker, args=(None,)", devices=2)[0] == "ok"
    status, error = spawn(tmp_path, "mp.exiting_worker, args=(3,)", devices=2)
    assert status == "error" and "ProcessFailedError" in error and "3" in error


def test_more_processes_than_devices_is_refused(tmp_path):
    status, error = spawn(tmp_path, "mp.topology_worker, nprocs=3", devices=2)
    assert status == "error"
    assert "nprocs=3" in error and "2 device(s)" in error and "CPU_NUM_DEVICES" in error


def test_one_process_runs_in_place(tmp_path):
    status, results = spawn(tmp_path, "mp.topology_worker, nprocs=1", devices=2)
    assert status == "ok", results
    assert list(results) == [0]
    assert results[0]["world_size"] == 1 and results[0]["addressable"] == 2


# --- a process that ends without returning ---------------------------------------------
# Each ending is repeated: the end of a dying child's report pipe and its exit could be seen
# in either order, and one order used to escape as a bare EOFError (the race is the parent's).
# CI repeats each ending a few times (each spawn takes seconds): the orders themselves are
# forced by test_join_names_the_exit_code_whichever_it_sees_first; `nox -s slow` does ten.

REPEATS = [3, pytest.param(10, marks=pytest.mark.slow)]
ENDINGS = {  # how replica 1 ends -> (exit code, signal, words the message must hold)
    "exit": (3, None, ["Process 1 of xmp.spawn exited with code 3 before returning"]),
    "kill": (-9, "SIGKILL", ["Process 1 of xmp.spawn was killed by SIGKILL (exit code -9)"]),
    "raise": (1, None, ["Process 1 of xmp.spawn raised, then exited with code 1",
                        "ValueError: replica 1 failed on purpose", "ending_worker"]),
}


@pytest.mark.parametrize("repeats", REPEATS)
@pytest.mark.parametrize("how", sorted(ENDINGS))
def test_a_process_that_ends_without_returning_is_named_every_time(tmp_path, how, repeats):
    exit_code, signal_name, words = ENDINGS[how]
    outcomes = spawn_repeatedly(
        tmp_path, f"mp.ending_worker, args=({how!r},), nprocs=2", repeats
    )
    assert len(outcomes) == repeats
    for outcome in outcomes:
        assert outcome["type"] == "ProcessFailedError", outcome
        assert (outcome["rank"], outcome["exit_code"], outcome["signal"]) == (
            1, exit_code, signal_name), outcome
        for word in words:
            assert word in outcome["message"], outcome
        # the sleeping replica 0 was stopped, not left to end its sleep (the spawn itself
        # took 61 s on a loaded CI machine: start-up is not what this bounds)
        assert outcome["seconds"] < mp.SLEEP_UNTIL_STOPPED_S, outcome


def _close_report_then_exit(report, code: int) -> None:
    report.close()  # the parent sees the end of the pipe well before the exit
    time.sleep(0.5)
    os._exit(code)


def _die_in_the_middle_of_a_report(report, code: int) -> None:
    os.write(report.fileno(), struct.pack("!i", 1000) + b"only a part")
    os._exit(code)


def _exit_while_a_grandchild_holds_the_pipe(report, code: int) -> None:
    # Like a data-loader worker, it keeps the report pipe open after this process exits.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"],
                     pass_fds=[report.fileno()])
    os._exit(code)


@pytest.mark.parametrize("child, code", [
    (_close_report_then_exit, 3),
    (_die_in_the_middle_of_a_report, 5),
    (_exit_while_a_grandchild_holds_the_pipe, 4),
])
def test_join_names_the_exit_code_whichever_it_sees_first(child, code):
    """The race's orders, forced: the pipe's end long before the exit, a torn report, and an
    exit while the pipe stays open."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=child, args=(send, code))
    start = time.monotonic()
    process.start()
    send.close()
    with pytest.raises(xmp.ProcessFailedError) as info:
        xmp.SpawnContext([process], [receive]).join()
    assert (info.value.rank, info.value.exit_code) == (0, code)
    assert f"Process 0 of xmp.spawn exited with code {code} before returning" in str(info.value)
    assert time.monotonic() - start < 5  # not waiting for the grandchild


# --- a process that never arrives ---------------------------------------------------------

TIMEOUT_S = 3
ABSENT_AT = {  # where replica 0 waits -> what its error calls that place
    "rendezvous": "rendezvous 'absent_peer_worker'",
    "mesh_reduce": "rendezvous 'absent_peer_worker'",
    "compile": "the compilation of a step with collectives",
    "step": "the start of a step with collectives",
}


@pytest.mark.parametrize("where", sorted(ABSENT_AT))
def test_a_process_waiting_for_an_absent_peer_fails_in_the_timeout_naming_it(tmp_path, where):
    (outcome,) = spawn_repeatedly(
        tmp_path, f"mp.absent_peer_worker, args=({where!r},), nprocs=2, start_method='fork'", 1,
        env={distributed.COLLECTIVE_TIMEOUT_ENV: str(TIMEOUT_S)},
    )
    assert outcome["type"] == "ProcessFailedError", outcome
    assert (outcome["rank"], outcome["exit_code"]) == (0, 1), outcome
    message = outcome["message"]
    assert "PeerTimeoutError" in message and f"at {ABSENT_AT[where]}" in message, message
    assert f"process(es) [1] did not arrive within {TIMEOUT_S} s" in message, message
    assert distributed.COLLECTIVE_TIMEOUT_ENV in message, message
    waited = float(re.search(r"waited ([0-9.]+) s", message).group(1))
    assert TIMEOUT_S - 0.5 <= waited < TIMEOUT_S + 10, message


def test_the_waiting_and_the_late_process_both_get_an_error_then_can_go_on(tmp_path):
    status, results = spawn(
        tmp_path, f"mp.late_peer_worker, args=({TIMEOUT_S + 2},), start_method='fork'", devices=2,
        env={distributed.COLLECTIVE_TIMEOUT_ENV: str(TIMEOUT_S)},
    )
    assert status == "ok", results
    waiting, late = results[0]["error"], results[1]["error"]
    assert waiting["missing"] == [1], waiting
    assert f"process(es) [1] did not arrive within {TIMEOUT_S} s" in waiting["message"], waiting
    assert late["missing"] == [], late
    assert "Process 1 reached rendezvous 'late_peer_worker'" in late["message"], late
    assert "after the other processes had stopped waiting for it" in late["message"], late
    assert results[0]["after"] == results[1]["after"] == [b"0", b"1"]


# --- where spawned children come from ----------------------------------------------------
# start_method="spawn" forks them from a fork server that imported torch, jax and torch_xla
# once; they must still behave as spawned ones: the parent's current variables and streams.


def test_spawned_children_see_the_parents_variables_and_write_to_its_streams(tmp_path):
    done = run_python(
        """
        import os
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import multiprocess as mp
        first = xmp.spawn(mp.environment_worker, args=("XMP_TEST_VALUE",))
        os.environ["XMP_TEST_VALUE"] = "second"
        second = xmp.spawn(mp.environment_worker, args=("XMP_TEST_VALUE",))
        del os.environ["XMP_TEST_VALUE"]
        third = xmp.spawn(mp.environment_worker, args=("XMP_TEST_VALUE",))
        print("results", *(sorted(r.items()) for r in (first, second, third)))
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "XMP_TEST_VALUE": "first"},
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    want = [(0, "first"), (1, "first")], [(0, "second"), (1, "second")], [(0, None), (1, None)]
    assert f"results {want[0]} {want[1]} {want[2]}" in done.stdout
    for value in ("first", "second", "None"):  # the children's prints reach our pipe
        for index in (0, 1):
            assert f"replica {index} sees XMP_TEST_VALUE={value}" in done.stdout


def test_spawned_children_end_when_the_parent_is_killed(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import torch_xla.distributed.xla_multiprocessing as xmp\n"
         "from torch_xla.testing import multiprocess as mp\n"
         f"xmp.spawn(mp.orphan_worker, args=({str(tmp_path)!r},))\n"],
        env={**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"},
    )
    try:
        deadline = time.monotonic() + 180
        while len(list(tmp_path.glob("*.pid"))) < 2 and parent.poll() is None:
            assert time.monotonic() < deadline, "the children did not start"
            time.sleep(0.2)
        assert parent.poll() is None, f"the parent ended first ({parent.returncode})"
    finally:
        parent.kill()
        parent.wait()
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"children {pids} outlived their parent"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"  # a zombie has ended
    except (FileNotFoundError, ProcessLookupError):  # reaped before the open, or the read
        return False
