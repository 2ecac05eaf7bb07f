"""Random ops. Each receives `rng=`: a raw uint32[2] JAX PRNG key (jax.random.PRNGKey).

The key becomes a key of the plugin's `rng_algorithm()`: every op draws its bits from
one XLA RngBitGenerator with that algorithm ("default" lets the backend choose). The
bit streams differ from torch's; distributions match.
"""

from __future__ import annotations

import jax
import jax.extend.random
import jax.numpy as jnp
import numpy as np

from torch_xla.lowering import dtypes, policy
from torch_xla.lowering.ops._common import aten, int_list, jax_dtype, upcast
from torch_xla.lowering.ops.elementwise import mul
from torch_xla.lowering.registry import register

_ALGORITHMS = {
    "default": jax.lax.RandomAlgorithm.RNG_DEFAULT,
    "threefry": jax.lax.RandomAlgorithm.RNG_THREE_FRY,
    "philox": jax.lax.RandomAlgorithm.RNG_PHILOX,
}
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _bit_generator_impl(name: str, algorithm: jax.lax.RandomAlgorithm):
    """jax's "rbg" key (uint32[4], split and fold_in by threefry), drawing bits with
    `algorithm`; jax's own rbg always uses RNG_DEFAULT."""
    rbg = jax.extend.random.rbg_prng_impl

    def random_bits(key, bit_width, shape):
        _, bits = jax.lax.rng_bit_generator(key, tuple(shape), dtype=_UINT[bit_width],
                                            algorithm=algorithm)
        return bits

    return jax.extend.random.define_prng_impl(
        key_shape=(4,), seed=rbg.seed, split=rbg.split, random_bits=random_bits,
        fold_in=rbg.fold_in, name=f"torch_xla_{name}", tag=f"txla_{name}")


_IMPLS = {name: _bit_generator_impl(name, a) for name, a in _ALGORITHMS.items()}


def _key(rng):
    """The engine's raw uint32[2] key as a typed key of the plugin's algorithm."""
    data = jnp.concatenate([rng, rng])  # as jax's rbg seeds its uint32[4] keys
    return jax.random.wrap_key_data(data, impl=_IMPLS[policy.rng_algorithm])


def _float_dtype(dtype) -> np.dtype:
    return jax_dtype(dtype, dtypes.default_float())


def _uniform(rng, shape, dtype, low=0.0, high=1.0):
    """Uniform in [low, high), sampled in float32 at least so half types are not biased;
    complex values get independent real and imaginary parts, as torch's do."""
    if dtypes.is_complex(dtype):
        parts = _uniform(rng, (*shape, 2), np.finfo(dtype).dtype, low, high)
        return jax.lax.complex(parts[..., 0], parts[..., 1])
    c = upcast(dtype) if dtypes.is_floating(dtype) else np.dtype(np.float64)
    u = jax.random.uniform(_key(rng), tuple(shape), c, low, high)
    return u.astype(dtype)


def _normal(rng, shape, dtype):
    c = upcast(dtype)
    return jax.random.normal(_key(rng), tuple(shape), c)


@register(aten.bernoulli.default, needs_rng=True)
def bernoulli(x, *, generator=None, rng):
    return (_uniform(rng, x.shape, upcast(x.dtype)) < x).astype(x.dtype)


@register(aten.bernoulli.p, aten.bernoulli.Tensor, needs_rng=True)
def bernoulli_p(x, p=0.5, *, generator=None, rng):
    return (_uniform(rng, x.shape, np.float32) < p).astype(x.dtype)


@register(aten.native_dropout.default, needs_rng=True)
def native_dropout(x, p, train, *, rng):
    if train is False or p == 0:  # train=None means training, as in torch's kernel
        return x, jnp.ones(x.shape, bool)
    keep = _uniform(rng, x.shape, np.float32) >= p
    scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
    c = upcast(x.dtype)
    return jnp.where(keep, x.astype(c) * scale, 0).astype(x.dtype), keep


@register(aten.native_dropout_backward.default)
def native_dropout_backward(grad, mask, scale):
    return mul(mul(grad, mask), scale)


@register(aten.rand.default, aten.rand.generator, needs_rng=True)
def rand(size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None, rng):
    return _uniform(rng, int_list(size), _float_dtype(dtype))


@register(aten.randn.default, aten.randn.generator, needs_rng=True)
def randn(size, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
          rng):
    dtype = _float_dtype(dtype)
    return _normal(rng, int_list(size), dtype).astype(dtype)


@register(aten.rand_like.default, aten.rand_like.generator, needs_rng=True)
def rand_like(x, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None, rng):
    return _uniform(rng, x.shape, jax_dtype(dtype, x.dtype))


@register(aten.randn_like.default, aten.randn_like.generator, needs_rng=True)
def randn_like(x, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None, rng):
    dtype = jax_dtype(dtype, x.dtype)
    return _normal(rng, x.shape, dtype).astype(dtype)


def _randint(rng, low, high, shape, dtype):
    values = jax.random.randint(_key(rng), tuple(shape), low, high, dtype=np.int64)
    return values.astype(dtype)


@register(aten.randint.default, aten.randint.generator, needs_rng=True)
def randint(high, size, *, generator=None, dtype=None, layout=None, device=None,
            pin_memory=None, rng):
    return _randint(rng, 0, high, int_list(size), jax_dtype(dtype, np.int64))


@register(aten.randint.low, aten.randint.low_generator, needs_rng=True)
def randint_low(low, high, size, *, generator=None, dtype=None, layout=None, device=None,
                pin_memory=None, rng):
    return _randint(rng, low, high, int_list(size), jax_dtype(dtype, np.int64))


