"""`torch_xla.core.xla_model` entry points added for PyTorch/XLA's API, against eager
PyTorch where values are involved; the multi-process ones through `xmp.spawn`."""

from __future__ import annotations

import copy
import io
import sys
import threading
import time

import pytest
import torch
from conftest import run_python

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
import torch_xla.utils.utils as xu


@pytest.fixture
def device():
    return xm.xla_device()


def test_xla_device_signature_and_range(device):
    assert xm.xla_device(n=None, devkind=None) == torch.device("xla:0")
    assert xm.xla_device(0, devkind="cpu") == device
    with pytest.raises(IndexError, match="Device index 7 out of range"):
        xm.xla_device(7)


def test_is_xla_tensor_and_device_names(device):
    assert xm.is_xla_tensor(torch.ones(1, device=device))
    assert not xm.is_xla_tensor(torch.ones(1))
    assert xm.parse_xla_device("CPU:3") == ("CPU", 3)
    assert xm.parse_xla_device("xla:3") is None
    assert xm.xla_real_devices() == ["CPU:0"] == xm.xla_real_devices([device])
    assert xm.xla_device_hw("xla:0") == "CPU"
    assert xm.xla_replication_devices([device]) == ["CPU:0"]
    assert xm.get_xla_supported_devices(max_devices=1) == ["xla:0"]


def test_mark_step_signature(device):
    t = torch.ones(2, device=device) + 1
    xm.mark_step(wait=True, reset_scope=False)
    assert torch.equal(t.cpu(), torch.full((2,), 2.0))


def test_master_print_signature(device):
    out = io.StringIO()
    xm.master_print("a", 1, fd=out, local=True, flush=True)
    assert out.getvalue() == "a 1\n"


def test_unlazy_computes_the_tensors(device):
    from torch_xla.lazy import functional

    t = torch.arange(4.0, device=device) * 2
    assert functional.unwrap(t)._node.rule is not None  # pending
    xm.unlazy([t])
    assert functional.unwrap(t)._node.rule is None  # device data
    assert t.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_send_cpu_data_to_device_moves_cpu_tensors_of_any_nesting(device):
    (single,) = xm.send_cpu_data_to_device(torch.arange(3), device)
    assert single.device == device and single.cpu().tolist() == [0, 1, 2]
    data = {"a": [torch.ones(2), 5], "b": torch.zeros(1, device=device)}
    moved = xm.send_cpu_data_to_device(data, device)
    assert moved["a"][0].device == device and moved["a"][1] == 5
    assert moved["b"] is data["b"]
    with pytest.raises(RuntimeError, match="needs SPMD mode: call torch_xla.runtime.use_spmd"):
        xm.send_cpu_data_to_device(torch.ones(1), device, input_sharding=object())


class _PackWrapper(xu.DataWrapper):
    """A PackedSequence as PyTorch/XLA's docs wrap one for the loader."""

    def __init__(self, pack):
        self.pack = pack

    def get_tensors(self):
        return [self.pack.data, self.pack.sorted_indices, self.pack.unsorted_indices]

    def from_tensors(self, tensors):
        return torch.nn.utils.rnn.PackedSequence(tensors[0], self.pack.batch_sizes, *tensors[1:])


def test_send_cpu_data_to_device_rebuilds_data_wrappers(device):
    batch = torch.tensor([[1.0, 2, 3], [4, 5, 0], [6, 0, 0]]).unsqueeze(-1)
    pack = torch.nn.utils.rnn.pack_padded_sequence(batch, [3, 2, 1], batch_first=True,
                                                   enforce_sorted=False)
    moved = xm.send_cpu_data_to_device({"x": _PackWrapper(pack), "n": 3}, device)
    got = moved["x"]
    assert isinstance(got, torch.nn.utils.rnn.PackedSequence) and moved["n"] == 3
    assert got.data.device == device and got.sorted_indices.device == device
    assert got.batch_sizes.device.type == "cpu"  # not among the wrapper's tensors
    assert torch.equal(got.data.cpu(), pack.data)
    assert torch.equal(got.unsorted_indices.cpu(), pack.unsorted_indices)


