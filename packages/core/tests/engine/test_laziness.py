"""Laziness: ops record IR, syncs run one compiled graph, the cache is keyed by structure."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_xla
import torch_xla._XLAC
import torch_xla.core.xla_model as xm

from .helpers import assert_close, run_python


def _counts(met):
    return met.counter_value("UncachedCompile") or 0, met.counter_value("CachedCompile") or 0


def test_ops_do_not_execute_until_a_sync(device, metrics):
    x = torch.randn(4, 4).to(device)
    y = (x @ x).relu() + 1
    assert metrics.metric_data("ExecuteTime") is None
    torch_xla.sync()
    assert metrics.metric_data("ExecuteTime")[0] == 1
    assert _counts(metrics) == (1, 0)
    assert_close(y, (x.cpu() @ x.cpu()).relu() + 1)


def test_mark_step_runs_all_live_tensors_in_one_graph(device, metrics):
    x = torch.randn(8).to(device)
    a, b, c = x.sin(), x.cos() * 2, (x + 1).sum()
    xm.mark_step()
    assert metrics.metric_data("ExecuteTime")[0] == 1
    assert _counts(metrics) == (1, 0)
    cpu = x.cpu()
    assert_close(a, cpu.sin())
    assert_close(b, cpu.cos() * 2)
    assert_close(c, (cpu + 1).sum())


def test_same_structure_hits_the_cache_with_new_data(device, metrics):
    for i in range(3):
        x = torch.full((5,), float(i)).to(device)
        y = x * 3 - 1
        torch_xla.sync()
        assert_close(y, torch.full((5,), float(i)) * 3 - 1)
    assert _counts(metrics) == (1, 2)


def test_shape_change_recompiles_and_old_shape_hits(device, metrics):
    def step(n):
        y = torch.ones(n).to(device).exp().sum()
        torch_xla.sync()
        return y

    step(3)
    step(4)
    assert _counts(metrics) == (2, 0)
    assert_close(step(3), torch.ones(3).exp().sum())
    assert _counts(metrics) == (2, 1)


def test_aliased_inputs_are_not_confused_with_distinct_inputs(device, metrics):
    a = torch.tensor([1.0, 2.0]).to(device)
    b = torch.tensor([10.0, 20.0]).to(device)
    s1 = a + a
    torch_xla.sync()
    s2 = a + b
    torch_xla.sync()
    assert_close(s1, torch.tensor([2.0, 4.0]))
    assert_close(s2, torch.tensor([11.0, 22.0]))


def test_item_syncs_only_what_it_needs(device, metrics):
    x = torch.arange(4.0).to(device)
    total = x.sum()
    other = x * 2
    assert total.item() == 6.0
    assert other._is_view() is False
    torch_xla.sync()
    assert_close(other, torch.arange(4.0) * 2)


def test_a_read_computes_the_live_tensors_on_its_way(device, metrics):
    """A host read also computes the live pending tensors its graph passes through, so a
    later graph starts from their data instead of computing them again."""
    x = torch.arange(4.0).to(device)
    on_the_way = x * 2
    total = (on_the_way + 1).sum()
    apart = x - 1  # not in the read's graph: stays pending
    assert total.item() == 16.0
    assert metrics.metric_data("ExecuteTime")[0] == 1
    assert "aten::mul" not in torch_xla._XLAC._get_xla_tensors_text([on_the_way])
    assert "aten::sub" in torch_xla._XLAC._get_xla_tensors_text([apart])
    later = on_the_way.exp()
    assert "aten::mul" not in torch_xla._XLAC._get_xla_tensors_text([later])
    torch_xla.sync()
    assert_close(on_the_way, torch.arange(4.0) * 2)
    assert_close(later, (torch.arange(4.0) * 2).exp())
    assert_close(apart, torch.arange(4.0) - 1)


def test_repeated_reads_of_a_growing_computation_compile_a_bounded_number_of_programs(
        device, metrics):
    """A loop that updates a tensor in place and reads a value each iteration (L-BFGS's
    stopping tests) compiles one program per distinct read, not one per iteration: each
    read leaves the tensor as data."""
    cpu = torch.linspace(-1, 1, 6)
    x = cpu.to(device)
    for i in range(8):
        x.mul_(0.9).add_(0.05)
        cpu.mul_(0.9).add_(0.05)
        assert x.sum().item() == pytest.approx(cpu.sum().item(), rel=1e-6), i
    # one program: every read's input buffer, the first one's copied from the host as the
    # later ones' computed by a program, is taken over for the new x (donation)
    assert _counts(metrics) == (1, 7)
    assert_close(x, cpu)


def test_alpha_and_weight_that_change_every_step_compile_once(device, metrics):
    """`add`/`sub`'s alpha and `lerp`'s weight are graph inputs, as `other` is (SGD's
    `param.add_(grad, alpha=-lr)` under a schedule); values and dtypes as eager's."""
    cpu = {
        "f32": torch.linspace(-3, 3, 6),
        "f16": torch.linspace(-3, 3, 6, dtype=torch.float16),
        "f64": torch.linspace(-3, 3, 6, dtype=torch.float64),
    }
    ints = {"i32": torch.arange(-3, 3, dtype=torch.int32),
            "u8": torch.arange(250, 256, dtype=torch.uint8)}
    floating = {
        "add": lambda t, k: t.add(t.flip(0), alpha=k),
        "sub": lambda t, k: torch.sub(t, t * 2, alpha=k),
        "rsub": lambda t, k: torch.rsub(t, 2.5, alpha=k),
        "lerp": lambda t, k: t.lerp(t.flip(0), k),
        "foreach_add": lambda t, k: torch._foreach_add([t, t * 3], [t, t], alpha=k)[1],
        "foreach_lerp": lambda t, k: torch._foreach_lerp([t], [t.flip(0)], k)[0],
    }
    integer = {
        "add": lambda t, k: t.add(t.flip(0), alpha=int(k * 10)),
        "sub": lambda t, k: torch.sub(t, t, alpha=int(k * 10)),
    }
    for tensors, ops in ((cpu, floating), (ints, integer)):
        for name, t in tensors.items():
            for op, fn in ops.items():
                xt = t.to(device)
                torch_xla.sync()
                metrics.clear_all()
                for k in (0.3, 0.7, 1.9):
                    expected, actual = fn(t, k), fn(xt, k)
                    torch_xla.sync()
                    assert actual.dtype == expected.dtype, (name, op)
                    # the CPU rounds float16's `alpha * other` before adding: 1 ulp apart
                    tol = {"rtol": 2e-3, "atol": 1e-3} if t.dtype == torch.float16 else {}
                    assert_close(actual, expected, **tol)
                assert _counts(metrics) == (1, 2), (name, op)


