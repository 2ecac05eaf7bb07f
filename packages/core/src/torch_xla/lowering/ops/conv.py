"""Convolution (forward, transposed, backward) and its patch forms: im2col / col2im,
which `nn.functional.unfold` / `fold` reach."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes, policy
from torch_xla.lowering.ops._common import aten, expand_param, int_list, upcast
from torch_xla.lowering.registry import register


def _conv_dims(n: int) -> lax.ConvDimensionNumbers:
    spatial = "DHW"[-n:]
    specs = ("NC" + spatial, "OI" + spatial, "NC" + spatial)
    return lax.conv_dimension_numbers((1, 1) + (1,) * n, (1, 1) + (1,) * n, specs)


def _transposed_weight(weight, groups: int):
    """(Cin, Cout/g, *k) -> (Cout, Cin/g, *k), spatially flipped: a transposed convolution
    is a convolution of the dilated input with this kernel."""
    cin, cout_g, *k = weight.shape
    w = weight.reshape(groups, cin // groups, cout_g, *k)
    w = jnp.swapaxes(w, 1, 2).reshape(groups * cout_g, cin // groups, *k)
    return jnp.flip(w, axis=tuple(range(2, 2 + len(k))))


def _conv(x, weight, stride, padding, dilation, transposed, output_padding, groups):
    n = weight.ndim - 2
    stride, padding, dilation = (expand_param(p, n) for p in (stride, padding, dilation))
    if transposed:
        output_padding = expand_param(output_padding, n)
        k = weight.shape[2:]
        pads = [
            (d * (kk - 1) - p, d * (kk - 1) - p + op)
            for kk, p, d, op in zip(k, padding, dilation, output_padding, strict=False)
        ]
        return lax.conv_general_dilated(
            x, _transposed_weight(weight, groups), (1,) * n, pads, lhs_dilation=stride,
            rhs_dilation=dilation, dimension_numbers=_conv_dims(n),
            feature_group_count=groups, precision=policy.precision(),
        )
    return lax.conv_general_dilated(
        x, weight, stride, [(p, p) for p in padding], rhs_dilation=dilation,
        dimension_numbers=_conv_dims(n), feature_group_count=groups, precision=policy.precision(),
    )


def _unbatched(fn, x, *rest, spatial: int):
    if x.ndim == spatial + 1:
        return fn(x[None], *rest)[0]
    return fn(x, *rest)


@register(aten.convolution.default, aten._convolution.default)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
                *extra):
    out_dtype = dtypes.result_type(x, weight)
    compute = upcast(out_dtype)
    n = weight.ndim - 2
    out = _unbatched(
        lambda v: _conv(v, weight.astype(compute), stride, padding, dilation, transposed,
                        output_padding, groups),
        x.astype(compute), spatial=n,
    )
    if bias is not None:
        out = out + bias.astype(compute).reshape((-1,) + (1,) * n)
    return out.astype(out_dtype)


@register(aten.convolution_backward.default)
def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    compute = upcast(x.dtype)

    def forward(v, w):
        return _conv(v, w, stride, padding, dilation, transposed, output_padding, groups)

    _, pullback = jax.vjp(forward, x.astype(compute), weight.astype(compute))
    grad_input, grad_weight = pullback(grad.astype(compute))
    grad_bias = jnp.sum(grad.astype(compute), axis=(0, *range(2, grad.ndim)))
    results = (grad_input.astype(x.dtype), grad_weight.astype(weight.dtype),
               grad_bias.astype(grad.dtype))
    return tuple(r if wanted else None for r, wanted in zip(results, output_mask, strict=False))


# ---------------------------------------------------------------------------------------
# Patches (unfold / fold).


@register(aten.im2col.default)
def im2col(x, kernel_size, dilation, padding, stride):
    batched = x.ndim == 4
    x = x if batched else x[None]
    k, d, p, s = (expand_param(v, 2) for v in (kernel_size, dilation, padding, stride))
    patches = lax.conv_general_dilated_patches(
        x, k, s, [(p[0], p[0]), (p[1], p[1])], rhs_dilation=d,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), precision=policy.precision())
    out = patches.reshape(patches.shape[0], patches.shape[1],
                          patches.shape[2] * patches.shape[3])
    return out if batched else out[0]


@register(aten.col2im.default)
def col2im(x, output_size, kernel_size, dilation, padding, stride):
    batched = x.ndim == 3
    x = x if batched else x[None]
    channels = x.shape[1] // int(np.prod(expand_param(kernel_size, 2)))
    zeros = jnp.zeros((x.shape[0], channels, *int_list(output_size)), x.dtype)
    _, pullback = jax.vjp(lambda v: im2col(v, kernel_size, dilation, padding, stride), zeros)
    out = pullback(x)[0]
    return out if batched else out[0]