def test_to_xla_tensor_arena_converts_every_pick_in_one_call(device):
    class Holder:
        def __init__(self, t):
            self.t, self.n = t, 1

    key, a, b, c = torch.ones(1), torch.zeros(2), torch.arange(3.0), torch.full((2,), 7.0)
    data = {key: (a, [b, a]), "s": {12.0, c}, "o": Holder(b)}
    calls = []
    order = []
    xu.for_each_instance(data, torch.is_tensor, order.append)

    def convert(tensors):
        calls.append(list(tensors))
        return [t.to(device) for t in tensors]

    moved = xm.ToXlaTensorArena(convert, torch.is_tensor).transform(data)
    assert len(calls) == 1 and [id(t) for t in calls[0]] == [id(t) for t in order]
    assert len(calls[0]) == 4  # each distinct tensor once, the key included
    (new_key,) = [k for k in moved if torch.is_tensor(k)]
    assert new_key.device == device and torch.equal(new_key.cpu(), key)
    first, (second, again) = moved[new_key]
    assert first is again and torch.equal(first.cpu(), a)  # one object, one replacement
    assert moved["o"].t is second and moved["o"].n == 1 and moved["o"] is not data["o"]
    (moved_c,) = [v for v in moved["s"] if torch.is_tensor(v)]
    assert 12.0 in moved["s"] and torch.equal(moved_c.cpu(), c)
    assert xm.ToXlaTensorArena(convert, torch.is_tensor).transform([1, "x"]) == [1, "x"]
    assert len(calls) == 1  # nothing picked: convert_fn is not called
    with pytest.raises(ValueError, match="convert_fn returned 1 objects for the 2"):
        xm.ToXlaTensorArena(lambda ts: ts[:1], torch.is_tensor).transform([a, b])


def test_broadcast_master_param_on_one_replica_keeps_the_model(device):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    model.load_state_dict(eager.state_dict())
    model.to(device)
    xm.broadcast_master_param(model)
    for name, value in eager.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name].cpu(), value)


def _broadcast_worker(scale: float) -> list[float]:
    import torch

    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    index = xr.global_ordinal()
    device = xm.xla_device()
    model = torch.nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(index + 1.0)
        model.bias.fill_(scale * (index + 1))
    model.to(device)
    xm.broadcast_master_param(model)
    broadcast = model.weight.cpu().flatten().tolist() + model.bias.cpu().tolist()
    mine = [torch.full((2,), index + 1.0).to(device), torch.arange(4.0).to(device)]
    gathered = xm.all_gather_bucketized(mine, dim=0)
    scattered = xm.reduce_scatter_bucketized(xm.REDUCE_SUM, mine, 1.0, 0, 2)
    grads = [torch.full((2,), index + 1.0).to(device), (torch.arange(3.0) * index).to(device)]
    xm.all_reduce_bucketized_gradients(grads, scale=0.5, groups=None, pin_layout=True,
                                       bucket_cap_mb=1)
    return broadcast, [t.cpu().tolist() for t in gathered + scattered + grads]


def test_broadcast_master_param_and_run_multiprocess_over_two_processes():
    result = run_python("""
        from torch_xla._internal import pjrt
        from test_api_xla_model import _broadcast_worker
        if __name__ == "__main__":
            print(sorted(pjrt.run_multiprocess(_broadcast_worker, scale=10.0).items()))
    """, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2",
             "PYTHONPATH": ":".join(sys.path)}, timeout=300)
    assert result.returncode == 0, result.stderr
    master = [1.0, 1.0, 10.0]  # rank 0's weight and bias; rank 1 started with 2.0 and 20.0
    gathered = [[1.0, 1.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0]]
    scattered = {0: [[3.0], [0.0, 2.0]], 1: [[3.0], [4.0, 6.0]]}
    reduced = [[1.5, 1.5], [0.0, 0.5, 1.0]]  # (1 + 2) / 2 and (0 + 1) * arange(3) / 2
    assert result.stdout.strip().splitlines()[-1] == str(
        [(i, (master, gathered + scattered[i] + reduced)) for i in (0, 1)])


