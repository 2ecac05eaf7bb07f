"""JAX functions inside recorded steps: `xb.call_jax`, and custom ops of `xm.XLA_LIB` whose
XLA kernel the engine runs (PyTorch/XLA's way of plugging in hand-written kernels).

Eager CPU PyTorch is the oracle for every value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

import torch_xla
import torch_xla._XLAC as xlac
import torch_xla.core.xla_builder as xb
import torch_xla.debug.metrics as met
from torch_xla.core.xla_model import XLA_LIB

from .helpers import assert_close, run_python


def _sin_plus(a, b):
    return a + jnp.sin(b)


def test_call_jax_matches_eager_and_records_one_node():
    a = torch.randn(3, 3)
    b = torch.randn(3, 3)
    out = xb.call_jax(_sin_plus, (a.to("xla"), b.to("xla")), {}, "sin_plus")
    assert "xla::call_jax" in xlac._get_xla_tensors_text([out])
    assert_close(out, a + torch.sin(b))


def test_call_jax_pytrees_in_and_out_and_static_values():
    x, y = torch.randn(2, 3), torch.randn(3, 4)

    def f(inputs, *, scale):
        mm = inputs["a"] @ inputs["b"]
        return {"mm": mm * scale, "parts": (mm.sum(), jnp.argmax(mm, axis=1))}

    out = xb.call_jax(f, ({"a": x.to("xla"), "b": y.to("xla")},), {"scale": 3.0})
    assert_close(out["mm"], x @ y * 3.0)
    assert_close(out["parts"][0], (x @ y).sum())
    # an integer result keeps jax's dtype (int64: the engine runs jax with 64-bit types)
    assert_close(out["parts"][1], torch.argmax(x @ y, dim=1))
    assert_close(out["mm"] + 1, x @ y * 3.0 + 1)


def test_call_jax_traces_each_signature_once_and_steps_hit_the_program_cache():
    xb._JAX_TO_XLA_COMPUTATION_CACHE.clear()
    w = torch.randn(4, 4).to("xla")
    torch_xla.sync()
    traced = []

    def f(a):
        traced.append(a.shape)
        return jnp.tanh(a) * 2

    for _ in range(4):
        y = xb.call_jax(f, (w,)).sum()
        torch_xla.sync()
    # jax.eval_shape, the lowering the fingerprint hashes, and the step's compilation
    assert len(traced) == 3
    assert xb._jax_to_xla_computation_cache_elements() == 1
    before = met.counter_value("UncachedCompile") or 0
    y = xb.call_jax(f, (w,)).sum()
    torch_xla.sync()
    assert (met.counter_value("UncachedCompile") or 0) == before
    assert_close(y, (torch.tanh(w.cpu()) * 2).sum())
    xb.call_jax(f, (torch.randn(2, 4).to("xla"),))  # a new shape: a new signature
    assert xb._jax_to_xla_computation_cache_elements() == 2


def test_call_jax_static_value_is_part_of_the_computation():
    x = torch.randn(5)
    scaled = [xb.call_jax(lambda a, k: a * k, (x.to("xla"), k)) for k in (2, 3)]
    assert_close(scaled[0], x * 2)
    assert_close(scaled[1], x * 3)


def test_call_jax_override_hash_names_the_computation():
    x = torch.randn(3)
    out = xb.call_jax(jnp.exp, (x.to("xla"),), name="exp", override_hash="exp-v1")
    entry = next(c for k, c in xb._JAX_TO_XLA_COMPUTATION_CACHE.items() if k[-1] == "exp-v1")
    assert entry.fingerprint == "exp:override:'exp-v1'"
    assert_close(out, torch.exp(x))


def test_call_jax_in_eager_mode_runs_at_once():
    torch_xla.experimental.eager_mode(True)
    try:
        x = torch.randn(3)
        out = xb.call_jax(jnp.cos, (x.to("xla"),))
        assert not xlac._check_tensor_need_materialization([out])[0]
    finally:
        torch_xla.experimental.eager_mode(False)
    assert_close(out, torch.cos(x))


def test_call_jax_errors_say_what_is_wrong():
    x = torch.randn(3).to("xla")
    with pytest.raises(RuntimeError, match="not an XLA tensor"):
        xb.call_jax(jnp.sin, (torch.randn(3),))
    with pytest.raises(TypeError, match="args must be a tuple"):
        xb.call_jax(jnp.sin, x)
    with pytest.raises(TypeError, match="not hashable"):
        xb.call_jax(lambda a, n: a * len(n), (x, bytearray(b"ab")))
    with pytest.raises(TypeError, match="may return only arrays"):
        xb.call_jax(lambda a: (a, "label"), (x,))


def test_call_jax_on_two_devices_is_refused():
    out = run_python("""
        import jax.numpy as jnp, torch, torch_xla.core.xla_builder as xb
        a, b = torch.ones(2, device="xla:0"), torch.ones(2, device="xla:1")
        try:
            xb.call_jax(jnp.add, (a, b))
        except RuntimeError as e:
            print("refused:", e)
    """, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"})
    assert "refused: Expected all tensors on the same device, found xla:0 and xla:1" in out


# --- custom ops with an XLA kernel ----------------------------------------------------

XLA_LIB.define("test_gelu_tanh(Tensor x) -> Tensor")
XLA_LIB.define("test_identity(Tensor x) -> Tensor")
_KERNELS_RUN: list[str] = []


def _jax_gelu_tanh(a):
    return 0.5 * a * (1 + jnp.tanh(0.7978845608028654 * (a + 0.044715 * a**3)))


@torch.library.impl(XLA_LIB, "test_gelu_tanh", "XLA")
def _gelu_tanh_xla(x):
    _KERNELS_RUN.append("XLA")
    return xb.call_jax(_jax_gelu_tanh, (x,))


@torch.library.impl(XLA_LIB, "test_gelu_tanh", "CompositeExplicitAutograd")
def _gelu_tanh_reference(x):
    _KERNELS_RUN.append("composite")
    return torch.nn.functional.gelu(x, approximate="tanh")


@torch.library.impl(XLA_LIB, "test_identity", "XLA")
def _identity_xla(x):
    return x


def test_custom_op_runs_its_xla_kernel_on_xla_tensors():
    x = torch.randn(4, 4)
    _KERNELS_RUN.clear()
    out = torch.ops.xla.test_gelu_tanh(x.to("xla"))
    assert _KERNELS_RUN == ["XLA"]
    assert "xla::call_jax" in xlac._get_xla_tensors_text([out])
    expected = torch.ops.xla.test_gelu_tanh(x)  # the CPU tensor takes the other kernel
    assert _KERNELS_RUN == ["XLA", "composite"]
    assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_custom_op_returning_its_argument_gives_a_new_tensor():
    x = torch.randn(3).to("xla")
    y = torch.ops.xla.test_identity(x)
    assert y is not x
    y.add_(1)  # a fresh tensor: writing to it leaves the argument alone
    assert_close(x, x.cpu())
    assert_close(y, x.cpu() + 1)


def test_custom_op_inside_torch_compile():
    x = torch.randn(4, 4)

    @torch.compile(backend="openxla")
    def f(t):
        return torch.ops.xla.test_gelu_tanh(t * 2) + 1

    @torch.library.register_fake("xla::test_gelu_tanh")
    def _fake(t):
        return torch.empty_like(t)

    assert_close(f(x.to("xla")), torch.nn.functional.gelu(x * 2, approximate="tanh") + 1,
                 rtol=1e-5, atol=1e-6)


def test_jax_arrays_from_call_jax_feed_autograd_through_a_function():
    """call_jax is not differentiable by itself; inside an autograd.Function it is."""

    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = xb.call_jax(jnp.tanh, (x,))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return xb.call_jax(lambda g, y: g * (1 - y * y), (g, y))

    x = torch.randn(5, requires_grad=True)
    xx = x.detach().to("xla").requires_grad_(True)
    Tanh.apply(xx).sum().backward()
    torch.tanh(x).sum().backward()
    assert_close(xx.grad, x.grad)


def test_jax_random_inside_call_jax_takes_its_key_as_an_input():
    """(jax runs with 64-bit types on, for torch's int64 and float64: a JAX function that
    wants float32 says so.)"""
    key = torch.tensor(jax.random.key_data(jax.random.key(0)).tolist(), dtype=torch.uint32)
    out = xb.call_jax(
        lambda k: jax.random.normal(jax.random.wrap_key_data(k), (3,), jnp.float32),
        (key.to("xla"),))
    expected = jax.random.normal(jax.random.key(0), (3,), jnp.float32)
    assert_close(out, torch.tensor(jax.device_get(expected).tolist()))
