"""Embedding lookups: embedding, embedding_renorm and embedding_bag (sum, mean and max
bags), with their backward ops."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from torch_xla.lowering.ops._common import aten, upcast
from torch_xla.lowering.ops.indexing import gather_axis
from torch_xla.lowering.registry import register


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return gather_axis(weight, indices, 0)


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    flat = indices.reshape(-1)
    rows = grad.reshape(flat.shape[0], -1)
    keep = (flat != padding_idx)[:, None]
    rows = jnp.where(keep, rows, 0)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), grad.dtype).at[flat].add(1)
        rows = rows / counts[flat][:, None]
    out = jnp.zeros((num_weights, rows.shape[1]), grad.dtype).at[flat].add(rows)
    return out.reshape((num_weights,) + grad.shape[indices.ndim:])


@register(aten.embedding_renorm.default)
def embedding_renorm(weight, indices, max_norm, norm_type):
    rows = weight[indices.reshape(-1)]
    norms = jnp.sum(jnp.abs(rows) ** norm_type, axis=-1) ** (1.0 / norm_type)
    scale = jnp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).astype(weight.dtype)
    # set, not multiply: a row listed twice is scaled once.
    return weight.at[indices.reshape(-1)].set(rows * scale[:, None])


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """(output, offset2bag, bag_size, max_indices) shaped as torch's meta kernel, which the
    engine trusts: offset2bag has one bag id per index, bag_size one count per offset,
    max_indices is empty unless mode is max. (The CPU kernel leaves some of them empty;
    only `output` reaches the user, the rest feed the backward.)"""
    n_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    positions = jnp.arange(indices.shape[0])
    bag = jnp.sum(positions[:, None] >= offsets[None, :n_bags], axis=1) - 1
    keep = indices != padding_idx
    out_dtype = weight.dtype
    weight = weight.astype(upcast(weight.dtype))
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None].astype(rows.dtype)
    counts = jnp.zeros((offsets.shape[0],), np.int64).at[bag].add(keep.astype(np.int64))
    offset2bag = bag.astype(np.int64)
    width = weight.shape[1]
    if mode == 2:  # max, with the index of the winning row per column
        low = jnp.asarray(-jnp.inf, weight.dtype)
        masked = jnp.where(keep[:, None], rows, low)
        out = jnp.full((n_bags, width), low).at[bag].max(masked)
        is_best = (masked == out[bag]) & keep[:, None]
        candidates = jnp.where(is_best, indices[:, None], jnp.iinfo(np.int64).max)
        argmax = jnp.full((n_bags, width), jnp.iinfo(np.int64).max).at[bag].min(candidates)
        empty = counts[:n_bags, None] == 0
        out = jnp.where(empty, jnp.zeros((), weight.dtype), out)
        max_indices = jnp.where(empty, 0, argmax)  # torch leaves 0 for empty bags
        return out.astype(out_dtype), offset2bag, counts, max_indices.astype(np.int64)
    out = jnp.zeros((n_bags, width), weight.dtype).at[bag].add(
        jnp.where(keep[:, None], rows, jnp.zeros((), weight.dtype)))
    no_max_indices = jnp.zeros((0,), np.int64)
    if mode == 1:  # mean
        out = out / jnp.maximum(counts[:n_bags], 1)[:, None].astype(weight.dtype)
        return out.astype(out_dtype), offset2bag, counts, no_max_indices
    return out.astype(out_dtype), offset2bag, jnp.zeros_like(counts), no_max_indices


@register(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode, per_sample_weights,
                                 padding_idx=-1):
    """The weight's gradient from the bookkeeping outputs of `embedding_bag` above."""
    c = upcast(grad.dtype)
    grad = grad.astype(c)
    width = grad.shape[1]
    if mode == 2:  # max: each column's gradient goes to that column's winning row
        filled = (bag_size[: grad.shape[0]] > 0)[:, None]
        columns = jnp.broadcast_to(jnp.arange(width), maximum_indices.shape)
        out = jnp.zeros((num_weights, width), c).at[maximum_indices, columns].add(
            jnp.where(filled, grad, jnp.zeros((), c)))
        return out.astype(grad.dtype)
    rows = grad[offset2bag]
    if mode == 1:
        rows = rows / bag_size[offset2bag][:, None].astype(c)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights[:, None].astype(c)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), c).at[indices].add(1)
        rows = rows / counts[indices][:, None]
    rows = jnp.where((indices != padding_idx)[:, None], rows, jnp.zeros((), c))
    return jnp.zeros((num_weights, width), c).at[indices].add(rows)


@register(aten._embedding_bag_backward.default)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           padding_idx=-1):
    """`sparse` is ignored: XLA tensors are dense, so the gradient is the dense one (as in
    PyTorch/XLA), equal to the CPU's sparse gradient made dense."""
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
                                        num_weights, scale_grad_by_freq, mode,
                                        per_sample_weights, padding_idx)


@register(aten._embedding_bag_per_sample_weights_backward.default)
def embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
                                              mode, padding_idx=-1):
    c = upcast(grad.dtype)
    dots = jnp.sum(grad.astype(c)[offset2bag] * weight.astype(c)[indices], axis=1)
    return jnp.where(indices == padding_idx, jnp.zeros((), c), dots).astype(grad.dtype)