@pytest.mark.parametrize("name, options", [
    ("SGD", {"momentum": 0.9, "weight_decay": 1e-3}), ("Adam", {}), ("AdamW", {}),
    ("RMSprop", {"momentum": 0.9}),
])
def test_a_one_cycle_schedule_compiles_the_step_once(device, metrics, name, options):
    """OneCycleLR changes the learning rate and the momentum (Adam's beta1) every step;
    both reach the ops as numbers (`alpha=-lr`, `lerp`'s weight), which are step inputs.
    Before they were, every step compiled a new program."""
    for foreach in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        cpu_model = copy.deepcopy(model)
        model.to(device)
        opts = [getattr(torch.optim, name)(m.parameters(), lr=0.1, foreach=foreach, **options)
                for m in (model, cpu_model)]
        schedules = [torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=50)
                     for o in opts]
        x = torch.randn(3, 4)
        for step in range(6):
            if step == 3:
                metrics.clear_all()
            for m, opt, schedule, data in zip((model, cpu_model), opts, schedules,
                                              (x.to(device), x), strict=True):
                opt.zero_grad()
                m(data).square().sum().backward()
                opt.step()
                schedule.step()
            torch_xla.sync()
        assert _counts(metrics) == (0, 3), foreach
        for got, expected in zip(model.parameters(), cpu_model.parameters(), strict=True):
            assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_create_and_destroy_counters(device, metrics):
    x = torch.randn(3).to(device)
    for _ in range(4):
        x = x + 1
    torch_xla.sync()
    created = metrics.counter_value("CreateXlaTensor")
    destroyed = metrics.counter_value("DestroyXlaTensor")
    assert created >= 5 and destroyed >= 3


def test_transfer_metrics(device, metrics):
    x = torch.randn(16).to(device)
    x.cpu()
    assert metrics.metric_data("TransferToDeviceTime")[0] >= 1
    assert metrics.metric_data("TransferFromDeviceTime")[0] >= 1
    report = torch_xla._XLAC._xla_metrics_report()
    assert "Metric: TransferToDeviceTime" in report and "TotalSamples" in report
    assert report == metrics.metrics_report()


def test_wait_device_ops(device):
    x = torch.randn(64, 64).to(device)
    y = x @ x
    xm.mark_step()
    xm.wait_device_ops()
    assert_close(y, x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-4)


