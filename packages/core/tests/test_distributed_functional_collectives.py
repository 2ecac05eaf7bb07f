"""torch's functional collectives (`torch.ops._c10d_functional`) on XLA tensors: what
`torch.distributed._functional_collectives` runs, what dynamo puts in a graph for
`dist.all_reduce`, and what xm's collectives emit under `torch.compile`. PyTorch eager on
the CPU computes the expected values."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F
from conftest import run_python

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla.testing import distributed as workers

WORLD = 4


def rank_values(rank: int) -> torch.Tensor:
    return torch.arange(8, dtype=torch.float32).reshape(4, 2) + 10 * rank


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("funcol") / "out.pkl"
    result = run_python(
        f"""
        import pickle
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import distributed as workers
        with open({str(out)!r}, "wb") as f:
            pickle.dump(xmp.spawn(workers.functional_collectives_worker), f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(WORLD)}, timeout=300,
    )
    assert out.exists(), result.stderr[-3000:]
    return pickle.loads(out.read_bytes())


def test_functional_collectives_over_the_world(results):
    xs = [rank_values(r) for r in range(WORLD)]
    total = sum(xs)
    for rank in range(WORLD):
        got = results[rank]
        torch.testing.assert_close(got["sum"], total)
        torch.testing.assert_close(got["avg"], total / WORLD)
        torch.testing.assert_close(got["max"], torch.stack(xs).amax(0))
        torch.testing.assert_close(got["gather0"], torch.cat(xs, 0))
        torch.testing.assert_close(got["gather1"], torch.cat(xs, 1))
        torch.testing.assert_close(got["scatter"], total.chunk(WORLD, 0)[rank])
        torch.testing.assert_close(got["broadcast"], xs[1])
        torch.testing.assert_close(got["all_to_all"],
                                   torch.cat([x.chunk(WORLD, 0)[rank] for x in xs]))
        torch.testing.assert_close(got["coalesced"], [total, total * 2])


def test_broadcast_sends_the_roots_bits(results):
    root = torch.tensor([float("nan"), -0.0, 1.5, -2.0])
    for rank in range(WORLD):
        got = results[rank]
        assert torch.equal(got["broadcast_bits"].view(torch.int32), root.view(torch.int32))
        assert torch.equal(got["broadcast_int"], torch.tensor([1, -1]))
        assert torch.equal(got["broadcast_bool"], torch.tensor([True, False]))


def test_functional_collectives_over_subgroups(results):
    """`dist.new_group` rows of two ranks: each row reduces and broadcasts within itself."""
    for rank in range(WORLD):
        first = rank - rank % 2
        torch.testing.assert_close(results[rank]["row_sum"],
                                   rank_values(first) + rank_values(first + 1))
        torch.testing.assert_close(results[rank]["row_broadcast"], rank_values(first + 1))


def test_collectives_inside_torch_compile(results):
    xs = [rank_values(r) for r in range(WORLD)]
    total = sum(xs)
    for rank in range(WORLD):
        got = results[rank]
        torch.testing.assert_close(got["compiled_dist"], total * 2)
        torch.testing.assert_close(got["written_back"], total)
        gathered, scattered, biggest = got["compiled_xm"]
        torch.testing.assert_close(gathered, torch.cat(xs, 1))
        torch.testing.assert_close(scattered, total.chunk(WORLD, 0)[rank] * 0.5)
        torch.testing.assert_close(biggest, torch.stack(xs).amax(0) * 2.0)
        assert got["programs"] == 1  # one graph: no break at the collectives
        torch.testing.assert_close(got["compiled_broadcast"], xs[1] * 2)
        assert got["broadcast_graphs"] == 2  # torch's one break, at dist.broadcast


def test_ddp_under_torch_compile_trains_as_eager_on_the_whole_batch(results):
    model = workers.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for inputs, labels in workers.make_batches(3, 2 * WORLD):
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), labels).backward()
        optimizer.step()
    for rank in range(WORLD):
        torch.testing.assert_close(results[rank]["ddp_state"], model.state_dict(),
                                   rtol=1e-5, atol=1e-6)


# --- a world of one, in this process ------------------------------------------------------


def test_xm_collectives_compile_into_one_graph():
    """xm's collectives trace as torch ops; before, `all_gather` read the world size
    through a lock, which dynamo cannot trace: the graph broke there."""

    def fn(t):
        t = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5) + 1
        return xm.all_gather(t, dim=1), xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, 1)

    x = torch.arange(6.0).reshape(3, 2)
    explained = torch._dynamo.explain(fn)(x.to("xla"))
    assert explained.graph_break_count == 0
    assert explained.graph_count == 1
    gathered, scattered = torch.compile(fn, backend="openxla")(x.to("xla"))
    torch.testing.assert_close(gathered.cpu(), x * 0.5 + 1)
    torch.testing.assert_close(scattered.cpu(), x * 0.5 + 1)


def test_functional_ops_in_a_world_of_one_copy_their_input():
    ops = torch.ops._c10d_functional
    x = torch.arange(4.0).reshape(2, 2)
    t = x.to("xla")
    for result in (ops.all_reduce(t, "sum", ""), ops.all_gather_into_tensor(t, 1, ""),
                   ops.reduce_scatter_tensor(t, "sum", 1, "default"),
                   ops.broadcast(t, 0, ""), ops.all_to_all_single(t, [], [], "")):
        result = ops.wait_tensor(result)
        assert result.device.type == "xla"
        torch.testing.assert_close(result.cpu(), x)
    t.add_(1)  # a copy, not an alias
    torch.testing.assert_close(ops.all_reduce(t, "sum", "").cpu(), x + 1)


def test_functional_ops_are_recorded_with_xla_always_allreduce(monkeypatch):
    """XLA_ALWAYS_ALLREDUCE=1 records them in a world of one: XLA's ops run on the device."""
    monkeypatch.setenv("XLA_ALWAYS_ALLREDUCE", "1")
    ops = torch.ops._c10d_functional
    x = torch.tensor([[1.0, -0.0], [float("nan"), 4.0]])
    t = x.to("xla")
    summed = ops.all_reduce(t, "avg", "")
    bits = ops.broadcast(t, 0, "")
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([summed, bits])
    assert "all-reduce" in hlo
    torch_xla.sync()
    torch.testing.assert_close(summed.cpu(), x, equal_nan=True)
    assert torch.equal(bits.cpu().view(torch.int32), x.view(torch.int32))


@pytest.mark.parametrize("call, message", [
    (lambda t: torch.ops._c10d_functional.all_reduce(t, "premul_sum", ""), "Reduce op"),
    (lambda t: torch.ops._c10d_functional.all_gather_into_tensor(t, 2, ""), "group_size=2"),
    (lambda t: torch.ops._c10d_functional.broadcast(t, 1, ""), "src=1"),
    (lambda t: torch.ops._c10d_functional.all_to_all_single(t, [1, 1], [], ""),
     "equal parts"),
    (lambda t: torch.ops._c10d_functional.all_gather_into_tensor(t[0, 0], 1, ""),
     "at least one dimension"),
])
def test_functional_ops_refuse_what_xla_cannot_do(call, message):
    t = torch.ones(2, 2).to("xla")
    with pytest.raises((ValueError, NotImplementedError), match=message):
        call(t)
    met.clear_all()
