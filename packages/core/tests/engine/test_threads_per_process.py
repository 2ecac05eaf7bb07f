"""Several devices per process, one thread each: spawn_threads, DataParallel, xmp.spawn with
CPU_DEVICES_PER_PROCESS. Eager CPU PyTorch is the oracle; each test runs in fresh
processes with four CPU devices."""

from __future__ import annotations

import json
import textwrap

import torch

from .helpers import run_python

FOUR = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}


def _last_json(out: str):
    return json.loads(out.strip().splitlines()[-1])


SPAWN_THREADS = """
    import json, torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla._internal import pjrt

    def replica(index):
        device = torch_xla.device()
        # per-replica values as data, not Python constants: one program for every replica
        value = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(device)
        value = value * (torch.tensor(index + 1.0).to(device))
        total = xm.all_reduce(xm.REDUCE_SUM, value)
        gathered = xm.all_gather(torch.tensor([float(index)]).to(device))
        xm.mark_step()
        return dict(index=index, device=str(device), xm_device=str(xm.xla_device()),
                    factory=str(torch.ones(1, device="xla").device),
                    ordinal=xr.global_ordinal(), local=xr.local_ordinal(),
                    world=xr.world_size(), total=total.cpu().tolist(),
                    gathered=gathered.cpu().tolist(),
                    payloads=[p.decode() for p in xm.rendezvous("r", str(index).encode())])

    results = pjrt.spawn_threads(replica)
    again = pjrt.spawn_threads(replica)  # the cached replicated programs run again
    print(json.dumps([results, again, xr.world_size()]))
"""


def test_spawn_threads_runs_one_replica_per_device_and_collectives_match_eager():
    results, again, world_after = _last_json(run_python(SPAWN_THREADS, FOUR))
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    expected_total = sum(base * (i + 1) for i in range(4)).tolist()
    assert results == again
    assert sorted(results) == ["0", "1", "2", "3"]
    for key, seen in results.items():
        i = int(key)
        assert seen["index"] == seen["ordinal"] == seen["local"] == i
        assert seen["device"] == seen["xm_device"] == seen["factory"] == f"xla:{i}"
        assert seen["world"] == 4
        assert seen["total"] == expected_total
        assert seen["gathered"] == [0.0, 1.0, 2.0, 3.0]
        assert seen["payloads"] == ["0", "1", "2", "3"]
    assert world_after == 1  # outside the threads the process is one replica again


ORDINAL_ARITHMETIC = """
    import json, torch, torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla._internal import pjrt

    def replica(index):
        device = torch_xla.device()
        # Python numbers that depend on the ordinal, 0 or 1 on some replicas (which a
        # single replica keeps as compile-time constants): one program for all replicas
        x = torch.arange(2, dtype=torch.int64, device=device) + 1 + 2 * index
        y = torch.ones(3, device=device) * index - index
        return [xm.all_reduce(xm.REDUCE_SUM, x).cpu().tolist(),
                xm.all_reduce(xm.REDUCE_SUM, y).cpu().tolist()]

    print(json.dumps(pjrt.spawn_threads(replica)))
"""


def test_numbers_that_depend_on_the_ordinal_give_every_replica_one_program():
    """`x + 1 + 2 * rank` (PyTorch/XLA's torchrun test): rank 0 adds the special 0, which
    one replica keeps as a constant while rank 1 feeds its 2 as data, so the replicas
    built different programs and the step with collectives was refused."""
    results = _last_json(run_python(ORDINAL_ARITHMETIC, FOUR))
    x_total = sum(torch.arange(2) + 1 + 2 * r for r in range(4)).tolist()
    assert sorted(results) == ["0", "1", "2", "3"]
    for seen in results.values():
        assert seen == [x_total, [0.0, 0.0, 0.0]]


ERRORS = """
    import json, torch, torch_xla
    import torch_xla.core.xla_model as xm
    from torch_xla._internal import pjrt

    def raises_on_two(index):
        if index == 2:
            raise ValueError("replica two fails")
        xm.all_reduce(xm.REDUCE_SUM, torch.ones(2).to(torch_xla.device())).cpu()

    def different_graphs(index):
        device = torch_xla.device()  # the ordinal baked in as full's fill value
        xm.all_reduce(xm.REDUCE_SUM, torch.full((2,), index + 1.0, device=device)).cpu()

    seen = []
    for fn in (raises_on_two, different_graphs):
        try:
            pjrt.spawn_threads(fn)
            seen.append("no error")
        except Exception as error:
            seen.append(f"{type(error).__name__}: {error}")
    print(json.dumps(seen))
"""


def test_a_failing_replica_thread_stops_the_others_and_graphs_must_match():
    failing, differing = _last_json(
        run_python(ERRORS, {**FOUR, "TORCH_XLA_COLLECTIVE_TIMEOUT": "120"}, timeout=200))
    assert failing == "ValueError: replica two fails"
    assert "built a different graph" in differing and "as tensors" in differing


