"""Activation functions and their backward ops."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import special as jsp

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, canon_dim, promote, upcast
from torch_xla.lowering.ops.elementwise import add
from torch_xla.lowering.registry import register


def _in_compute(fn, *xs):
    """Run fn on float arrays in the compute dtype and round once to the input dtype."""
    out = xs[0].dtype
    return fn(*(x.astype(upcast(out)) for x in xs)).astype(out)


def _promoted(grad, x):
    """(grad, x) in the dtype torch's backward kernels compute in, and the result dtype:
    their promoted type (a bfloat16 grad and a float32 input give float32, unrounded),
    half types computed in float32 and rounded once."""
    out = dtypes.result_type(grad, x)
    return grad.astype(upcast(out)), x.astype(upcast(out)), out


def _backward(fn):
    """A backward op `fn(grad, x, ...)` computed on `_promoted` operands."""

    @functools.wraps(fn)
    def lower(grad, x, *args, **kwargs):
        grad, x, out = _promoted(grad, x)
        return fn(grad, x, *args, **kwargs).astype(out)

    return lower


def _vjp(forward, grad, x):
    """grad * d forward / dx, computed by JAX from the forward formula."""
    _, pullback = jax.vjp(forward, x)
    return pullback(grad)[0]


@register(aten.relu.default)
def relu(x):
    return jnp.where(x > 0, x, jnp.zeros((), x.dtype)) if x.dtype != np.bool_ else x


@register(aten.relu6.default)
def relu6(x):
    return jnp.clip(x, 0, 6)


@register(aten.threshold.default)
def threshold(x, threshold, value):
    return jnp.where(x > threshold, x, jnp.asarray(value, x.dtype))


@register(aten.threshold_backward.default)
@_backward
def threshold_backward(grad, x, threshold):
    return jnp.where(x > threshold, grad, jnp.zeros((), grad.dtype))


def _gelu(approximate: str):
    def forward(x):
        if approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1 + jnp.tanh(inner))
        return 0.5 * x * (1 + jsp.erf(x * math.sqrt(0.5)))

    return forward


@register(aten.gelu.default)
def gelu(x, *, approximate="none"):
    return _in_compute(_gelu(approximate), x)


@register(aten.gelu_backward.default)
@_backward
def gelu_backward(grad, x, *, approximate="none"):
    return _vjp(_gelu(approximate), grad, x)


@register(aten.silu.default)
def silu(x):
    return _in_compute(jax.nn.silu, x)


@register(aten.silu_backward.default)
@_backward
def silu_backward(grad, x):
    return _vjp(jax.nn.silu, grad, x)


@register(aten.sigmoid_backward.default)
@_backward
def sigmoid_backward(grad, output):
    return grad * (1 - output) * output


@register(aten.tanh_backward.default)
@_backward
def tanh_backward(grad, output):
    return grad * (1 - output * output)


@register(aten.elu.default)
def elu(x, alpha=1, scale=1, input_scale=1):
    def forward(v):
        return jnp.where(v > 0, v * scale, jnp.expm1(v * input_scale) * alpha * scale)

    return _in_compute(forward, x)


@register(aten.elu_backward.default)
def elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
    grad, y, out = _promoted(grad, self_or_result)
    if is_result:
        negative = grad * input_scale * (y + alpha * scale)
    else:
        negative = grad * input_scale * alpha * scale * jnp.exp(y * input_scale)
    return jnp.where(y > 0, grad * scale, negative).astype(out)


@register(aten.leaky_relu.default)
def leaky_relu(x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * negative_slope).astype(x.dtype)


@register(aten.leaky_relu_backward.default)
@_backward
def leaky_relu_backward(grad, x, negative_slope, self_is_result):
    return jnp.where(x > 0, grad, grad * negative_slope)


@register(aten.hardtanh.default)
def hardtanh(x, min_val=-1, max_val=1):
    return jnp.clip(x, min_val, max_val).astype(x.dtype)


@register(aten.hardtanh_backward.default)
@_backward
def hardtanh_backward(grad, x, min_val, max_val):
    return jnp.where((x > min_val) & (x < max_val), grad, jnp.zeros((), grad.dtype))


def _hardsigmoid(x):
    return jnp.clip(x / 6 + 0.5, 0, 1)


@register(aten.hardsigmoid.default)
def hardsigmoid(x):
    return _in_compute(_hardsigmoid, x)


@register(aten.hardsigmoid_backward.default)
@_backward
def hardsigmoid_backward(grad, x):
    return jnp.where((x > -3) & (x < 3), grad / 6, jnp.zeros((), grad.dtype))


@register(aten.hardswish.default)
def hardswish(x):
    return _in_compute(lambda v: v * jnp.clip(v + 3, 0, 6) / 6, x)


@register(aten.hardswish_backward.default)
@_backward
def hardswish_backward(grad, x):
    # torch's kernel takes the outer branches at -3 and 3 themselves.
    middle = grad * (x / 3 + 0.5)
    return jnp.where(x <= -3, 0, jnp.where(x < 3, middle, grad))


def _softplus(beta, threshold):
    def forward(x):
        return jnp.where(x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta)

    return forward


@register(aten.softplus.default)
def softplus(x, beta=1, threshold=20):
    return _in_compute(_softplus(beta, threshold), x)


@register(aten.softplus_backward.default)
@_backward
def softplus_backward(grad, x, beta, threshold):
    z = jnp.exp(x * beta)
    return jnp.where(x * beta > threshold, grad, grad * z / (z + 1))


def _mish(x):
    return x * jnp.tanh(jax.nn.softplus(x))


@register(aten.mish.default)
def mish(x):
    return _in_compute(_mish, x)


@register(aten.mish_backward.default)
@_backward
def mish_backward(grad, x):
    return _vjp(_mish, grad, x)


@register(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(x):
    """(output, buffer); buffer is what torch's CPU kernel saves for the backward."""
    c = x.astype(upcast(x.dtype))
    max_elem = jnp.maximum(0, -c)
    z = jnp.exp(-max_elem) + jnp.exp(-c - max_elem)
    return (-(max_elem + jnp.log(z))).astype(x.dtype), jnp.exp(-jnp.abs(c)).astype(x.dtype)


