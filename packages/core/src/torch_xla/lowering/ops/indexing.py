"""Advanced indexing, gather/scatter, masked ops, searchsorted and histograms."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from torch_xla.lowering import policy
from torch_xla.lowering.ops._common import aten, canon_dim, to_array
from torch_xla.lowering.registry import DataDependentShapeError, register


def _index_tuple(indices):
    """ATen's list of optional index tensors as a numpy-style index tuple.

    Boolean masks become integer indices, which needs concrete values: under jit a mask
    index has a data-dependent shape and cannot be lowered.
    """
    result = []
    for index in indices:
        if index is None:
            result.append(slice(None))
        elif index.dtype in (np.bool_, np.uint8):
            if isinstance(index, jax.core.Tracer):
                raise DataDependentShapeError(
                    f"indexing with a boolean mask of shape {tuple(index.shape)} gives a "
                    "result whose shape depends on the mask's values; run this op on the CPU "
                    "(or use torch.where / masked_fill, which keep static shapes)")
            result.extend(jnp.nonzero(index))
        else:
            result.append(index)
    return tuple(result)


def gather_axis(x, index, axis):
    """jnp.take along `axis`; without an XLA gather when the plugin's dense_gather_factor
    covers the table: a one-hot dot for float tables (an inf or NaN in the table then
    reaches every looked-up row), a one-hot select and sum otherwise."""
    rows = x.shape[axis]
    if not policy.dense_gather(rows):
        return jnp.take(x, index, axis=axis)
    index = jnp.where(index < 0, index + rows, index)
    hot = index[..., None] == jnp.arange(rows, dtype=index.dtype)
    table = jnp.moveaxis(x, axis, 0)
    if jnp.issubdtype(x.dtype, jnp.inexact):  # exact: 1 * v plus zeros, at full precision
        out = jax.lax.dot_general(hot.astype(x.dtype), table, (((index.ndim,), (0,)), ((), ())),
                                  precision=jax.lax.Precision.HIGHEST,
                                  preferred_element_type=x.dtype)
    else:
        picked = jnp.where(hot.reshape(hot.shape + (1,) * (table.ndim - 1)), table, 0)
        out = jnp.any(picked, axis=index.ndim) if x.dtype == np.bool_ else jnp.sum(
            picked, axis=index.ndim, dtype=x.dtype)
    # out is index dims + x's other dims; jnp.take puts the index dims at `axis`.
    k = index.ndim
    order = list(range(k, k + axis)) + list(range(k)) + list(range(k + axis, out.ndim))
    return out.transpose(order)


def _single_integer_index(indices):
    """(axis, index) when `indices` holds one integer tensor and otherwise only Nones."""
    given = [(axis, i) for axis, i in enumerate(indices) if i is not None]
    if len(given) == 1 and not _is_mask(given[0][1]):
        return given[0]
    return None


@register(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(x, indices):
    single = _single_integer_index(indices)
    if single is not None and policy.dense_gather(x.shape[single[0]]):
        return gather_axis(x, single[1], single[0])
    return x[_index_tuple(indices)]


def _is_mask(index) -> bool:
    return index is not None and index.dtype in (np.bool_, np.uint8)


def _masked_put(x, mask, values, accumulate):
    """x[mask] = values (or +=) for a leading boolean mask, without data-dependent shapes:
    the k-th True position takes values' k-th row, as masked_scatter does."""
    rest = x.shape[mask.ndim:]
    flat = x.reshape((-1,) + rest)
    flat_mask = mask.reshape(-1).astype(bool)
    values = values.astype(x.dtype)
    if values.ndim > len(rest) and values.shape[0] != 1:
        position = jnp.clip(jnp.cumsum(flat_mask) - 1, 0, max(values.shape[0] - 1, 0))
        rows = values.reshape((values.shape[0],) + values.shape[1:])[position]
    else:
        rows = jnp.broadcast_to(values.reshape(values.shape[-len(rest):] if rest else ()),
                                rest)[None]
    keep = flat_mask.reshape((-1,) + (1,) * len(rest))
    if accumulate:
        updated = (flat | rows) if x.dtype == np.bool_ else flat + rows
    else:
        updated = jnp.broadcast_to(rows, flat.shape)
    return jnp.where(keep, updated, flat).reshape(x.shape)


@register(aten.index_put.default, aten._unsafe_index_put.default, aten._index_put_impl.default)
def index_put(x, indices, values, accumulate=False, unsafe=False):
    if len(indices) == 1 and _is_mask(indices[0]):
        return _masked_put(x, indices[0], values, accumulate)
    ref = x.at[_index_tuple(indices)]
    values = values.astype(x.dtype)
    return _accumulate(ref, values) if accumulate else ref.set(values)


@register(aten.index_select.default)
def index_select(x, dim, index):
    if x.ndim == 0:
        return x.reshape(())
    return gather_axis(x, index.reshape(-1), canon_dim(dim, x.ndim))


def _scatter_where(index, dim):
    """The full index tuple addressing `self` at `index` along `dim` (gather/scatter)."""
    grids = list(jnp.indices(index.shape, sparse=True))
    grids[dim] = index
    return tuple(grids)


