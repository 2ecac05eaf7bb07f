"""`torch_xla._XLAC` entry points: devices, RNG, metrics, and the text of pending graphs."""

from __future__ import annotations

import pytest
import torch
from conftest import run_python

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_builder as builder
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr


@pytest.fixture
def device():
    return xm.xla_device()


def test_devices(device):
    assert xlac._xla_get_default_device() == "xla:0"
    assert xlac._xla_get_default_device_ordinal() == xr.global_ordinal() == 0
    assert xlac._xla_get_device_ordinal("xla:0") == 0
    assert xlac._xla_get_device_ordinal(torch.device("xla", 2)) == 2
    assert xlac._xla_get_devices() == xlac._xla_real_devices() == ["CPU:0"]
    assert xlac._xla_get_all_devices() == ["CPU:0"]
    assert xlac._xla_num_devices() == 1
    assert (xlac._xla_get_process_index(), xlac._xla_get_num_processes()) == (0, 1)
    assert xlac._xla_runtime_is_initialized()
    with pytest.raises(RuntimeError, match="Invalid device 'cpu'"):
        xlac._xla_get_device_ordinal("cpu")


def test_rng_seed_is_the_xm_state(device):
    xlac._xla_set_rng_seed(123, "xla:0")
    assert xlac._xla_get_rng_seed("xla:0") == xm.get_rng_state() == 123
    xm.set_rng_state(5)
    assert xlac._xla_get_rng_seed() == 5


def test_increment_counter():
    before = met.counter_value("ApiTestCounter") or 0
    xlac._xla_increment_counter("ApiTestCounter", 3)
    assert met.counter_value("ApiTestCounter") == before + 3


def test_tensors_text_shows_the_pending_ir_and_runs_nothing(device):
    a = torch.ones(2, 3, device=device)
    xm.mark_step()
    b = (a + 2).sum(dim=1)
    c = a.to(torch.bfloat16)
    lines = xlac._get_xla_tensors_text([b, c]).split("\n")
    assert lines[0] == "IR {" and lines[-2:] == ["}", ""]
    # PyTorch/XLA's post-order: an op's last input first (the 2, lifted to an input)
    assert lines[1] == "  %0 = f32[] xla::device_data()"
    assert lines[2] == "  %1 = f32[2,3]{1,0} xla::device_data()"
    assert lines[3] == "  %2 = f32[2,3]{1,0} aten::add(%1, %0)"
    assert lines[4] == "  %3 = f32[2]{0} aten::sum(%2), ROOT=0"
    assert lines[5].startswith("  %4 = bf16[2,3]{1,0} ") and lines[5].endswith("(%1), ROOT=1")
    assert b.cpu().tolist() == [9.0, 9.0]


def test_tensors_hlo_lowers_the_pending_graph(device):
    a = torch.arange(4.0, device=device)
    xm.mark_step()
    b = a * 3
    hlo = xlac._get_xla_tensors_hlo([b])
    assert hlo.startswith("HloModule")
    assert "multiply" in hlo and "parameter(0)" in hlo
    # parameters named as PyTorch/XLA names them, in the signature and in the operands
    # in PyTorch/XLA's order: the lifted 3 (the op's last input) is parameter 0
    assert "%p0.1 = f32[] parameter(0)" in hlo, hlo
    assert "%p1.1 = f32[4]{0} parameter(1)" in hlo, hlo
    assert "(p0.1: f32[], p1.1: f32[4])" in hlo and "%p1.1, " in hlo and "Arg_" not in hlo, hlo
    assert b.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]


def test_iota_device_lists_are_written_out():
    from torch_xla.pjrt import spmd

    assert spmd.explicit_device_lists("sharding={devices=[2,2]<=[4]}, x") == \
        "sharding={devices=[2,2]0,1,2,3}, x"
    assert spmd.explicit_device_lists("{devices=[4,2]<=[2,4]T(1,0) last_tile_dim_replicate}") \
        == "{devices=[4,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    assert spmd.explicit_device_lists("{devices=[2,1]1,0}") == "{devices=[2,1]1,0}"