SINGLE_THREAD = """
    import json, threading, torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla.lazy import functional, tensor

    def pending(t):
        return any(p is functional.unwrap(t) for p in tensor.pending_tensors())

    # The main thread chose no device: xla:0 by default, mark_step syncs every device.
    a = torch.ones(2, device="xla:0") + 1
    b = torch.ones(2, device="xla:1") + 2
    xm.mark_step()
    synced_both = not pending(a) and not pending(b)
    reduced = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device="xla")).cpu().tolist()

    # A thread that chose its device syncs only that device at its mark_step.
    c = torch.ones(2, device="xla:0") * 3
    seen = {}
    def on_device_one():
        torch_xla._XLAC._xla_set_default_device("xla:1")
        d = torch.ones(2, device="xla") * 4
        xm.mark_step()
        seen.update(device=str(d.device), d_pending=pending(d), xm_device=str(xm.xla_device()))
    thread = threading.Thread(target=on_device_one)
    thread.start(); thread.join()
    print(json.dumps(dict(synced_both=synced_both, reduced=reduced, world=xr.world_size(),
                          default=str(torch_xla.device()), c_pending=pending(c), **seen,
                          values=[a.cpu().tolist(), b.cpu().tolist(), c.cpu().tolist()])))
"""


def test_one_thread_keeps_its_behaviour_and_a_device_thread_syncs_its_own_device():
    seen = _last_json(run_python(SINGLE_THREAD, FOUR))
    assert seen["synced_both"] and seen["world"] == 1 and seen["default"] == "xla:0"
    assert seen["reduced"] == [1.0, 1.0]  # one replica: all_reduce is the identity
    assert seen["device"] == seen["xm_device"] == "xla:1"
    assert seen["d_pending"] is False  # its own mark_step computed it
    assert seen["c_pending"] is True  # ... and left xla:0's pending work alone
    assert seen["values"] == [[2.0, 2.0], [3.0, 3.0], [3.0, 3.0]]


DATA_PARALLEL = """
    import copy, json, torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.data_parallel as dp

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    reference = copy.deepcopy(net)
    batches = [(torch.randn(4, 5), torch.randint(0, 3, (4,))) for _ in range(12)]

    def loop(model, loader, device, context):
        optimizer = context.getattr_or(
            "optimizer", lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        losses = []
        for data, target in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(data), target)
            loss.backward()
            xm.optimizer_step(optimizer)
            losses.append(loss)
        return [l.item() for l in losses]

    parallel = dp.DataParallel(net, device_ids=xm.get_xla_supported_devices())
    per_device = [parallel(loop, batches) for _ in range(2)]  # two epochs

    # The oracle: one CPU model, each step on the 4 batches of a round as one batch.
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        for step in range(3):
            data = torch.cat([d for d, _ in batches[4 * step:4 * step + 4]])
            target = torch.cat([t for _, t in batches[4 * step:4 * step + 4]])
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(reference(data), target).backward()
            optimizer.step()
    replicas = [[p.detach().cpu().tolist() for p in m.parameters()] for m in parallel.models]
    expected = [p.detach().tolist() for p in reference.parameters()]
    print(json.dumps(dict(devices=parallel.devices, replicas=replicas, expected=expected,
                          steps=[len(losses) for losses in per_device[0]])))
"""


def test_data_parallel_on_four_devices_equals_one_model_on_the_full_batch():
    seen = _last_json(run_python(DATA_PARALLEL, FOUR, timeout=400))
    assert seen["devices"] == ["xla:0", "xla:1", "xla:2", "xla:3"]
    assert seen["steps"] == [3, 3, 3, 3]  # 12 batches: 3 rounds of 4
    expected = [torch.tensor(p) for p in seen["expected"]]
    for replica in seen["replicas"]:  # every replica holds the same, reference, weights
        for got, want in zip(replica, expected, strict=True):
            # float32 sums in another order (mean of means vs one mean): a few ulps
            torch.testing.assert_close(torch.tensor(got), want, rtol=1e-5, atol=1e-6)


XMP_THREADS = """
    import json, torch, torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_multiprocessing as xmp
    import torch_xla.runtime as xr

    def replica(index):
        device = torch_xla.device()
        value = torch.tensor([index + 1.0]).to(device)
        total = xm.all_reduce(xm.REDUCE_SUM, value).cpu().tolist()
        payloads = [p.decode() for p in xm.rendezvous("r", str(index).encode())]
        return dict(device=str(device), ordinal=xr.global_ordinal(), world=xr.world_size(),
                    process=xr.process_index(), total=total, payloads=payloads)

    if __name__ == "__main__":
        print(json.dumps(xmp.spawn(replica)))
"""


def test_xmp_spawn_runs_two_processes_of_two_threads(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(XMP_THREADS))
    code = f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')"
    results = _last_json(run_python(code, {**FOUR, "CPU_DEVICES_PER_PROCESS": "2"}, timeout=400))
    assert sorted(results) == ["0", "1", "2", "3"]
    for key, seen in results.items():
        i = int(key)
        assert seen["ordinal"] == i and seen["world"] == 4
        assert seen["process"] == i // 2
        assert seen["device"] == f"xla:{i % 2}"  # devices are numbered within the process
        assert seen["total"] == [10.0]
        assert seen["payloads"] == ["0", "1", "2", "3"]