@register(aten.gather.default)
def gather(x, dim, index, *, sparse_grad=False):
    if index.size == 0:
        return jnp.zeros(index.shape, x.dtype)
    if x.ndim == 0:
        return x[()] * jnp.ones(index.shape, x.dtype)
    axis = canon_dim(dim, x.ndim)
    if policy.dense_gather(x.shape[axis]):
        return _dense_gather(x, axis, index)
    return x[_scatter_where(index, axis)]


def _dense_gather(x, axis, index):
    """torch.gather as a one-hot select and sum along `axis` (PyTorch/XLA's dense gather)."""
    x = x[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))]
    rows = x.shape[axis]
    positions = jnp.arange(rows, dtype=index.dtype).reshape((rows,) + (1,) * (x.ndim - axis - 1))
    hot = jnp.expand_dims(index, axis + 1) == positions
    zero = -0.0 if jnp.issubdtype(x.dtype, jnp.inexact) else 0  # -0.0 + v is v, even for -0.0
    picked = jnp.where(hot, jnp.expand_dims(x, axis), jnp.asarray(zero, x.dtype))
    if x.dtype == np.bool_:
        return jnp.any(picked, axis=axis + 1)
    return jax.lax.reduce(picked, np.array(zero, x.dtype), jax.lax.add, (axis + 1,))


def _scatter_src(src, index, dtype):
    if not hasattr(src, "shape") or src.ndim == 0:
        return jnp.broadcast_to(to_array(src, dtype), index.shape)
    return src[tuple(slice(0, n) for n in index.shape)].astype(dtype)


def _accumulate(ref, values):
    """ref.add, where bool tensors accumulate with logical or (torch's bool add)."""
    return ref.max(values) if values.dtype == np.bool_ else ref.add(values)


_SCATTER_REDUCE = {
    None: lambda ref, v: ref.set(v),
    "add": _accumulate,
    "sum": _accumulate,
    "multiply": lambda ref, v: ref.multiply(v),
    "prod": lambda ref, v: ref.multiply(v),
    "amax": lambda ref, v: ref.max(v),
    "amin": lambda ref, v: ref.min(v),
}


def _scatter(x, dim, index, src, reduce=None):
    if index.size == 0:
        return x
    if x.ndim == 0:
        src = to_array(src, x.dtype).reshape(-1)[:1]
        return _scatter(x.reshape(1), 0, index.reshape(1), src, reduce).reshape(())
    where = _scatter_where(index, canon_dim(dim, x.ndim))
    return _SCATTER_REDUCE[reduce](x.at[where], _scatter_src(src, index, x.dtype))