@register(aten.log_sigmoid_backward.default)
@_backward
def log_sigmoid_backward(grad, x, buffer):
    return _vjp(jax.nn.log_sigmoid, grad, x)


@register(aten.softshrink.default)
def softshrink(x, lambd=0.5):
    return jnp.where(x > lambd, x - lambd, jnp.where(x < -lambd, x + lambd, 0)).astype(x.dtype)


@register(aten.hardshrink.default)
def hardshrink(x, lambd=0.5):
    return jnp.where(jnp.abs(x) > lambd, x, jnp.zeros((), x.dtype))


@register(aten.glu.default)
def glu(x, dim=-1):
    a, b = jnp.split(x, 2, axis=canon_dim(dim, x.ndim))
    return _in_compute(lambda u, v: u * jax.nn.sigmoid(v), a, b)


@register(aten.glu_backward.default)
def glu_backward(grad, x, dim):
    axis = canon_dim(dim, x.ndim)
    _, pullback = jax.vjp(lambda v: glu(v, axis), x)
    return pullback(grad)[0]


@register(aten._prelu_kernel.default)
def prelu_kernel(x, weight):
    return jnp.where(x > 0, x, weight * x)


@register(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(grad, x, weight):
    grad_input = jnp.where(x > 0, grad, weight * grad)
    grad_weight = jnp.where(x > 0, 0, x * grad)
    return grad_input, grad_weight


@register(aten.logit_backward.default)
def logit_backward(grad, x, eps=None):
    # Unlike the others, torch's kernel computes half types in their own precision.
    grad, x = promote(grad, x)
    if eps is None:
        return jnp.where((x < 0) | (x > 1), jnp.nan, grad / (x * (1 - x)))
    inside = (x >= eps) & (x <= 1 - eps)
    return jnp.where(inside, grad / (x * (1 - x)), 0).astype(grad.dtype)


@register(aten.rrelu_with_noise_functional.default, needs_rng=True)
def rrelu_with_noise_functional(x, noise, lower=0.125, upper=1 / 3, training=False,
                                generator=None, *, rng):
    """Returns (out, noise_out): the slope used for each element (1 where x >= 0)."""
    if not training:
        return leaky_relu(x, (lower + upper) / 2), noise
    slope = jax.random.uniform(rng, x.shape, upcast(x.dtype), lower, upper).astype(x.dtype)
    slope = jnp.where(x >= 0, jnp.ones((), x.dtype), slope)
    return x * slope, slope.astype(noise.dtype)


@register(aten.celu.default)
def celu(x, alpha=1.0):
    return elu(x, alpha, 1, 1 / alpha)


@register(aten.selu.default)
def selu(x):
    return elu(x, 1.6732632423543772848170429916717, 1.0507009873554804934193349852946)




@register(aten.hardshrink_backward.default)
def hardshrink_backward(grad, x, lambd):
    return jnp.where(jnp.abs(x) > lambd, grad, jnp.zeros((), grad.dtype))


@register(aten.softshrink_backward.default)
def softshrink_backward(grad, x, lambd):
    return jnp.where(jnp.abs(x) > lambd, grad, jnp.zeros((), grad.dtype))


@register(aten._add_relu.Tensor, aten._add_relu.Scalar)
def add_relu(x, other, alpha=1):
    return relu(add(x, other, alpha))


@register(aten.rrelu_with_noise.default, needs_rng=True)
def rrelu_with_noise(x, noise, lower=0.125, upper=1 / 3, training=False, generator=None, *,
                     rng):
    """The output only; functionalization can leave the (legacy-mutating) op as is."""
    return rrelu_with_noise_functional(x, noise, lower, upper, training, generator, rng=rng)[0]
