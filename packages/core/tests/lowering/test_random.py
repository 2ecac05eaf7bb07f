"""Random ops: the engine passes `rng=<raw uint32[2] key>`; values follow torch's
distributions (not its bit stream), dtypes and shapes follow torch exactly."""

import jax
import numpy as np
import pytest
import torch

import torch_xla.lowering as lowering

from .harness import prepare

aten = torch.ops.aten
N = 20000


def run(op, *args, seed=0, **kwargs):
    """The op's lowering under jit, with rng=PRNGKey(seed), traced with the float64 check."""
    prepared = prepare(op, args, kwargs, seed=seed)
    return np.asarray(jax.jit(prepared.call)(*prepared.arrays))


def test_rng_is_a_raw_key():
    entry = lowering.lookup(aten.rand.default)
    key = jax.random.PRNGKey(3)
    assert key.dtype == np.uint32 and key.shape == (2,)
    out = entry.fn([4], rng=key)
    assert out.shape == (4,) and out.dtype == np.float32


def test_same_seed_same_values_other_seed_other_values():
    a, b, c = (run(aten.rand.default, [64], seed=s) for s in (1, 1, 2))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_rand_uniform_01():
    x = run(aten.rand.default, [N])
    assert x.dtype == np.float32 and x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < 0.01


def test_rand_dtype_kwarg():
    assert run(aten.rand.default, [8], dtype=torch.bfloat16).dtype == jax.numpy.bfloat16
    rand = lowering.lookup(aten.rand.default).fn
    assert rand([8], dtype=torch.float64, rng=jax.random.PRNGKey(0)).dtype == np.float64


def test_randn_moments():
    x = run(aten.randn.default, [N])
    assert abs(x.mean()) < 0.03 and abs(x.std() - 1) < 0.03


def test_randint_range_and_dtype():
    x = run(aten.randint.low, -3, 5, [N])
    assert x.dtype == np.int64 and x.min() == -3 and x.max() == 4
    assert run(aten.randint.default, 7, [10]).max() < 7


def test_bernoulli_p_and_tensor():
    x = torch.zeros(N)
    assert abs(run(aten.bernoulli.p, x, 0.3).mean() - 0.3) < 0.02
    probs = torch.full((N,), 0.8)
    out = run(aten.bernoulli.default, probs)
    assert out.dtype == np.float32 and set(np.unique(out)) <= {0.0, 1.0}
    assert abs(out.mean() - 0.8) < 0.02


def test_native_dropout():
    x = torch.ones(N)
    prepared = prepare(aten.native_dropout.default, (x, 0.25, True), {})
    out, mask = (np.asarray(v) for v in jax.jit(prepared.call)(*prepared.arrays))
    assert mask.dtype == np.bool_ and abs(1 - mask.mean() - 0.25) < 0.02
    np.testing.assert_allclose(out[mask], 1 / 0.75, rtol=1e-6)
    assert (out[~mask] == 0).all()
    out_eval, mask_eval = lowering.lookup(aten.native_dropout.default).fn(
        jax.numpy.ones(3), 0.5, False, rng=jax.random.PRNGKey(0))
    assert np.asarray(mask_eval).all() and np.allclose(out_eval, 1)
    # train=None is training, as torch's own kernel takes it (only False is eval)
    reference = torch.ops.aten.native_dropout(x, 0.25, None)[1].float().mean().item()
    prepared = prepare(aten.native_dropout.default, (x, 0.25, None), {})
    _, mask = (np.asarray(v) for v in jax.jit(prepared.call)(*prepared.arrays))
    assert abs(reference - 0.75) < 0.02 and abs(mask.mean() - 0.75) < 0.02


def test_uniform_and_normal_functional():
    x = torch.empty(N)
    u = run(aten.uniform.default, x, -2.0, 3.0)
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    n = run(aten.normal_functional.default, x, 1.5, 0.5)
    assert abs(n.mean() - 1.5) < 0.02 and abs(n.std() - 0.5) < 0.02


def test_normal_overloads():
    mean, std = torch.full((N,), 2.0), torch.full((N,), 3.0)
    for op, args in [(aten.normal.Tensor_float, (mean, 3.0)),
                     (aten.normal.float_Tensor, (2.0, std)),
                     (aten.normal.Tensor_Tensor, (mean, std))]:
        x = run(op, *args)
        assert x.shape == (N,) and abs(x.mean() - 2) < 0.1 and abs(x.std() - 3) < 0.1, op
    assert run(aten.normal.float_float, 0.0, 1.0, [5, 2]).shape == (5, 2)


