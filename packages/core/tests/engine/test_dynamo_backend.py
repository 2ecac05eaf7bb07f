"""`torch.compile(backend='openxla')` (torch_xla._dynamo.dynamo_bridge) against eager CPU
PyTorch: inference, training through AOTAutograd, recompilation, graph breaks, mutated
inputs, random ops and ops that fall back to the CPU.

Tolerances: float32 results of the same ops in another order (XLA fuses and reassociates)
agree to rtol=1e-5, atol=1e-5; gradients through a conv net to 1e-4.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

import torch_xla

from .helpers import assert_close, run_python

TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def counter(met, name: str) -> int:
    return met.counter_value(name) or 0


def samples(met, name: str) -> int:
    data = met.metric_data(name)
    return data[0] if data else 0


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def on_xla(model: nn.Module, device) -> nn.Module:
    copy = type(model)() if isinstance(model, ConvNet) else mlp()
    copy.load_state_dict(model.state_dict())
    return copy.to(device)


# --- inference ------------------------------------------------------------------------


@pytest.mark.parametrize("make, shape", [(mlp, (8, 16)), (ConvNet, (2, 3, 8, 8))])
def test_inference_matches_cpu(device, make, shape):
    model = make().eval()
    xla_model = on_xla(model, device).eval()
    compiled = torch.compile(xla_model, backend="openxla")
    for seed in range(3):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert_close(compiled(x.to(device)).cpu(), model(x), **TOL)


def test_second_call_runs_cached_program(device, metrics):
    fn = torch.compile(lambda x, y: torch.cos(x) + torch.sin(y), backend="openxla")
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    fn(x.to(device), y.to(device))
    extracted = counter(metrics, "DynamoExtractCompiledGraph")
    compiles = samples(metrics, "CompileTime")
    runs = samples(metrics, "ExecuteTime")
    out = fn(x.to(device), y.to(device))
    assert counter(metrics, "DynamoExtractCompiledGraph") == extracted == 1
    assert samples(metrics, "CompileTime") == compiles
    assert samples(metrics, "ExecuteTime") == runs + 1
    assert_close(out.cpu(), torch.cos(x) + torch.sin(y), **TOL)


def test_new_shape_recompiles(device, metrics):
    fn = torch.compile(lambda x: x.exp().sum(0), backend="openxla", dynamic=False)
    for n in (3, 3, 6, 6):
        x = torch.randn(n, 4)
        assert_close(fn(x.to(device)).cpu(), x.exp().sum(0), **TOL)
    assert counter(metrics, "DynamoExtractCompiledGraph") == 2
    assert counter(metrics, "UncachedCompile") == 2


def test_dynamic_shapes_compile_once_per_size(device, metrics):
    linear = mlp()
    compiled = torch.compile(on_xla(linear, device), backend="openxla", dynamic=True)
    for n in (5, 7, 5):
        x = torch.randn(n, 16)
        with torch.no_grad():
            assert_close(compiled(x.to(device)).cpu(), linear(x), **TOL)
    assert counter(metrics, "DynamoExtractCompiledGraph") == 1
    assert samples(metrics, "CompileTime") == 2  # sizes 5 and 7; 5 again is cached


def test_input_returned_unchanged_is_the_same_tensor(device):
    fn = torch.compile(lambda a, b: (a + b, b), backend="openxla")
    a, b = torch.randn(3).to(device), torch.randn(3).to(device)
    total, same = fn(a, b)
    assert same is b
    assert_close(total.cpu(), a.cpu() + b.cpu(), **TOL)


# --- training -------------------------------------------------------------------------


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.cpu() for p in model.parameters()]


@pytest.mark.parametrize("make, shape", [(mlp, (8, 16)), (ConvNet, (2, 3, 8, 8))])
def test_training_loss_and_grads_match_cpu(device, make, shape):
    model = make().train()
    xla_model = on_xla(model, device).train()
    compiled = torch.compile(xla_model, backend="openxla")
    for seed in range(2):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        model.zero_grad(set_to_none=True)
        xla_model.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        xla_loss = compiled(x.to(device)).square().mean()
        xla_loss.backward()
        assert_close(xla_loss.cpu(), loss, **TOL)
        for got, want in zip(grads(xla_model), grads(model), strict=True):
            assert_close(got, want, **GRAD_TOL)
    for name, buffer in model.named_buffers():  # BatchNorm's running stats, written back
        assert_close(dict(xla_model.named_buffers())[name].cpu(), buffer, **GRAD_TOL)


def _multilabel_loss(x, target):
    return torch.nn.functional.multilabel_margin_loss(x, target, reduction="none")


def test_training_graph_of_a_loss_torch_decomposes_wrongly_matches_cpu(device):
    """AOTAutograd traces multilabel_margin_loss_forward through torch's decomposition,
    which counts a -1-padded target's padding; graphs on the device get ours."""
    from torch._C import DispatchKey

    target = torch.tensor([[1, -1, -1, -1], [2, 0, -1, 2], [0, 1, 2, 3]])
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    expected = _multilabel_loss(x, target)
    expected.sum().backward()
    xla_x = x.detach().to(device).requires_grad_()
    loss = torch.compile(_multilabel_loss, backend="openxla")(xla_x, target.to(device))
    loss.sum().backward()
    assert_close(loss.cpu(), expected.detach())
    assert_close(xla_x.grad.cpu(), x.grad)
    # other devices keep torch's kernel
    op = torch.ops.aten.multilabel_margin_loss_forward.default
    kernel = op.py_kernels[DispatchKey.Autograd]
    torchs = torch._decomp.decomposition_table[op](x.detach(), target, 0)
    torch.testing.assert_close(tuple(kernel(x.detach(), target, 0)), tuple(torchs))


