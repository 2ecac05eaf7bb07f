"""Weight-only quantized matmul as JAX: the lowering of `torch.ops.xla.quantized_matmul`.

The op's contract (`torch_xla.experimental.xla_quantized_matmul` checks the arguments
and holds the PyTorch reference) is that the weight the activation is multiplied by is
`w * scale - zero_point`, with `w` an integer tensor:

    per-channel (block_size == -1): w [out, in],              scale, zero_point [out]
    blockwise   (block_size > 0):   w [in/block, block, out], scale, zero_point [in/block, out]

`int4_weight` says the int8 container holds 4-bit values; the program converts them to
XLA's s4. `quantize_activation` quantizes each row of the activation to int8 (absolute
maximum over the last dimension), so the dot is integer with int32 accumulation.

The weight stays integer up to the dot: `mixed_dot` is one XLA dot whose operands keep
their types (bf16 x s8, f32 x s4). jax's `dot_general` would convert both operands to
the result type first on some backends; here the backend's compiler decides how to run
a mixed dot (XLA's operand upcaster converts where the hardware has no such dot).
Backends whose compiler cannot run a dot on 4-bit integers fail to compile int4
programs; the CPU plugin's XLA is one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import mlir  # as collectives.py: the helpers of jax's lowerings
from jax._src.lib.mlir.dialects import hlo
from jax.extend.core import Primitive

# ((lhs contracting, rhs contracting), (lhs batch, rhs batch)), as `lax.dot_general`
DotDims = tuple[tuple[Sequence[int], Sequence[int]], tuple[Sequence[int], Sequence[int]]]

mixed_dot_p = Primitive("mixed_dot")


def mixed_dot(lhs, rhs, dimension_numbers: DotDims, out_dtype) -> jnp.ndarray:
    """`lax.dot_general(lhs, rhs, dimension_numbers, preferred_element_type=out_dtype)`,
    lowered as one dot whose operands keep their own dtypes."""
    dims = tuple(tuple(tuple(d) for d in pair) for pair in dimension_numbers)
    return mixed_dot_p.bind(lhs, rhs, dimension_numbers=dims, out_dtype=np.dtype(out_dtype))


def _dot_shape(lhs: tuple, rhs: tuple, dims: DotDims) -> tuple:
    """dot_general's result shape: batch dims, then lhs's free dims, then rhs's."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dims
    lhs_free = [n for d, n in enumerate(lhs) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [n for d, n in enumerate(rhs) if d not in rhs_contract and d not in rhs_batch]
    return tuple([lhs[d] for d in lhs_batch] + lhs_free + rhs_free)


@mixed_dot_p.def_abstract_eval
def _mixed_dot_aval(lhs, rhs, *, dimension_numbers: DotDims, out_dtype: np.dtype):
    return lhs.update(shape=_dot_shape(lhs.shape, rhs.shape, dimension_numbers),
                      dtype=out_dtype)


def _mixed_dot_lowering(ctx, lhs, rhs, *, dimension_numbers: DotDims, out_dtype: np.dtype):
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    dims = hlo.DotDimensionNumbers.get(
        lhs_batching_dimensions=list(lhs_batch), rhs_batching_dimensions=list(rhs_batch),
        lhs_contracting_dimensions=list(lhs_contract),
        rhs_contracting_dimensions=list(rhs_contract))
    (out,) = ctx.avals_out
    return [hlo.dot_general(mlir.aval_to_ir_type(ctx.module_context, out), lhs, rhs, dims)]


mlir.register_lowering(mixed_dot_p, _mixed_dot_lowering)


# --- the op ------------------------------------------------------------------------------


def quantize_rows(x) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Symmetric int8 quantization of each row (last dimension) of `x`: (int8 values,
    scale in x's dtype, keepdims). A row of zeros gets scale 1 instead of a division by 0."""
    peak = jnp.max(jnp.abs(x), axis=-1, keepdims=True)
    scale = jnp.where(peak > 0, peak, jnp.ones_like(peak)) / jnp.asarray(127, x.dtype)
    values = jnp.clip(jnp.round(x / scale), -128, 127).astype(jnp.int8)
    return values, scale


def quantized_matmul(x, w, scale, zero_point=None, block_size: int = -1,
                     int4_weight: bool = False, quantize_activation: bool = False
                     ) -> jnp.ndarray:
    """The op on jax arrays (arguments already checked). The result has the promoted
    dtype of x and scale, as in torch (jax promotes floating types alike)."""
    out_dtype = jnp.promote_types(x.dtype, scale.dtype)
    x_scale = None
    if quantize_activation:
        x, x_scale = quantize_rows(x)
    if int4_weight:
        w = w.astype(jnp.int4)
    accumulate = jnp.int32 if quantize_activation else x.dtype
    if block_size == -1:
        out = _per_channel(x, w, scale, zero_point, accumulate, out_dtype)
    else:
        out = _blockwise(x, w, scale, zero_point, accumulate, out_dtype)
    return out if x_scale is None else out * x_scale.astype(out_dtype)


def _per_channel(x, w, scale, zero_point, accumulate, out_dtype) -> jnp.ndarray:
    acc = mixed_dot(x, w, (((x.ndim - 1,), (1,)), ((), ())), accumulate)  # [..., out]
    out = acc.astype(out_dtype) * scale.astype(out_dtype)
    if zero_point is None:
        return out
    row_sums = jnp.sum(x.astype(out_dtype), axis=-1, keepdims=True)
    return out - row_sums * zero_point.astype(out_dtype)


def _blockwise(x, w, scale, zero_point, accumulate, out_dtype) -> jnp.ndarray:
    blocks, block, _ = w.shape
    xb = x.reshape(*x.shape[:-1], blocks, block)  # [..., blocks, block]
    batch = xb.ndim - 2
    # batched over the blocks: [blocks, ..., out]
    acc = mixed_dot(xb, w, (((xb.ndim - 1,), (1,)), ((batch,), (0,))), accumulate)
    out = jnp.einsum("s...n,sn->...n", acc.astype(out_dtype), scale.astype(out_dtype))
    if zero_point is None:
        return out
    block_sums = jnp.sum(xb.astype(out_dtype), axis=-1)  # [..., blocks]
    return out - block_sums @ zero_point.astype(out_dtype)