def test_step_marker_sync_multi_and_cache_count(device):
    before = met.counter_value("MarkStep") or 0
    t = torch.ones(2, device=device) * 2
    xlac._xla_step_marker("xla:0", [], wait=True)
    assert met.counter_value("MarkStep") == before + 1
    u = t + 1
    xlac._xla_sync_multi([u], devices=[], wait=True)
    xlac._xla_wait_device_ops(devices=[])
    assert u.cpu().tolist() == [3.0, 3.0]
    assert xlac._xla_get_num_cached_compilation_graph() == xr.get_num_cached_compilation_graph()


def test_runtime_checks_go_through_xlac_so_mocks_apply(monkeypatch):
    monkeypatch.setattr(torch_xla._XLAC, "_xla_runtime_is_initialized", lambda: True)
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    with pytest.raises(RuntimeError, match="already started"):
        xr.set_device_type("ELSEWHERE")


def test_which_tensors_need_materialization_and_their_buffer_handles(device):
    cpu = torch.randn(20, 5)
    t = cpu.to(device)
    assert xlac._check_tensor_need_materialization([cpu, t]) == [False, False]
    twice = t * 2
    assert xlac._check_tensor_need_materialization([t, twice]) == [False, True]
    with pytest.raises(RuntimeError, match="still pending"):
        xlac._get_tensors_handle([twice])
    alias = t.detach()  # the same buffer
    other = cpu.to(device)  # another copy
    handles = xlac._get_tensors_handle([t, alias, other])
    assert handles[0] == handles[1] != handles[2]
    t.mul_(100)  # an in-place update is pending again
    assert xlac._check_tensor_need_materialization([t]) == [True]
    xm.mark_step()
    assert xlac._check_tensor_need_materialization([t, twice]) == [False, False]
    assert xlac._get_tensors_handle([t]) != handles[:1]
    torch.testing.assert_close(t.cpu(), cpu * 100)


def test_ir_debug_records_the_users_line(device):
    from torch_xla.lazy import functional

    before = xlac._get_ir_debug()
    t = torch.ones(3, device=device)
    try:
        xlac._set_ir_debug(True)
        assert xlac._get_ir_debug()
        traced = t + 1  # this line is named
        xlac._set_ir_debug(False)
        untraced = t + 2
    finally:
        xlac._set_ir_debug(before)
    assert "test_api_xlac.py" in str(functional.unwrap(traced)._node.location)
    assert functional.unwrap(untraced)._node.location is None


def test_mat_mul_precision_entry_point():
    from torch_xla.backends import get_mat_mul_precision

    before = get_mat_mul_precision()
    try:
        xlac._xla_set_mat_mul_precision("high")
        assert get_mat_mul_precision() == "high"
        with pytest.raises(ValueError, match="Invalid precision: 'fast'"):
            xlac._xla_set_mat_mul_precision("fast")
    finally:
        xlac._xla_set_mat_mul_precision(before)


def test_tensors_from_aten_copy_to_the_devices_named(device):
    a, b = torch.randn(3, 2), torch.arange(4)
    xa, xb = xlac._xla_tensors_from_aten([a, b], ["xla:0", "xla:0"])
    assert xa.device == xb.device == device
    assert xlac._check_tensor_need_materialization([xa, xb]) == [False, False]
    assert torch.equal(xa.cpu(), a) and torch.equal(xb.cpu(), b)
    with pytest.raises(ValueError, match="2 tensors but 1 devices"):
        xlac._xla_tensors_from_aten([a, b], ["xla:0"])
    with pytest.raises(TypeError, match="tensor 0 is not a CPU tensor"):
        xlac._xla_tensors_from_aten([xa], ["xla:0"])


def test_clear_pending_irs_drops_what_no_sync_computed(device):
    from torch_xla.lazy import graph

    torch_xla.sync()  # nothing of another test is pending
    a, b = torch.randn(20, 5), torch.randn(20, 5)
    t1, t2 = a.to(device), b.to(device)
    t3 = t2 + t1
    t4 = t3 * t2
    xlac._xla_sync_multi([t4], devices=[], wait=True)  # t4 computed, t3 still pending
    assert "aten::add" in xlac._get_xla_tensors_text([t3])
    executions = met.metric_data("ExecuteTime")[0]
    xlac._clear_pending_irs(str(device))
    assert "aten::add" not in xlac._get_xla_tensors_text([t3])
    assert xlac._is_placecholder(t3) and not xlac._is_placecholder(t4)
    assert "its pending value was dropped" in xlac._get_xla_tensor_debug_info(t3)
    torch_xla.sync()
    assert met.metric_data("ExecuteTime")[0] == executions  # nothing left to run
    torch.testing.assert_close(t4.cpu(), (a + b) * b)
    torch.testing.assert_close(t1.cpu(), a)
    with pytest.raises(graph.DroppedValueError, match=r"float32\[20, 5\]\) was read after"):
        t3.cpu()
    with pytest.raises(graph.DroppedValueError, match="_clear_pending_irs"):
        (t3 + 1).cpu()