class _KeyValueCache:
    """transformers' DynamicCache starts each layer's keys as `torch.tensor([])` on the
    device of the first update, inside the compiled forward."""

    def __init__(self):
        self.keys = None

    def update(self, k):
        if self.keys is None:
            self.keys = torch.tensor([], dtype=k.dtype, device=k.device)
        self.keys = torch.cat([self.keys, k], dim=-2)
        return self.keys


def _attend(q, k):
    keys = _KeyValueCache().update(k * torch.tensor([1.0, 0.5, 2.0, -1.0], device=k.device))
    return (q @ keys.transpose(-1, -2)).softmax(-1) @ keys


@pytest.mark.parametrize("backend", ["openxla", "openxla_eval"])
def test_a_tensor_made_from_data_inside_the_graph_is_a_constant(device, backend):
    """Fake-tensor propagation used to meet the real device tensor `torch.tensor` made
    (dynamo: "Input tensor is not an XLA tensor"; AOTAutograd: a fake graph constant)."""
    torch._dynamo.reset()
    q = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    k = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    expected = _attend(q, k)
    xq, xk = (t.detach().to(device).requires_grad_() for t in (q, k))
    got = torch.compile(_attend, backend=backend)(xq, xk)
    assert_close(got.cpu(), expected.detach(), **TOL)
    if backend == "openxla":
        expected.sum().backward()
        got.sum().backward()
        assert_close(xq.grad.cpu(), q.grad, **GRAD_TOL)
        assert_close(xk.grad.cpu(), k.grad, **GRAD_TOL)