def test_fallback_counts_aten_op(device, metrics):
    x = torch.tensor([0.0, 1.0, 0.0, 2.0]).to(device)
    nz = torch.nonzero(x)
    assert_close(nz, torch.nonzero(torch.tensor([0.0, 1.0, 0.0, 2.0])))
    assert metrics.counter_value("aten::nonzero") == 1
    assert "aten::nonzero" in metrics.short_metrics_report()


def test_an_int_that_changes_every_step_compiles_once(device, metrics):
    # ints in `other`/`value`/`scalar` positions are graph inputs, as floats are
    x = torch.arange(6, dtype=torch.float32)
    i = torch.arange(6, dtype=torch.int32)
    xd, id_ = x.to(device), i.to(device)
    torch_xla.sync()
    metrics.clear_all()
    for step in (2, 3, 5, 7):
        y, j = xd * step + step, (id_ + step) // step
        torch_xla.sync()
        assert_close(y, x * step + step)
        assert_close(j, (i + step) // step)
    assert _counts(metrics) == (1, 3)


def test_lifted_ints_keep_torchs_dtypes_and_values(device):
    cpu = {
        "f32": torch.linspace(-3, 3, 6),
        "f16": torch.linspace(-3, 3, 6, dtype=torch.float16),
        "i32": torch.arange(-3, 3, dtype=torch.int32),
        "u8": torch.arange(250, 256, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True, True, False, False]),
    }
    ops = {
        "add": lambda t: t + 300,
        "mul": lambda t: t * 7,
        "sub": lambda t: 5 - t,
        "div": lambda t: t / 4,
        "floor_divide": lambda t: t // 3,
        "remainder": lambda t: t % 3,
        "eq": lambda t: t == 2,
        "where": lambda t: torch.where(t > 0, t, 9),
        "masked_fill": lambda t: t.masked_fill(t > 0, 4),
        "pad": lambda t: torch.nn.functional.pad(t, (1, 2), value=5),
    }
    for name, t in cpu.items():
        for op, fn in ops.items():
            if name == "bool" and op in ("sub", "floor_divide", "remainder"):
                continue  # torch refuses these on bool tensors
            expected = fn(t)
            actual = fn(t.to(device))
            assert actual.dtype == expected.dtype, (name, op)
            assert_close(actual, expected)


def test_a_scalar_fill_of_device_data_is_data_and_of_a_pending_value_a_node(device):
    """0-dim `ones_like`/`zeros_like`/`full_like` of a value already on the device (the
    root gradient of a compiled loss) is device data; of a pending value it stays a node
    (its constant folds into the step's graph). Values and dtypes as eager's either way."""
    cpu = torch.tensor(2.5)
    on_device = cpu.to(device)
    fills = {
        "ones_like": lambda t: torch.ones_like(t),
        "zeros_like": lambda t: torch.zeros_like(t),
        "full_like": lambda t: torch.full_like(t, -7.25),
        "full_like int64": lambda t: torch.full_like(t, 3, dtype=torch.int64),
        "ones_like bool": lambda t: torch.ones_like(t, dtype=torch.bool),
    }
    for name, fill in fills.items():
        expected = fill(cpu)
        ready, pending = fill(on_device), fill(on_device * 2)
        text = torch_xla._XLAC._get_xla_tensors_text([ready])
        assert "_like" not in text and "device_data" in text, (name, text)
        assert "_like" in torch_xla._XLAC._get_xla_tensors_text([pending]), name
        for got in (ready, pending):
            assert got.dtype == expected.dtype, name
            assert torch.equal(got.cpu(), expected), name
    ready = torch.ones_like(on_device)
    ready.add_(1)  # the cached scalar it came from is not written
    assert torch.ones_like(on_device).item() == 1.0 and ready.item() == 2.0
    vector = torch.ones(3).to(device)
    assert "ones_like" in torch_xla._XLAC._get_xla_tensors_text([torch.ones_like(vector)])


def test_no_special_scalars_lifts_zero_and_one_and_keeps_negative_zero():
    out = run_python(
        """
        import math, torch, torch_xla, torch_xla.debug.metrics as met
        x = torch.full((3,), 2.0, device=torch_xla.device())
        torch_xla.sync()
        met.clear_all()
        for k in (0.0, 1.0, -1.0, 0.5, -0.0):
            y = 1 / (x * k)
            torch_xla.sync()
            print(y.cpu()[0].item(), end=" ")
        print(met.counter_value("UncachedCompile"), met.counter_value("CachedCompile"))
        """,
        env={"PJRT_DEVICE": "CPU", "XLA_NO_SPECIAL_SCALARS": "1"},
    )
    assert out.split() == ["inf", "0.5", "-0.5", "1.0", "-inf", "1", "4"]