def test_replace_xla_tensor_frees_and_refills_a_saved_parameter(device):
    # PyTorch/XLA's FSDP: a parameter the forward saved is freed, then refilled before
    # the backward, which reads the refilled value without a version error.
    torch.manual_seed(0)
    x_cpu = torch.randn(4)
    x = x_cpu.to(device).requires_grad_(True)
    p = torch.nn.Parameter(torch.ones(4, device=device))
    loss = (x * p).sum()
    destroyed = met.counter_value("DestroyXlaTensor") or 0
    assert xlac._replace_xla_tensor(p, p.new_zeros(1)) is p
    assert p.shape == (1,) and isinstance(p, torch.nn.Parameter) and p.requires_grad
    assert (met.counter_value("DestroyXlaTensor") or 0) > destroyed  # the full value freed
    refill = torch.full((4,), 3.0)
    xlac._replace_xla_tensor(p, refill.to(device))
    loss.backward()
    assert torch.equal(x.grad.cpu(), refill)  # d(x * p)/dx read the refilled p
    assert torch.equal(p.grad.cpu(), x_cpu)
    with pytest.raises(TypeError, match="dest is torch.float32 but source is torch.int64"):
        xlac._replace_xla_tensor(p, torch.zeros(4, dtype=torch.int64, device=device))
    with pytest.raises(TypeError, match="source must be an XLA tensor, got Tensor on cpu"):
        xlac._replace_xla_tensor(p, torch.zeros(4))


def test_dimension_size_is_an_int32_scalar_on_the_device(device):
    t = torch.ones(2, 5, device=device)
    picked = t[t.sum(1) == 5].nonzero()  # a data-dependent shape: (10, 2)
    for tensor, dim, size in ((t, 1, 5), (t, -2, 2), (picked, 0, 10)):
        found = xlac._get_xla_tensor_dimension_size(tensor, dim)
        assert found.device == device and found.dtype == torch.int32 and found.dim() == 0
        assert found.item() == size
    with pytest.raises(IndexError, match="Dimension out of range"):
        xlac._get_xla_tensor_dimension_size(t, 2)
    with pytest.raises(TypeError, match="expected an XLA tensor"):
        xlac._get_xla_tensor_dimension_size(torch.zeros(3), 0)


def test_a_replayed_graph_takes_the_seed_where_the_seed_id_says(device):
    # The contract PyTorch/XLA's dynamo bridge replays graphs with: the RNG seed is the
    # input whose id is `_get_seed_info_id()`, and `_get_base_seed_as_tensor` is the seed
    # of the ops recorded next.
    torch_xla.sync()
    torch_xla.manual_seed(7)
    x = torch.ones(4, device=device)
    out = x + torch.rand(4, device=device)
    ids, inputs = xlac._get_tensors_xla_device_data_node([out])
    assert ids.count(xlac._get_seed_info_id()) == 1
    assert xlac._get_seed_info_id() == -127389  # PyTorch/XLA's value
    name = xlac._get_graph_hash([out])
    xlac._xla_warm_up_cache([out], [])
    first = out.cpu()
    assert torch.equal(xlac._run_cached_graph(name, inputs)[0].cpu(), first)
    seed = xlac._get_base_seed_as_tensor(str(device))  # the next epoch's
    assert seed.device == device and seed.dtype == torch.uint32 and seed.shape == (2,)
    seed_id = xlac._get_seed_info_id()
    replayed = xlac._run_cached_graph(
        name, [seed if i == seed_id else t for i, t in zip(ids, inputs, strict=True)])
    recorded = x + torch.rand(4, device=device)  # the same epoch: the same numbers
    assert torch.equal(replayed[0].cpu(), recorded.cpu())
    assert not torch.equal(recorded.cpu(), first)
    assert bool(((first >= 1) & (first < 2)).all())