def test_tensor_from_data_under_fake_tensor_mode_is_a_fake_constant(device):
    """As on the CPU: a fake tensor of the mode; one element is kept as its constant (the
    mode propagates constants of at most one element)."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        one, two = torch.tensor([1.5], device=device), torch.tensor([1.5, -2.0], device=device)
    for t in (one, two):
        assert isinstance(t, FakeTensor) and t.device == device
    assert_close(one.constant, torch.tensor([1.5]))
    assert_close(torch.tensor([1.5, -2.0], device=device), torch.tensor([1.5, -2.0]))


def test_training_through_an_op_torch_has_no_meta_kernel_for(device):
    """fractional_max_pool3d_backward has no meta kernel in torch: fake tensors ran its real
    kernel on the device, where a Python backend has none (backend/meta_kernels.py)."""
    torch._dynamo.reset()
    samples = torch.rand(1, 2, 3, generator=torch.Generator().manual_seed(0))

    def pool(x):
        return torch.nn.functional.fractional_max_pool3d(
            x, 2, output_ratio=0.5, _random_samples=samples.to(x.device))

    x = torch.randn(1, 2, 6, 6, 6, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    expected = pool(x)
    expected.square().sum().backward()
    xla_x = x.detach().to(device).requires_grad_()
    got = torch.compile(pool, backend="openxla")(xla_x)
    got.square().sum().backward()
    assert_close(got.cpu(), expected.detach())
    assert_close(xla_x.grad.cpu(), x.grad)


def test_training_step_with_backward_and_optimizer(device):
    model = mlp()
    xla_model = on_xla(model, device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xla_opt = torch.optim.SGD(xla_model.parameters(), lr=0.1)

    def step(m, o, x):
        o.zero_grad(set_to_none=True)
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        return loss

    compiled = torch.compile(step, backend="openxla")
    for seed in range(3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))
        assert_close(compiled(xla_model, xla_opt, x.to(device)).cpu(), step(model, opt, x), **TOL)
    for got, want in zip(xla_model.parameters(), model.parameters(), strict=True):
        assert_close(got.cpu(), want.detach(), **GRAD_TOL)


# --- graph breaks, mutation, randomness, CPU fallbacks --------------------------------


def test_graph_break_runs_both_graphs(device, metrics):
    def fn(x):
        y = x.sin() * 2
        torch._dynamo.graph_break()
        return y.cos() + 1

    x = torch.randn(6)
    assert_close(torch.compile(fn, backend="openxla")(x.to(device)).cpu(), fn(x), **TOL)
    assert counter(metrics, "DynamoExtractCompiledGraph") == 2


def test_a_graph_break_before_the_first_graph_runs_the_op_eagerly():
    """An op without a meta kernel breaks dynamo's graph and runs eagerly with dynamo's
    frame callback still set. When it came before any graph was compiled (so before
    the bridge was imported), dynamo traced the engine's own frames as user code and
    failed inside jaxlib with a TypeError; the engine's frames are skipped from its
    first op on. `torch._foobar` is ATen's test op (a copy) and has no meta kernel."""
    out = run_python("""
        import torch, torch_xla
        def fn(t):
            return torch._foobar(t) * 2
        t = torch.randn(5)
        got = torch.compile(fn, backend="openxla")(t.to("xla"))
        print("equal", torch.allclose(got.cpu(), fn(t)))
    """)
    assert "equal True" in out, out


def test_fullgraph_traces_through_the_engine_code_an_api_calls(device):
    """The engine's packages are skipped where dynamo would compile their frames on their
    own, but traced through when compiled code calls them: `xm.all_reduce` checks its
    arguments with `lowering.collectives`, which under `fullgraph=True` failed as a call
    to a skipped function."""
    import torch_xla.core.xla_model as xm

    def reduce(t):
        return xm.all_reduce(xm.REDUCE_SUM, t) * 2

    t = torch.randn(5)
    compiled = torch.compile(reduce, backend="openxla", fullgraph=True)
    assert_close(compiled(t.to(device)).cpu(), t * 2, **TOL)  # one replica: the sum is t


def test_code_dynamo_traces_may_call_the_bridge(device):
    """A user's AOTAutograd compiler returns a function that calls the bridge
    (`extract_compiled_graph`, then the compiled graph: upstream's test_bridge does), and
    dynamo runs it while its frame callback is set. It traced into the bridge and failed
    on fake tensors (`_functionalize_sync` in the engine); the bridge is skipped, so dynamo
    breaks the graph there, as at PyTorch/XLA's C++ bridge. The engine's top-level
    modules made all of torch_xla traced-when-called before."""
    from torch_xla._dynamo import dynamo_bridge

    class AddOne(nn.Module):
        def forward(self, x):
            return x + 1

    t = torch.randn(3)
    compiled_graph = dynamo_bridge.extract_compiled_graph(torch.fx.symbolic_trace(AddOne()),
                                                          (t.to(device),))
    traced = torch._dynamo.optimize("eager")(lambda x: compiled_graph(x) * 2)
    assert_close(traced(t.to(device)).cpu(), (t + 1) * 2, **TOL)
    built = torch._dynamo.optimize("eager")(
        lambda x: dynamo_bridge.extract_compiled_graph(torch.fx.symbolic_trace(AddOne()),
                                                       (x,))(x))
    assert_close(built(t.to(device)).cpu(), t + 1, **TOL)