def test_randperm_is_permutation():
    p = run(aten.randperm.default, 100)
    assert p.dtype == np.int64 and sorted(p.tolist()) == list(range(100))


def test_exponential_mean():
    x = run(aten.exponential.default, torch.empty(N), 4.0)
    assert x.min() >= 0 and abs(x.mean() - 0.25) < 0.01


@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial(replacement):
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]] * 2000)
    draws = run(aten.multinomial.default, probs, 2 if not replacement else 3, replacement)
    assert draws.dtype == np.int64
    assert not (draws == 1).any(), "a zero-probability category was drawn"
    if not replacement:
        assert (draws[:, 0] != draws[:, 1]).all()
    else:
        frequency = np.bincount(draws.reshape(-1), minlength=4) / draws.size
        np.testing.assert_allclose(frequency, [0.1, 0.0, 0.6, 0.3], atol=0.02)


def test_random_ranges():
    x = torch.empty(N, dtype=torch.int64)
    out = run(aten.random.to, x, 10)
    assert out.min() == 0 and out.max() == 9
    out = run(getattr(aten.random, "from"), x, -5, 5)
    assert out.min() == -5 and out.max() == 4
    assert run(aten.random.default, torch.empty(10, dtype=torch.bool)).dtype == np.bool_


def test_rrelu_with_noise_slopes():
    x = torch.randn(N)
    for op in (aten.rrelu_with_noise.default, aten.rrelu_with_noise_functional.default):
        prepared = prepare(op, (x, torch.zeros(N), 0.1, 0.3, True), {})
        out = jax.jit(prepared.call)(*prepared.arrays)
        out = np.asarray(out[0] if isinstance(out, (tuple, list)) else out)
        negative = x.numpy() < 0
        slopes = out[negative] / x.numpy()[negative]
        assert slopes.min() >= 0.1 and slopes.max() <= 0.3
        np.testing.assert_array_equal(out[~negative], x.numpy()[~negative])


def test_every_random_op_functionalization_emits_is_lowered():
    """What the engine sees for in-place random ops and random factories."""
    from torch.func import functionalize
    from torch.fx.experimental.proxy_tensor import make_fx

    def program(x, p):
        y, z, w = x.clone(), x.clone(), x.clone()
        y.bernoulli_(0.3)
        z.bernoulli_(p)
        w.uniform_()
        w.normal_()
        w.exponential_()
        w.random_(5)
        w.random_()
        w.cauchy_()
        w.log_normal_()
        w.geometric_(0.3)
        dropped = torch.nn.functional.dropout(x, 0.2, training=True)
        leaky = torch.nn.functional.rrelu(x, training=True)
        return (y, z, w, dropped, leaky, torch.randn(3), torch.rand_like(x),
                torch.randint(0, 5, (3,)), torch.randperm(4), torch.multinomial(p, 2),
                torch.normal(x, 1.0))

    graph = make_fx(functionalize(program, remove="mutations_and_views"))(
        torch.rand(4), torch.rand(4))
    targets = {n.target for n in graph.graph.nodes if n.op == "call_function"}
    missing = sorted(str(t) for t in targets if lowering.lookup(t) is None)
    assert not missing
    random_ops = {t for t in targets if "rand" in str(t) or str(t).split(".")[1] in {
        "bernoulli", "uniform", "normal", "normal_functional", "exponential", "cauchy",
        "log_normal", "geometric", "multinomial", "random", "rrelu_with_noise"}}
    assert random_ops and all(lowering.lookup(t).needs_rng for t in random_ops)


def test_uniform_complex_fills_both_parts():
    x = run(aten.uniform.default, torch.empty(N, dtype=torch.complex64), 2.0, 3.0)
    assert x.dtype == np.complex64
    for part in (x.real, x.imag):
        assert part.min() >= 2 and part.max() < 3 and abs(part.mean() - 2.5) < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_geometric_samples_in_32_bits(dtype):
    x = run(aten.geometric.default, torch.empty(N, dtype=dtype), 0.25)  # traced: no float64
    assert x.min() >= 1 and abs(x.astype(np.float32).mean() - 4) < 0.15