@register(aten.randint_like.default, aten.randint_like.Tensor, aten.randint_like.generator,
          aten.randint_like.Tensor_generator, needs_rng=True)
def randint_like(x, high, *, generator=None, dtype=None, layout=None, device=None,
                 pin_memory=None, memory_format=None, rng):
    return _randint(rng, 0, high, x.shape, jax_dtype(dtype, x.dtype))


@register(aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype, needs_rng=True)
def randint_like_low(x, low, high, *, generator=None, dtype=None, layout=None, device=None,
                     pin_memory=None, memory_format=None, rng):
    return _randint(rng, low, high, x.shape, jax_dtype(dtype, x.dtype))


@register(aten.uniform.default, needs_rng=True)
def uniform(x, from_=0.0, to=1.0, *, generator=None, rng):
    return _uniform(rng, x.shape, x.dtype, from_, to)


@register(aten.normal_functional.default, needs_rng=True)
def normal_functional(x, mean=0.0, std=1.0, *, generator=None, rng):
    return (_normal(rng, x.shape, x.dtype) * std + mean).astype(x.dtype)


@register(aten.normal.Tensor_float, needs_rng=True)
def normal_tensor_float(mean, std=1.0, *, generator=None, rng):
    return (_normal(rng, mean.shape, mean.dtype) * std + mean).astype(mean.dtype)


@register(aten.normal.float_Tensor, needs_rng=True)
def normal_float_tensor(mean, std, *, generator=None, rng):
    return (_normal(rng, std.shape, std.dtype) * std + mean).astype(std.dtype)


@register(aten.normal.Tensor_Tensor, needs_rng=True)
def normal_tensor_tensor(mean, std, *, generator=None, rng):
    shape = jnp.broadcast_shapes(mean.shape, std.shape)
    dtype = dtypes.result_type(mean, std)
    return (_normal(rng, shape, dtype) * std + mean).astype(dtype)


@register(aten.normal.float_float, needs_rng=True)
def normal_float_float(mean, std, size, *, generator=None, dtype=None, layout=None,
                       device=None, pin_memory=None, rng):
    dtype = _float_dtype(dtype)
    return (_normal(rng, int_list(size), dtype) * std + mean).astype(dtype)


@register(aten.randperm.default, aten.randperm.generator, needs_rng=True)
def randperm(n, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None,
             rng):
    return jax.random.permutation(_key(rng), n).astype(jax_dtype(dtype, np.int64))


@register(aten.exponential.default, needs_rng=True)
def exponential(x, lambd=1.0, *, generator=None, rng):
    c = upcast(x.dtype)
    return (jax.random.exponential(_key(rng), x.shape, c) / lambd).astype(x.dtype)


@register(aten.cauchy.default, needs_rng=True)
def cauchy(x, median=0.0, sigma=1.0, *, generator=None, rng):
    c = upcast(x.dtype)
    return (jax.random.cauchy(_key(rng), x.shape, c) * sigma + median).astype(x.dtype)


@register(aten.log_normal.default, needs_rng=True)
def log_normal(x, mean=1.0, std=2.0, *, generator=None, rng):
    return jnp.exp(_normal(rng, x.shape, x.dtype) * std + mean).astype(x.dtype)


@register(aten.geometric.default, needs_rng=True)
def geometric(x, p, *, generator=None, rng):
    # Sampled in the tensor's float type (float32 at least); integer tensors in float64.
    c = upcast(x.dtype) if dtypes.is_floating(x.dtype) else np.dtype(np.float64)
    u = jax.random.uniform(_key(rng), x.shape, c, minval=np.finfo(c).tiny)
    return jnp.ceil(jnp.log(u) / c.type(np.log1p(-p))).astype(x.dtype)


def _random_range(dtype):
    """[0, high) for random_() without bounds: the mantissa range for floats."""
    if dtype == np.bool_:
        return 2
    if dtypes.is_floating(dtype):
        return 2 ** (jnp.finfo(dtype).nmant + 1) + 1
    return int(jnp.iinfo(dtype).max) + 1 if jnp.iinfo(dtype).max < 2**63 - 1 else 2**63 - 1


@register(aten.random.default, needs_rng=True)
def random_(x, *, generator=None, rng):
    return _randint(rng, 0, _random_range(x.dtype), x.shape, x.dtype)


@register(aten.random.to, needs_rng=True)
def random_to(x, to, *, generator=None, rng):
    return _randint(rng, 0, to, x.shape, x.dtype)


@register(getattr(aten.random, "from"), needs_rng=True)
def random_from(x, from_, to=None, *, generator=None, rng):
    high = _random_range(x.dtype) if to is None else to
    return _randint(rng, from_, high, x.shape, x.dtype)


@register(aten.multinomial.default, needs_rng=True)
def multinomial(probs, num_samples, replacement=False, *, generator=None, rng):
    logits = jnp.log(probs.astype(upcast(probs.dtype)))
    if replacement:
        shape = probs.shape[:-1] + (num_samples,)
        batch_logits = jnp.expand_dims(logits, -2)
        draws = jax.random.categorical(_key(rng), batch_logits, axis=-1,
                                       shape=probs.shape[:-1] + (num_samples,))
        return draws.reshape(shape).astype(np.int64)
    # Without replacement: the Gumbel top-k trick samples k distinct categories.
    gumbel = jax.random.gumbel(_key(rng), probs.shape, logits.dtype)
    _, indices = jax.lax.top_k(logits + gumbel, num_samples)
    return indices.astype(np.int64)