def test_gradient_buckets_fill_up_to_the_cap_in_order(monkeypatch):
    """PyTorch/XLA's bucketing: gradients join a bucket until its bytes would pass the
    cap; one larger than the cap is a bucket of its own; each bucket is one all_reduce."""
    calls = []
    monkeypatch.setattr(xm, "all_reduce", lambda op, ts, **kw: calls.append(
        (op, [t.numel() for t in ts], kw)))
    mib = 1024 * 1024 // 4  # float32 elements in one MiB
    grads = [torch.zeros(n) for n in (mib // 2, mib // 2, 1, 3 * mib, mib // 4)]
    xm.all_reduce_bucketized_gradients(grads, scale=0.25, groups=[[0, 1]], pin_layout=False,
                                       bucket_cap_mb=1)
    assert [sizes for _, sizes, _ in calls] == [[mib // 2, mib // 2], [1], [3 * mib],
                                                [mib // 4]]
    assert {op for op, _, _ in calls} == {xm.REDUCE_SUM}
    assert all(kw == dict(scale=0.25, groups=[[0, 1]], pin_layout=False) for *_, kw in calls)


def test_reduce_gradients_buckets_last_layer_first(monkeypatch):
    buckets = []
    monkeypatch.setattr(xm.xr, "world_size", lambda: 4)
    monkeypatch.setattr(xm, "all_reduce_bucketized_gradients",
                        lambda grads, **kw: buckets.append(([g.numel() for g in grads], kw)))
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    model(torch.ones(1, 2)).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    monkeypatch.setenv("ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB", "2")
    xm.reduce_gradients(opt)
    assert buckets == [([1, 3, 3, 6], dict(scale=0.25, groups=None, pin_layout=True,
                                           bucket_cap_mb=2))]
    monkeypatch.setenv("ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB", "-1")
    with pytest.raises(Exception, match="ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB"):
        xm.reduce_gradients(opt)


def test_fork_rng_restores_the_state(device):
    xm.set_rng_state(7)
    with xm.fork_rng():
        torch.rand(3, device=device).cpu()
        assert xm.get_rng_state() != 7
    assert xm.get_rng_state() == 7
    with xm.fork_rng(enabled=False):
        torch.rand(3, device=device).cpu()
    assert xm.get_rng_state() != 7


def test_do_on_ordinals_and_xla_rendezvous_on_one_replica(device):
    t = torch.ones(2, device=device) * 4
    assert xm.do_on_ordinals(lambda x: x.device.type + str(x.tolist()), (t,)) == "cpu[4.0, 4.0]"
    assert xm.do_on_ordinals(lambda: "ran", ordinals=(1,)) is None
    assert xm.xla_rendezvous(b"hi", tag="t") == [b"hi"]
    with pytest.raises(TypeError, match="bytes"):
        xm.xla_rendezvous("text")
    assert xm.rendezvous("r", bytearray(b"ab")) == [b"ab"]
    with pytest.raises(TypeError, match="payload must be bytes, not str"):
        xm.rendezvous("r", "")  # as PyTorch/XLA: refused on one replica too


def test_get_memory_info_says_when_the_device_reports_nothing(device):
    with pytest.raises(RuntimeError, match="reports no memory statistics for xla:0"):
        xm.get_memory_info(device)


def test_get_memory_info_keys_from_runtime_statistics(device, monkeypatch):
    from torch_xla.pjrt.client import client

    class Reporting:
        device_kind = "fake"

        def memory_stats(self):
            return {"bytes_in_use": 10, "bytes_limit": 100, "peak_bytes_in_use": 40}

    monkeypatch.setattr(client(), "devices", [Reporting()])
    monkeypatch.setattr(client(), "global_devices", client().devices)
    assert xm.get_memory_info(device) == {"bytes_used": 10, "bytes_limit": 100,
                                          "peak_bytes_used": 40}


def test_get_stablehlo_of_pending_tensors(device):
    t = torch.ones(3, device=device) * 5
    text = xm.get_stablehlo([t])
    assert "stablehlo.multiply" in text and "func.func public @main" in text
    assert isinstance(xm.get_stablehlo_bytecode([t]), bytes)
    assert t.cpu().tolist() == [5.0, 5.0, 5.0]  # inspecting runs nothing


def test_async_closure_errors_surface_at_the_next_step(device):
    started = threading.Event()

    def fails():
        started.set()
        raise ValueError("closure failed")

    xm.add_step_closure(fails, run_async=True)
    xm.mark_step()
    started.wait(5)
    time.sleep(0.05)
    ran = []
    xm.add_step_closure(lambda: ran.append(1), run_async=True)
    with pytest.raises(RuntimeError, match="previously raised exception") as caught:
        xm.mark_step()
    assert isinstance(caught.value.__cause__, ValueError)
    xm.wait_device_ops()
    assert ran == []
    xm.add_step_closure(lambda: ran.append(2), run_async=True)  # the queue works again
    xm.mark_step()
    xm.wait_device_ops()
    assert ran == [2]


def test_check_view_sharing(device):
    x = torch.ones(4, 4, device=device)
    xm.check_view_sharing({"a": x, "b": x.clone(), "c": [x[0]]})  # one view alone is fine
    xm.check_view_sharing([x, x])  # the same tensor twice is no sharing
    with pytest.raises(RuntimeError, match=r"sharing a view with tensor torch.float32\[4\]"):
        xm.check_view_sharing([x[0], x[1]])
    cpu = torch.ones(3)
    with pytest.raises(RuntimeError, match="sharing a view"):
        xm.check_view_sharing({"w": cpu, "v": cpu[1:]})
    xm.check_view_sharing([cpu, cpu.clone()])


def test_async_closures_queued_behind_a_failing_one_are_dropped(device):
    release = threading.Event()
    ran = []

    def fails_later():
        release.wait(5)
        raise ValueError("late failure")

    xm.add_step_closure(fails_later, run_async=True)
    xm.add_step_closure(lambda: ran.append("behind"), run_async=True)
    xm.mark_step()
    release.set()
    xm.wait_device_ops()
    assert ran == []
    with pytest.raises(RuntimeError, match="previously raised exception"):
        xm.add_step_closure(lambda: ran.append("next"), run_async=True)
        xm.mark_step()
    xm.wait_device_ops()
    assert ran == []


def test_bucketized_collectives_on_one_replica(device):
    xs = [torch.ones(2, device=device), torch.arange(4.0, device=device)]
    assert [t.cpu().tolist() for t in xm.all_gather_bucketized(xs)] == [[1.0, 1.0],
                                                                         [0.0, 1.0, 2.0, 3.0]]
    out = [torch.zeros(2, device=device), torch.zeros(4, device=device)]
    result = xm.reduce_scatter_bucketized(xm.REDUCE_SUM, xs, 2.0, 0, 1, output=out)
    assert result[0] is out[0] and out[1].cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
    with pytest.raises(RuntimeError, match="pin_layout=True"):
        xm.all_gather_bucketized(xs, pin_layout=True)
    with pytest.raises(ValueError, match="1 tensors for 2 inputs"):
        xm.all_gather_bucketized(xs, output=out[:1])


def test_xla_device_kind_is_the_runtime_device_kind(device):
    import jax

    assert xm.xla_device_kind() == jax.devices()[0].device_kind == "cpu"
    assert xm.xla_device_kind(device) == xr.runtime_device_attributes(device)["device_kind"]


def test_set_replication_sets_the_threads_device_among_this_processs_devices():
    """accelerate calls `xm.set_replication(device, xm.get_xla_supported_devices())` in
    every process; the device becomes the calling thread's, and a replica set naming
    devices this process does not drive is refused with what to do."""
    result = run_python("""
        import threading
        import torch, torch_xla, torch_xla.core.xla_model as xm
        xm.set_replication(torch.device("xla:0"), xm.get_xla_supported_devices())
        print(torch_xla.device())
        xm.set_replication("xla:1", ["xla:0", "xla:1"])
        print(torch_xla.device(), (torch.ones(2, device="xla") + 1).device)
        seen = []
        t = threading.Thread(target=lambda: seen.append(str(torch_xla.device())))
        t.start(); t.join()
        print(seen[0])  # another thread keeps its own device
        for device, devices in (("xla:1", ["xla:0"]), ("xla:0", ["xla:0", "xla:3"]),
                                ("cpu", ["xla:0"])):
            try:
                xm.set_replication(device, devices)
            except (ValueError, RuntimeError) as error:
                print(type(error).__name__, error)
    """, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[:3] == ["xla:0", "xla:1 xla:1", "xla:0"]
    assert lines[3] == ("ValueError set_replication: xla:1 is not one of the replica devices "
                        "['xla:0']; pass the devices the replicas run on, the device among them.")
    assert lines[4].startswith("ValueError set_replication: xla:3 not among this process's "
                               "devices ['xla:0', 'xla:1']; replicas on other processes")
    assert lines[5].startswith("RuntimeError Invalid device 'cpu'")


def test_fetch_gradients_are_aliases_a_collective_updates_in_place(device):
    """accelerate's gradient reduction: `xm.all_reduce("sum", xm._fetch_gradients(opt),
    scale=1 / world)` must change `p.grad`. Reference: eager CPU gradients, scaled."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    frozen = torch.nn.Linear(2, 2)  # in the optimizer, never used: no gradient
    xla = copy.deepcopy(torch.nn.ModuleList([cpu, frozen])).to(device)
    x = torch.randn(5, 3)
    cpu(x).square().sum().backward()
    xla[0](x.to(device)).square().sum().backward()
    opt = torch.optim.SGD(xla.parameters(), lr=0.1)
    grads = xm._fetch_gradients(opt)
    assert len(grads) == 4  # the frozen layer's two parameters have none
    xm.all_reduce(xm.REDUCE_SUM, grads, scale=0.25)
    for p, q in zip(cpu.parameters(), xla[0].parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad * 0.25)


def test_maybe_convert_to_cpu_computes_pending_tensors_in_one_graph(device):
    """transformers saves `xm._maybe_convert_to_cpu(model.state_dict())`: every XLA tensor
    of any nesting comes back on the CPU, the pending ones computed together; with
    `convert=False` they are computed and stay on the device."""
    import torch_xla.debug.metrics as met

    x = torch.arange(6.0)
    t = x.to(device)
    data = {"a": t * 2, "b": [t + 1, (t.sum(), "text")], "c": 3}
    met.clear_all()
    cpu = xm._maybe_convert_to_cpu(data)
    graphs = (met.counter_value("UncachedCompile") or 0) + (met.counter_value("CachedCompile") or 0)
    assert graphs == 1
    assert cpu["b"][1][1] == "text" and cpu["c"] == 3
    torch.testing.assert_close([cpu["a"], cpu["b"][0], cpu["b"][1][0]], [x * 2, x + 1, x.sum()])
    assert all(v.device.type == "cpu" for v in (cpu["a"], cpu["b"][0], cpu["b"][1][0]))

    pending = {"d": t * 3}
    kept = xm._maybe_convert_to_cpu(pending, convert=False)
    assert kept is pending and kept["d"].device == device
    from torch_xla.lazy import functional
    assert functional.unwrap(kept["d"])._node.rule is None  # computed: device data
    torch.testing.assert_close(kept["d"].cpu(), x * 3)


def test_aliases_of_one_tensor_share_one_cpu_copy_as_a_cpu_state_dict_does(device):
    """A tied weight is two `param.detach()`s in a state dict. On the CPU they share
    storage, so `torch.save` writes it once and `save_pretrained` sees the tie; the CPU
    copies `xm.save` and `xm._maybe_convert_to_cpu` make must share in the same way."""
    def tied(model_device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
        m = m.to(model_device)
        m[1].weight = m[0].weight  # tied after the move, as PyTorch/XLA asks
        return m.state_dict()

    def saved(state, save):
        buffer = io.BytesIO()
        save(state, buffer)
        buffer.seek(0)
        return torch.load(buffer)

    def shared(state):
        return state["0.weight"].untyped_storage().data_ptr() == \
            state["1.weight"].untyped_storage().data_ptr()

    cpu = saved(tied("cpu"), torch.save)
    ours = saved(tied(device), xm.save)
    assert shared(cpu) and shared(ours)
    torch.testing.assert_close(ours, cpu)
    converted = xm._maybe_convert_to_cpu({**tied(device), "other": torch.ones(2).to(device)})
    assert shared(converted)
    assert converted["other"].untyped_storage().data_ptr() != \
        converted["0.weight"].untyped_storage().data_ptr()