def test_git_revisions_and_the_lazy_backend():
    revisions = xlac._get_git_revs()
    assert revisions["torch"] == torch.version.git_version
    assert revisions["xla"].startswith(torch_xla.__version__)
    assert revisions["jaxlib"]
    done = run_python("""
        import sys, torch, torch_xla
        assert "torch_xla.lazy" not in sys.modules  # importing torch_xla loads no engine
        assert torch_xla._XLAC._xla_metrics_report() == ""  # and counts nothing
        torch_xla._XLAC._init_xla_lazy_backend()
        torch_xla._XLAC._init_xla_lazy_backend()
        import torch_xla.debug.metrics as met
        print("torch_xla.lazy" in sys.modules, (torch.ones(2, device="xla") * 3).sum().item(),
              met.counter_value("RegisterXLAFunctions"))  # the kernels register once
    """, {"PJRT_DEVICE": "CPU"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "6.0", "1"]


def test_run_cached_graph_runs_what_a_sync_compiled_on_device_or_cpu_inputs(device):
    """PyTorch/XLA's caller names a graph, syncs it, then replays it by name (its compile
    cache is keyed by the graph's hash), with inputs on the device or on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    x = torch.randn(3, 8)
    expected = model(x)
    model.to(device)
    out = model(x.to(device))
    ids, inputs = xlac._get_tensors_xla_device_data_node([out])
    name = xlac._get_graph_hash([out])
    xlac._xla_sync_multi([out], [])
    met.clear_all()
    for given in (inputs, [t.cpu() for t in inputs]):
        replayed = xlac._run_cached_graph(name, given)
        assert len(replayed) == 1 and replayed[0].device == device
        assert torch.allclose(replayed[0].cpu(), expected, rtol=1e-5, atol=1e-6)
    assert met.metric_data("RunCachedGraphInputData")[0] == 2  # one sample per call
    assert met.metric_data("RunCachedGraphOutputData")[0] == 2
    assert not met.metric_data("CompileTime")  # the sync's program, found by name
    with pytest.raises(RuntimeError, match="No compiled graph with hash 'nothing'"):
        xlac._run_cached_graph("nothing", inputs)


def test_graph_hash_names_marked_donors_only_under_the_donor_config(device):
    from torch_xla._dynamo.dynamo_bridge import alias_with_buffer_donor_config

    x = torch.randn(5, 5).to(device)
    res = torch.cos(x)
    plain = xlac._get_graph_hash([res])
    assert xlac._set_buffer_donation(x, True)
    assert xlac._get_graph_hash([res]) == plain
    with alias_with_buffer_donor_config() as before:
        assert before is False and xlac._xla_get_enable_alias_with_buffer_donor_config()
        marked = xlac._get_graph_hash([res])
    assert not xlac._xla_get_enable_alias_with_buffer_donor_config()
    assert marked != plain
    xlac._set_buffer_donation(x, False)


def test_on_ready_callback_runs_once_the_buffer_is_ready(device):
    import threading

    from torch_xla.experimental import callback

    c = torch_xla.compile(lambda: torch.ones(64, 64, device=device) @ torch.ones(64, 64,
                                                                               device=device))()
    seen, ready = [], threading.Event()

    def cb(tensor):
        seen.append((tensor, threading.current_thread() is threading.main_thread(),
                     "Data Handle: None" in xlac._get_xla_tensor_debug_info(tensor)))
        ready.set()

    callback.on_ready_callback(c, cb)
    assert ready.wait(30)
    assert seen == [(c, False, False)]  # the tensor itself, on another thread, with a buffer
    assert torch.equal(c.cpu(), torch.full((64, 64), 64.0))
    with pytest.raises(RuntimeError, match="still pending.*torch_xla.sync"):
        callback.on_ready_callback(c + 1, cb)
    assert callback.on_ready_event(c).wait(30)  # PyTorch/XLA's Event form of the same
    with pytest.raises(RuntimeError, match="still pending.*torch_xla.sync"):
        callback.on_ready_event(c + 1)


def test_debug_info_says_a_donated_buffer_is_deleted(device):
    x = torch.randn(4, 4).to(device)
    assert "Data Handle: Deleted" not in xlac._get_xla_tensor_debug_info(x)
    assert xlac._set_buffer_donation(x, True)
    y = x * 2
    xm.mark_step()
    assert y.shape == (4, 4)
    assert "  Data Handle: Deleted\n" in xlac._get_xla_tensor_debug_info(x)


def test_hlo_after_optimizations_and_stablehlo_locations_when_asked(device, monkeypatch):
    from torch_xla.lazy import dump

    x = torch.randn(8, 8).to(device)
    y = (x * 2 + 1).exp()
    before = xlac._get_xla_tensors_hlo([y])
    monkeypatch.setenv("XLA_DUMP_POST_OPTIMIZATIONS", "1")  # read on each call
    after = xlac._get_xla_tensors_hlo([y])
    assert "fusion" in after and "fusion" not in before  # XLA's passes have run
    assert "#loc" not in xm.get_stablehlo([y])
    monkeypatch.setattr(dump, "FRAMES", True)  # XLA_HLO_DEBUG=1
    assert "#loc" in xm.get_stablehlo([y])


def test_stablehlo_compile_switch_counts_each_compile(device, monkeypatch):
    monkeypatch.setenv("XLA_STABLEHLO_COMPILE", "1")
    met.clear_all()
    x = torch.randn(3, 5).to(device)
    (x.sin() * 17).cpu()
    assert met.counter_value("StableHloCompile") == 1
    (x.sin() * 17).cpu()  # the same graph: cached
    assert met.counter_value("StableHloCompile") == 1


def test_full_mat_mul_precision_switch_of_older_releases():
    from torch_xla.lowering import policy

    before = policy.matmul_precision
    try:
        xlac._xla_set_use_full_mat_mul_precision(True)
        assert policy.matmul_precision == "highest"
        xlac._xla_set_use_full_mat_mul_precision(False)
        assert policy.matmul_precision == "default"
    finally:
        xlac._xla_set_mat_mul_precision(before)


def test_set_allow_execution_false_makes_any_graph_run_raise(device):
    """PyTorch/XLA's switch: while execution is disallowed, a graph about to run raises
    (data already on the device still reads, a copy is no execution); allowing it again
    computes the same pending value."""
    x = torch.ones(2, device=device) * 3
    stored = torch.arange(3.0).to(device)
    xlac._set_allow_execution(False)
    try:
        with pytest.raises(RuntimeError, match="Unexpected execution happens inside the "
                                               "compiled function"):
            x.cpu()
        with pytest.raises(RuntimeError, match="Unexpected execution"):
            torch_xla.sync()
        assert stored.cpu().tolist() == [0.0, 1.0, 2.0]
    finally:
        xlac._set_allow_execution(True)
    assert x.cpu().tolist() == [3.0, 3.0]


def test_dot_general_contracts_and_batches_as_xla_does(device):
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
    batched = xlac._xla_dot_general(a.to(device), b.to(device), (([2], [1]), ([0], [0])))
    torch.testing.assert_close(batched.cpu(), torch.bmm(a, b))
    t, w = torch.ones(2, 1), torch.ones(1, 2)
    t_xla = t.to(device)
    t_xla[0][0] = 0  # an in-place update pending under the op, as upstream's test does
    t[0][0] = 0
    product = xlac._xla_dot_general(t_xla, w.to(device), (([1], [0]), ()))
    torch.testing.assert_close(product.cpu(), t @ w)
    i, j = torch.randint(-9, 9, (2, 3), dtype=torch.int8), torch.randint(-9, 9, (3,),
                                                                       dtype=torch.int8)
    wide = xlac._xla_dot_general(i.to(device), j.to(device), (([1], [0]), ()),
                                 preferred_element_type=torch.int32)
    assert wide.dtype == torch.int32
    torch.testing.assert_close(wide.cpu(), i.int() @ j.int())
    with pytest.raises(ValueError, match=r"dimension numbers .* are not"):
        xlac._xla_dot_general(t_xla, w.to(device), ([1], [0]))
    with pytest.raises(ValueError, match="precision_config 'fast'"):
        xlac._xla_dot_general(t_xla, w.to(device), (([1], [0]), ()), precision_config="fast")
    counted_back = xlac._xla_dot_general(a.to(device), b.to(device), (([-1], [-2]), ([0], [0])))
    torch.testing.assert_close(counted_back.cpu(), torch.bmm(a, b))
    with pytest.raises(ValueError, match="dimension 3 of the lhs operand is out of range"):
        xlac._xla_dot_general(a.to(device), b.to(device), (([3], [1]), ([0], [0]))).cpu()


def test_xla_user_computation_records_a_builder_computation(device):
    """PyTorch/XLA's C++ entry for `builder.user_computation`: the computation's results."""

    def fn(a, b):
        return builder.Op.tuple([builder.Op.max(a, b) - builder.Op.min(a, b)])

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    inputs = [a.to(device), b.to(device)]
    comp = builder.create_computation("absdiff", fn, [builder.tensor_shape(t) for t in inputs])
    (out,) = xlac._xla_user_computation("xla::absdiff", inputs, comp)
    torch.testing.assert_close(out.cpu(), (a - b).abs())


def test_lowering_context_gives_the_hlo_of_tensors_and_their_parameters(device):
    a_cpu, b_cpu, c_cpu = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    a, b, c = a_cpu.to(device), b_cpu.to(device), c_cpu.to(device)
    torch_xla.sync()
    result = a * 2 + b + torch.zeros_like(c)  # c: only its shape is read
    ctx = xlac.lowering.LoweringContext("MyGraph")
    assert ctx.get_name_string() == "MyGraph"
    with pytest.raises(RuntimeError, match="build"):
        ctx.hlo()
    met.clear_all()
    ctx.build([result])
    assert not met.metric_data("ExecuteTime")  # nothing ran
    text = builder.get_computation_hlo(builder.computation_from_module_proto("g", ctx.hlo()))
    assert text.startswith("HloModule jit_MyGraph"), text
    assert "multiply(" in text and "add(" in text, text
    assert text == ctx.hlo_text()
    on_device = ctx.device_parameter_id_tensor_mapping()
    on_cpu = ctx.parameter_id_tensor_mapping()
    assert sorted(on_device) == sorted(on_cpu) == list(range(len(on_device)))
    for k in on_device:  # every one a parameter of the module (the scalar 2 too)
        assert f"parameter({k})" in text, text
    ids = [ctx.tensor_parameter_id(t) for t in (a, b, c)]
    assert len(set(ids)) == 3 and set(ids) <= set(on_device), ids
    assert ctx.tensor_parameter_id(result) == -1  # pending: no parameter
    assert ctx.tensor_parameter_id(torch.ones(2, device=device)) == -1
    for t, expected in zip((a, b, c), (a_cpu, b_cpu, c_cpu), strict=True):
        k = ctx.tensor_parameter_id(t)
        assert on_device[k].device.type == "xla"
        torch.testing.assert_close(on_device[k].cpu(), expected)
        torch.testing.assert_close(on_cpu[k], expected)
    torch.testing.assert_close(result.cpu(), a_cpu * 2 + b_cpu)  # the graph still runs
    # ids follow _get_tensors_xla_device_data_node's order
    result2 = a * 2 + b + torch.zeros_like(c)
    ctx.build([result2])
    _, inputs = xlac._get_tensors_xla_device_data_node([result2])
    assert [ctx.tensor_parameter_id(t) for t in inputs] == list(range(len(inputs)))
    ctx.set_name_string("Other")
    ctx.build([result2])
    assert ctx.hlo_text().startswith("HloModule jit_Other")
    with pytest.raises(NotImplementedError, match="hlo_json"):
        ctx.hlo_json()


def test_a_computation_read_from_a_module_proto_prints_but_does_not_run(device):
    ctx = xlac.lowering.LoweringContext("G")
    x = torch.ones(2, device=device)
    ctx.build([x + 1])
    computation = builder.computation_from_module_proto("read", ctx.hlo())
    with pytest.raises(TypeError, match="cannot run here"):
        builder.user_computation("op", [x], computation)
    with pytest.raises(ValueError, match="not a serialized HloModuleProto"):
        builder.computation_from_module_proto("junk", b"\x01\x02junk")