@pytest.mark.parametrize("backend", ["openxla", "openxla_eval"])
def test_mutated_input_is_written_back(device, backend):
    def fn(a, b):
        a.add_(b)
        return a * 2

    compiled = torch.compile(fn, backend=backend)
    a, b = torch.randn(4), torch.randn(4)
    xa, xb = a.to(device), b.to(device)
    for _ in range(3):
        out = compiled(xa, xb)
        expected = fn(a, b)
        assert_close(out.cpu(), expected, **TOL)
        assert_close(xa.cpu(), a, **TOL)


@pytest.mark.parametrize("backend", ["openxla", "openxla_eval"])
def test_copy_into_an_input_and_an_intermediate(device, backend):
    """AOTAutograd traces `copy_` with fake tensors inside functional ones: the engine's
    direct assignment of one xla tensor to another must leave those to PyTorch."""
    def fn(a, b):
        a.copy_(b * 2)
        t = a * 3
        t.copy_(b)
        return t + 1

    compiled = torch.compile(fn, backend=backend)
    b = torch.arange(3.0)
    for _ in range(2):
        a, xa = torch.zeros(3), torch.zeros(3).to(device)
        assert_close(compiled(xa, b.to(device)).cpu(), fn(a, b), **TOL)
        assert_close(xa.cpu(), a, **TOL)


@pytest.mark.parametrize("capturable", [False, True])
def test_compiled_adamw_step_matches_cpu(device, metrics, capturable):
    """`torch.compile(opt.step)` runs the update as one program. Without `capturable`,
    AdamW keeps its step counts on the CPU: the CPU ops run eagerly and the bias
    corrections they compute are fed to the program on every call (before, the graph was
    split into three programs with ops recorded lazily between them)."""
    model = mlp()
    xla_model = on_xla(model, device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    xla_opt = torch.optim.AdamW(xla_model.parameters(), lr=0.05, capturable=capturable)
    xla_step = torch.compile(xla_opt.step, backend="openxla")
    for seed in range(4):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))
        for m, o, step, inputs in ((model, opt, opt.step, x), (xla_model, xla_opt, xla_step,
                                                               x.to(device))):
            o.zero_grad()
            m(inputs).square().mean().backward()
            torch_xla.sync()
            runs, syncs = samples(metrics, "ExecuteTime"), counter(
                metrics, "DynamoSyncInputExecuteTime")
            step()
        if seed:  # after the call that traced and compiled it
            assert samples(metrics, "ExecuteTime") - runs == 1
            assert counter(metrics, "DynamoSyncInputExecuteTime") == syncs
            assert not pending(*xla_model.parameters())
        torch_xla.sync()
    for got, want in zip(xla_model.parameters(), model.parameters(), strict=True):
        assert_close(got.cpu(), want.detach(), **GRAD_TOL)
    steps = [s["step"] for s in xla_opt.state.values()]
    assert all(s.device.type == ("xla" if capturable else "cpu") for s in steps)
    assert all(float(s) == 4 for s in steps)


def pending(*tensors: torch.Tensor) -> bool:
    """Whether any of `tensors` is still recorded IR rather than device data."""
    from torch_xla.lazy import functional

    return any(functional.unwrap(t)._node.rule is not None for t in tensors)


def test_cpu_scalar_arguments_are_program_inputs(device, metrics):
    """A CPU 0-dim tensor mixed into device ops is fed to the program on every call, not
    frozen at the value the first call traced; CPU ops on it still run on the CPU."""
    def fn(x, step, scale):
        correction = 1 - 0.9 ** step  # CPU ops on the CPU scalar
        return x * scale / correction, step, correction

    compiled = torch.compile(fn, backend="openxla")
    x = torch.randn(5)
    xd = x.to(device)
    for k in range(1, 4):
        step, scale = torch.tensor(float(k)), torch.tensor(0.5 * k)
        calls = samples(metrics, "RunCachedGraphInputData")
        got, got_step, got_correction = compiled(xd, step, scale)
        assert samples(metrics, "RunCachedGraphInputData") == calls + 1  # one program
        assert not pending(got)  # computed by the program, nothing recorded lazily
        want, _, want_correction = fn(x, step, scale)
        assert_close(got.cpu(), want, **TOL)
        assert got_step is step  # a CPU argument returned as itself
        assert got_correction.device.type == "cpu"
        assert_close(got_correction, want_correction, **TOL)
    assert samples(metrics, "CompileTime") == 1