@register(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    return _scatter(x, dim, index, src)


@register(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_reduce_legacy(x, dim, index, src, *, reduce):
    return _scatter(x, dim, index, src, reduce)


@register(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    return _scatter(x, dim, index, src, "add")


_IDENTITY = {"sum": 0, "prod": 1, "mean": 0}

# Bool tensors: product is "and", max is "or".
_BOOL_REDUCE = {
    "prod": lambda ref, v: ref.min(v),
    "amin": lambda ref, v: ref.min(v),
    "amax": lambda ref, v: ref.max(v),
}


def _reduce_identity(reduce, dtype):
    if dtype == np.bool_:
        return reduce in ("amin", "prod")
    if reduce in _IDENTITY:
        return _IDENTITY[reduce]
    info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf if reduce == "amax" else np.inf
    return info.min if reduce == "amax" else info.max


@register(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    if index.size == 0:
        return x
    if x.ndim == 0:
        out = scatter_reduce(x.reshape(1), 0, index.reshape(1), src.reshape(-1), reduce,
                             include_self=include_self)
        return out.reshape(())
    axis = canon_dim(dim, x.ndim)
    where = _scatter_where(index, axis)
    src = _scatter_src(src, index, x.dtype)
    start = x if include_self else x.at[where].set(_reduce_identity(reduce, x.dtype))
    if x.dtype == np.bool_ and reduce in _BOOL_REDUCE:
        return _BOOL_REDUCE[reduce](start.at[where], src)
    if reduce != "mean":
        return _SCATTER_REDUCE[reduce](start.at[where], src)
    total = start.at[where].add(src)
    count = jnp.zeros(x.shape, np.int64).at[where].add(1) + (1 if include_self else 0)
    count = jnp.maximum(count, 1)
    if jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(x.dtype, jnp.complexfloating):
        return (total / count.astype(x.dtype)).astype(x.dtype)
    return jnp.floor_divide(total, count.astype(x.dtype))


@register(aten.index_add.default)
def index_add(x, dim, index, source, *, alpha=1):
    axis = canon_dim(dim, x.ndim)
    if x.ndim == 0:
        return x + source.reshape(()) * alpha
    where = (slice(None),) * axis + (index,)
    return _accumulate(x.at[where], (source * alpha).astype(x.dtype))


@register(aten.index_copy.default)
def index_copy(x, dim, index, source):
    axis = canon_dim(dim, x.ndim)
    if x.ndim == 0:
        return source.reshape(()).astype(x.dtype)
    return x.at[(slice(None),) * axis + (index,)].set(source.astype(x.dtype))


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(x, dim, index, value):
    axis = canon_dim(dim, x.ndim)
    if x.ndim == 0:
        return jnp.asarray(value, x.dtype).reshape(())
    return x.at[(slice(None),) * axis + (index.reshape(-1),)].set(jnp.asarray(value, x.dtype))


@register(aten.index_reduce.default)
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if x.ndim == 0:
        out = index_reduce(x.reshape(1), 0, index.reshape(1), source.reshape(1), reduce,
                           include_self=include_self)
        return out.reshape(())
    axis = canon_dim(dim, x.ndim)
    # index_reduce is scatter_reduce with the index broadcast along every other dim.
    full_index = jnp.broadcast_to(
        index.reshape((1,) * axis + (-1,) + (1,) * (x.ndim - axis - 1)), source.shape
    )
    return scatter_reduce(x, axis, full_index, source, reduce, include_self=include_self)


@register(aten.take.default)
def take(x, index):
    return gather_axis(x.reshape(-1), index, 0)


@register(aten.put.default)
def put(x, index, source, accumulate=False):
    ref = x.reshape(-1).at[index.reshape(-1)]
    values = source.reshape(-1).astype(x.dtype)
    return (_accumulate(ref, values) if accumulate else ref.set(values)).reshape(x.shape)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(x, mask, value):
    return jnp.where(mask, jnp.asarray(value).astype(x.dtype), x)


@register(aten.masked_scatter.default)
def masked_scatter(x, mask, source):
    x, mask = jnp.broadcast_arrays(x, mask)
    mask = mask.reshape(-1)
    # The k-th True position takes source's k-th element.
    position = jnp.clip(jnp.cumsum(mask) - 1, 0, max(source.size - 1, 0))
    taken = source.reshape(-1)[position] if source.size else jnp.zeros_like(x.reshape(-1))
    return jnp.where(mask, taken.astype(x.dtype), x.reshape(-1)).reshape(x.shape)


def _searchsorted(sorted_sequence, values, right, sorter, out_int32):
    side = "right" if right else "left"
    if sorter is not None:
        sorted_sequence = jnp.take_along_axis(sorted_sequence, sorter, axis=-1)
    if sorted_sequence.ndim <= 1:
        out = jnp.searchsorted(sorted_sequence, values, side=side)
    else:
        rows = int(np.prod(sorted_sequence.shape[:-1]))
        flat_seq = sorted_sequence.reshape(rows, sorted_sequence.shape[-1])
        flat_val = values.reshape(rows, values.shape[-1])
        out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(flat_seq, flat_val)
        out = out.reshape(values.shape)
    return out.astype(np.int32 if out_int32 else np.int64)


@register(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    right = right or side == "right"
    values = jnp.asarray(x, sorted_sequence.dtype) if not hasattr(x, "shape") else x
    return _searchsorted(sorted_sequence, values, right, sorter, out_int32)


@register(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(x, boundaries, *, out_int32=False, right=False):
    values = jnp.asarray(x, boundaries.dtype) if not hasattr(x, "shape") else x
    return _searchsorted(boundaries, values, right, None, out_int32)


@register(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    flat = x.reshape(-1)
    if flat.size == 0:
        return jnp.zeros((bins,), x.dtype)
    if min == 0 and max == 0:
        lo, hi = jnp.min(flat), jnp.max(flat)
    else:
        lo, hi = jnp.asarray(min, x.dtype), jnp.asarray(max, x.dtype)
    # A constant input spans [v - 1, v + 1], as torch does.
    same = lo == hi
    lo, hi = jnp.where(same, lo - 1, lo), jnp.where(same, hi + 1, hi)
    position = ((flat - lo) * bins / (hi - lo)).astype(np.int64)
    position = jnp.where(flat == hi, bins - 1, position)
    inside = (flat >= lo) & (flat <= hi)
    return jnp.zeros((bins,), x.dtype).at[jnp.where(inside, position, bins)].add(
        jnp.ones((), x.dtype), mode="drop")


@register(aten.nonzero_static.default)
def nonzero_static(x, *, size, fill_value=-1):
    if x.ndim == 0:
        return jnp.zeros((size, 0), np.int64)
    coords = jnp.nonzero(x, size=size, fill_value=fill_value)
    return jnp.stack(coords, axis=-1).astype(np.int64)


@register(aten.masked_scatter_backward.default)
def masked_scatter_backward(grad, mask, sizes):
    # The gradient of source: the masked elements of grad, in order, padded with zeros.
    mask = jnp.broadcast_to(mask, grad.shape).reshape(-1)
    numel = int(np.prod(sizes))
    position = jnp.where(mask, jnp.cumsum(mask) - 1, numel)
    out = jnp.zeros((numel,), grad.dtype).at[position].set(grad.reshape(-1), mode="drop")
    return out.reshape(tuple(sizes))
