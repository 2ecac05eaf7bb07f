"""ZeRO-1 (`torch_xla.distributed.zero_redundancy_optimizer`) over 2 real processes.

Reference: the same model trained eagerly on the CPU in one process with `torch.optim.Adam`
and `clip_grad_norm_` on the whole batches; each replica trains on its half of every batch.
"""

from __future__ import annotations

import pickle

import torch
from conftest import run_python

from torch_xla.testing import distributed as workers

STEPS, BATCH, WORLD = 3, 8, 2
# float32 on both sides; the replicas sum halves of the batch in another order.
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def spawn_zero(tmp_path, max_norm: float) -> dict[int, dict]:
    out = tmp_path / "results.pkl"
    result = run_python(
        f"""
        import pickle
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import distributed as workers
        results = xmp.spawn(workers.zero_worker, args=({STEPS}, {BATCH}, {max_norm}))
        with open({str(out)!r}, "wb") as f:
            pickle.dump(results, f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(WORLD)}, timeout=240,
    )
    assert out.exists(), result.stderr[-3000:]
    return pickle.loads(out.read_bytes())


def test_zero1_with_clipping_trains_as_one_process_on_the_whole_batch(tmp_path):
    max_norm = 0.5  # small enough that every step clips
    results = spawn_zero(tmp_path, max_norm)
    want = workers.expected_zero(STEPS, BATCH, max_norm)
    assert want["grad_norm"] > max_norm
    full_shapes = [tuple(p.shape) for p in workers.make_model().parameters()]
    for rank in range(WORLD):
        got = results[rank]
        for name, value in want["state"].items():
            torch.testing.assert_close(got["state"][name], value, **TOLERANCE,
                                       msg=f"{name} on rank {rank}")
        torch.testing.assert_close(got["grad_norm"], want["grad_norm"], **TOLERANCE)
        # Each rank holds only its shard (dim 0 padded to a multiple of 2), and so does
        # Adam's state.
        shard_shapes = [((s[0] + 1) // WORLD, *s[1:]) for s in full_shapes]
        assert got["shard_shapes"] == shard_shapes
        assert got["exp_avg_shapes"] == shard_shapes
        # After the checkpoint round trip the next step matches the eager one.
        for name, value in want["after_reload"].items():
            torch.testing.assert_close(got["after_reload"][name], value, **TOLERANCE,
                                       msg=f"{name} after load_state_dict on rank {rank}")
    # The two ranks hold different halves of the same parameters.
    weight = want["state"]["2.weight"]  # (5, 7): padded to 6 rows, 3 per rank
    padded = torch.cat([weight, torch.zeros(1, 7)])
    for rank in range(WORLD):
        torch.testing.assert_close(results[rank]["shards"][2], padded[3 * rank:3 * rank + 3],
                                   **TOLERANCE)