def test_a_graph_reading_a_cpu_scalar_on_the_host_is_not_frozen(device):
    """A CPU 0-dim argument traced as a device scalar: an op that reads it on the host
    (here `.item()`, which dynamo itself would not capture) keeps the graph from being
    compiled with the value of the first call; it runs lazily on every call instead."""
    from torch_xla._dynamo import dynamo_bridge

    def fn(x, s):
        return x * s.item() + s

    x = torch.randn(4)
    xd = x.to(device)
    compiled = dynamo_bridge.extract_compiled_graph(torch.fx.symbolic_trace(fn),
                                                    [xd, torch.tensor(2.0)])
    for value in (2.0, 3.0, -1.5):
        s = torch.tensor(value)
        assert_close(compiled(xd, s).cpu(), fn(x, s), **TOL)


def test_random_ops_differ_per_call(device):
    fn = torch.compile(lambda x: torch.randn(5, 5, device=x.device) + x, backend="openxla")
    x = torch.zeros(5, 5).to(device)
    first, second = fn(x).cpu(), fn(x).cpu()
    assert not torch.equal(first, second)
    assert 0.5 < first.std().item() < 1.5  # draws from N(0, 1), not a constant
    seeded = []
    for _ in range(2):
        torch_xla.manual_seed(7)
        seeded.append(fn(x).cpu())
    assert torch.equal(*seeded)  # the seed comes from the RNG state, as for lazy ops


def test_op_without_lowering_runs_between_compiled_parts(device, metrics):
    def fn(t):
        return torch.special.bessel_j0(t * 2) * 2  # no lowering: bessel_j0 runs on the CPU

    compiled = torch.compile(fn, backend="openxla")
    t = torch.randn(7)
    for scale in (1.0, 3.0, 1.0):
        assert_close(compiled(t.to(device) * scale).cpu(), fn(t * scale), **TOL)
    assert counter(metrics, "DynamoExtractCompiledGraph") == 1  # one FX graph, split in two
    assert metrics.executed_fallback_ops()
    runs = samples(metrics, "ExecuteTime")
    compiled(t.to(device))
    assert samples(metrics, "ExecuteTime") == runs + 2  # the two compiled parts


def test_xla_dynamo_debug_prints_each_compiled_graph_and_its_cpu_fallbacks():
    out = run_python("""
        import torch, torch_xla
        from torch_xla._dynamo import dynamo_bridge as bridge
        def fn(t):
            return torch.special.bessel_j0(t * 2) * 2  # no lowering: runs on the CPU
        t = torch.randn(5).to("xla")
        got = torch.compile(fn, backend="openxla")(t)
        print("equal", torch.allclose(got.cpu(), fn(t.cpu())))
        print("fallbacks", bridge.get_fallback_ops(), bridge.is_xla_tensor(got),
              bridge.is_xla_tensor(t.cpu()))
    """, env={"XLA_DYNAMO_DEBUG": "1"})
    assert "=== torch_xla dynamo bridge: compiling ===" in out, out
    assert "special_bessel_j0" in out and "arguments: [((5,), torch.float32, 'xla:0')]" in out
    assert "Dynamo fallback ops are [special_bessel_j0]" in out, out
    assert "equal True" in out
    assert "fallbacks ['prims::bessel_j0'] True False" in out, out  # the op CPU torch ran


@pytest.mark.parametrize("kind", [list, tuple])
def test_none_remover_takes_nones_out_and_puts_them_back(kind):
    from torch_xla._dynamo.dynamo_bridge import NoneRemover

    remover = NoneRemover()
    original = kind([None, "a", None, "b", None])
    stripped = remover.remove_nones(original)
    assert stripped == kind(["a", "b"]) and remover.none_poslist == [0, 2, 4]
    assert (stripped is original) == (kind is list)  # a list is changed in place
    restored = remover.add_nones(stripped)
    assert restored == kind([None, "a", None, "b", None])
    assert (restored is stripped) == (kind is list)


def test_bridge_module_names(device):
    import torch_xla._dynamo.config as config
    import torch_xla.core.dynamo_bridge as bridge

    assert callable(bridge.extract_compiled_graph)
    assert config.skip_input_data_check is False
    assert torch_xla._dynamo.dynamo_bridge.extract_compiled_graph is bridge.extract_compiled_graph


# --- the per-call plan: input slots, output templates ---------------------------------


def test_pending_input_is_computed_before_the_program(device, metrics):
    import torch_xla._dynamo.config as config

    fn = torch.compile(lambda x, y: x * y + 1, backend="openxla")
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    xx, xy = x.to(device), y.to(device)
    fn(xx, xy)
    synced = counter(metrics, "DynamoSyncInputExecuteTime")
    assert_close(fn(xx * 3, xy).cpu(), x * 3 * y + 1, **TOL)  # `xx * 3` is still IR
    assert counter(metrics, "DynamoSyncInputExecuteTime") == synced + 1
    config.skip_input_data_check = True
    try:
        # PyTorch/XLA's words, which its tests match
        with pytest.raises(RuntimeError, match="input data to dynamo graph can not be a "
                           "pending ir, please set `torch_xla._dynamo.config.skip_input_data_"
                           "check` to False"):
            fn(xx * 3, xy)
    finally:
        config.skip_input_data_check = False


def test_pending_arguments_are_computed_with_the_values_on_their_way(device):
    """A lazily computed gradient passed to a compiled function is computed before the
    call together with the live tensors its graph computes on the way (its base:
    AccumulateGrad stores a detached alias), as a read computes them; only the argument
    itself was, which left the base pending for the next step to compute again."""
    from torch_xla.lazy import graph

    w_cpu, x_cpu = torch.randn(3, 5), torch.randn(3, 5)
    w = w_cpu.to(device).requires_grad_()
    x = x_cpu.to(device)
    ref = w_cpu.clone().requires_grad_()
    step = torch.compile(lambda p, g: p - 0.1 * g, backend="openxla")
    for _ in range(3):
        w.grad = ref.grad = None
        (x * w).cos().sum().backward()
        (x_cpu * ref).cos().sum().backward()
        new = step(w.detach(), w.grad)
        assert graph.pending_tensors() == []
        assert_close(new.cpu(), ref.detach() - 0.1 * ref.grad, **TOL)


def test_a_graph_compiled_by_a_sync_serves_the_compiled_function(device, metrics):
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    xx, xy = x.to(device), y.to(device)
    lazy = torch.cos(xx) * xy
    torch_xla.sync()
    compiles = samples(metrics, "CompileTime")
    fn = torch.compile(lambda a, b: torch.cos(a) * b, backend="openxla")
    assert_close(fn(xx, xy).cpu(), torch.cos(x) * y, **TOL)
    assert samples(metrics, "CompileTime") == compiles  # one graph, one program
    assert_close(lazy.cpu(), torch.cos(x) * y, **TOL)


def test_a_marked_argument_is_donated_by_the_compiled_graph(device, metrics):
    """As PyTorch/XLA's bridge: a buffer marked with `_set_buffer_donation` (or the
    `dynamo_set_buffer_donor_` op inside the function) goes to an output of the graph,
    and the graph keeps donating that argument on later calls (dynamo does not guard on
    the mark)."""
    from torch_xla.lazy.graph import DonatedBufferError

    x = torch.randn(5, 5)
    xx = x.to(device)
    assert torch_xla._XLAC._set_buffer_donation(xx, True)
    out = torch.compile(lambda t: t + 1, backend="openxla")(xx)
    assert_close(out.cpu(), x + 1, **TOL)
    assert "Data Handle: Deleted" in torch_xla._XLAC._get_xla_tensor_debug_info(xx)
    with pytest.raises(DonatedBufferError, match="torch.compile graph"):
        xx.cpu()

    def step(t):
        torch.ops.xla.dynamo_set_buffer_donor_(t, True)
        t += 0.5 * torch.sin(t)

    compiled = torch.compile(step, backend="openxla")
    cpu, t = x.clone(), x.to(device)
    torch_xla.sync()
    compiles = samples(metrics, "CompileTime")
    for _ in range(5):
        before = t._node.array if hasattr(t, "_node") else None
        compiled(t)
        cpu += 0.5 * torch.sin(cpu)
    assert before is None or before.is_deleted()
    assert samples(metrics, "CompileTime") == compiles + 1
    assert not torch_xla._XLAC._get_buffer_donation(t)  # the mark stays with the old buffer
    assert_close(t.cpu(), cpu, **TOL)
    assert torch.ops.xla.dynamo_set_buffer_donor_(x, True) is x  # a CPU tensor: nothing


def test_one_buffer_held_by_two_marked_arguments_is_not_donated(device):
    x = torch.randn(6)
    xx = x.to(device)
    alias = xx.detach()  # another tensor on the same buffer
    torch_xla._XLAC._set_buffer_donation(xx, True)
    out = torch.compile(lambda a, b: a * 2 + b, backend="openxla")(xx, alias)
    assert_close(out.cpu(), x * 3, **TOL)
    assert_close(xx.cpu(), x, **TOL)
    assert_close(alias.cpu(), x, **TOL)


def test_backward_of_a_compiled_loss_needs_no_sync_of_its_own(device, metrics):
    """autograd's root gradient, `ones_like(loss)`, is a device scalar when the loss is a
    program's result: the backward program runs at once (two programs per step, as with
    `backward(one)`), and the gradients still equal eager's."""
    model = mlp()
    xla_model = on_xla(model, device)
    compiled = torch.compile(lambda m, x: m(x).square().mean(), backend="openxla")
    x = torch.randn(8, 16)
    for _ in range(2):  # compile, then the cached calls
        xla_model.zero_grad(set_to_none=True)
        compiled(xla_model, x.to(device)).backward()
    torch_xla.sync()
    synced, executions = counter(metrics, "DynamoSyncInputExecuteTime"), samples(
        metrics, "ExecuteTime")
    xla_model.zero_grad(set_to_none=True)
    compiled(xla_model, x.to(device)).backward()
    assert counter(metrics, "DynamoSyncInputExecuteTime") == synced
    assert samples(metrics, "ExecuteTime") == executions + 2  # the forward and the backward
    model(x).square().mean().backward()
    for got, want in zip(grads(xla_model), grads(model), strict=True):
        assert_close(got, want, **GRAD_TOL)


def test_captured_constant_keeps_its_slot_across_calls(device):
    def fn(x):
        return (x * 2.5 + 0.5).pow(3) - 1.25  # the scalars become device-data constants

    compiled = torch.compile(fn, backend="openxla")
    for seed in range(3):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed))
        assert_close(compiled(x.to(device)).cpu(), fn(x), **TOL)


@pytest.mark.parametrize("fn", [
    lambda a, b: [b * 2, a + 1],  # a list of results, in order
    lambda a, b: (a.sin(), a.sin(), b),  # one result twice, and an input returned as is
    lambda a, b: (b.cos(), a * b),
])
def test_output_structure_matches_eager(device, fn):
    a, b = torch.randn(5), torch.randn(5)
    xa, xb = a.to(device), b.to(device)
    compiled = torch.compile(fn, backend="openxla")
    for _ in range(2):
        got, want = compiled(xa, xb), fn(a, b)
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.device.type == "xla"
            assert_close(g.cpu(), w, **TOL)


def test_the_default_backend_refuses_the_xla_device_with_what_to_use():
    """Inductor (torch.compile's default) has no code generator for the xla device and
    failed with KeyError: 'xla' deep inside it; now its entry refuses xla inputs with
    the backend to use. Inductor is imported after torch_xla here, as users do, so the
    import hook is what guards it."""
    out = run_python("""
        import sys
        import torch, torch_xla
        assert "torch._inductor.compile_fx" not in sys.modules
        model = torch.nn.Linear(4, 2).to("xla")
        try:
            torch.compile(model)(torch.ones(3, 4, device="xla"))
        except Exception as error:
            print(type(error).__name__, "|", error)
        import torch._inductor.compile_fx as c
        print("guarded", c.compile_fx.refuses_xla)
    """)
    assert "KeyError" not in out, out
    assert "inductor) cannot compile for the xla device" in out, out
    assert "backend='openxla'" in out and "guarded True" in out, out


def test_the_inductor_guard_passes_other_devices_through():
    from torch_xla.backend import inductor

    calls = []

    def compile_fx(model, example_inputs, **kwargs):
        calls.append((model, kwargs))
        return "compiled"

    guarded = inductor.refuse_xla(compile_fx)
    assert guarded("gm", [torch.ones(2), 3], config_patches={}) == "compiled"
    assert calls == [("gm", {"config_patches": {}})]
    with pytest.raises(RuntimeError, match="backend='openxla'"):
        guarded("gm", [torch.ones(2, device="xla")])
    assert len(calls) == 1
