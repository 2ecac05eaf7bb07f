"""Reductions, scans, sorting and selection along a dim."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, canon_dim, jax_dtype, reduce_dims, upcast
from torch_xla.lowering.registry import register


def _accumulate(x, dtype, default):
    """Cast for an accumulating reduction: explicit dtype, else `default(x.dtype)`."""
    out = jax_dtype(dtype, default(x.dtype))
    return x.astype(upcast(out)), out


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    x, out = _accumulate(x, dtype, dtypes.sum_type)
    return jnp.sum(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim).astype(out)


@register(aten.nansum.default)
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    x, out = _accumulate(x, dtype, dtypes.sum_type)
    return jnp.nansum(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim).astype(out)


@register(aten.prod.default)
def prod(x, *, dtype=None):
    x, out = _accumulate(x, dtype, dtypes.sum_type)
    return jnp.prod(x).astype(out)


@register(aten.prod.dim_int)
def prod_dim(x, dim, keepdim=False, *, dtype=None):
    x, out = _accumulate(x, dtype, dtypes.sum_type)
    return jnp.prod(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim).astype(out)


@register(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, *, dtype=None):
    x, out = _accumulate(x, dtype, np.dtype)
    return jnp.mean(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim).astype(out)


def _var(x, dim, correction, keepdim):
    out = dtypes.to_jax(dtypes.to_torch(jnp.real(jnp.zeros((), x.dtype)).dtype))
    x = x.astype(upcast(x.dtype))
    axes = reduce_dims(dim, x.ndim)
    n = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    centered = x - jnp.mean(x, axis=axes, keepdims=True)
    squares = jnp.real(centered * jnp.conj(centered))
    total = jnp.sum(squares, axis=axes, keepdims=keepdim)
    return (total / max(n - correction, 0)).astype(upcast(out)), out


def _correction(correction, unbiased=True):
    if correction is None:
        return 1 if unbiased else 0
    return correction


@register(aten.var.correction)
def var_correction(x, dim=None, *, correction=None, keepdim=False):
    v, out = _var(x, dim, _correction(correction), keepdim)
    return v.astype(out)


@register(aten.var.dim)
def var_dim(x, dim, unbiased=True, keepdim=False):
    return var_correction(x, dim, correction=_correction(None, unbiased), keepdim=keepdim)


@register(aten.var.default)
def var_default(x, unbiased=True):
    return var_correction(x, None, correction=_correction(None, unbiased))


@register(aten.std.correction)
def std_correction(x, dim=None, *, correction=None, keepdim=False):
    v, out = _var(x, dim, _correction(correction), keepdim)
    return jnp.sqrt(v).astype(out)


@register(aten.std.dim)
def std_dim(x, dim, unbiased=True, keepdim=False):
    return std_correction(x, dim, correction=_correction(None, unbiased), keepdim=keepdim)


@register(aten.std.default)
def std_default(x, unbiased=True):
    return std_correction(x, None, correction=_correction(None, unbiased))


@register(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    return var_correction(x, dim, correction=correction, keepdim=keepdim), mean(x, dim, keepdim)


@register(aten.var_mean.dim)
def var_mean_dim(x, dim, unbiased=True, keepdim=False):
    return var_mean(x, dim, correction=_correction(None, unbiased), keepdim=keepdim)


@register(aten.var_mean.default)
def var_mean_default(x, unbiased=True):
    return var_mean(x, None, correction=_correction(None, unbiased))


@register(aten.std_mean.correction)
def std_mean(x, dim=None, *, correction=None, keepdim=False):
    return std_correction(x, dim, correction=correction, keepdim=keepdim), mean(x, dim, keepdim)


@register(aten.std_mean.dim)
def std_mean_dim(x, dim, unbiased=True, keepdim=False):
    return std_mean(x, dim, correction=_correction(None, unbiased), keepdim=keepdim)


@register(aten.amax.default)
def amax(x, dim=(), keepdim=False):
    return jnp.max(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.amin.default)
def amin(x, dim=(), keepdim=False):
    return jnp.min(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.max.default)
def max_(x):
    return jnp.max(x)


@register(aten.min.default)
def min_(x):
    return jnp.min(x)


def _arg_extreme(find, x, dim, keepdim):
    if dim is None:
        index = find(x.reshape(-1))
        return index.reshape((1,) * x.ndim) if keepdim else index
    axis = canon_dim(dim, x.ndim)
    if x.ndim == 0:
        return jnp.zeros((), np.int64)
    return find(x, axis=axis, keepdims=keepdim)


@register(aten.argmax.default)
def argmax(x, dim=None, keepdim=False):
    return _arg_extreme(jnp.argmax, x, dim, keepdim).astype(np.int64)


@register(aten.argmin.default)
def argmin(x, dim=None, keepdim=False):
    return _arg_extreme(jnp.argmin, x, dim, keepdim).astype(np.int64)


@register(aten.max.dim)
def max_dim(x, dim, keepdim=False):
    return amax(x, [dim], keepdim), argmax(x, dim, keepdim)


@register(aten.min.dim)
def min_dim(x, dim, keepdim=False):
    return amin(x, [dim], keepdim), argmin(x, dim, keepdim)


@register(aten.aminmax.default)
def aminmax(x, *, dim=None, keepdim=False):
    dims = None if dim is None else [dim]
    return amin(x, dims, keepdim), amax(x, dims, keepdim)


def _bool_reduce(fn, x, dim, keepdim):
    return fn(x.astype(bool), axis=reduce_dims(dim, x.ndim), keepdims=keepdim)


@register(aten.any.default, aten.any.dim, aten.any.dims)
def any_(x, dim=None, keepdim=False):
    return _bool_reduce(jnp.any, x, dim, keepdim)


@register(aten.all.default, aten.all.dim, aten.all.dims)
def all_(x, dim=None, keepdim=False):
    return _bool_reduce(jnp.all, x, dim, keepdim)


@register(aten.count_nonzero.dim_IntList, aten.count_nonzero.default)
def count_nonzero(x, dim=None):
    return jnp.sum(x != 0, axis=reduce_dims(dim, x.ndim)).astype(np.int64)


def _float64_bits(x):
    """The bits of float32 values widened to float64, by integer ops (no float64 in the
    graph): exponent rebiased, mantissa shifted, subnormals normalised."""
    u = lax.bitcast_convert_type(x.astype(np.float32), np.uint32).astype(np.uint64)
    sign, exp, man = u >> 31, (u >> 23) & 0xFF, u & 0x7FFFFF
    top = 63 - lax.clz(man).astype(np.int64)  # highest set bit of a subnormal's mantissa
    sub_exp = jnp.maximum(top - 149 + 1023, 0).astype(np.uint64)
    sub_man = (man - (np.uint64(1) << top.astype(np.uint64))) << (52 - top).astype(np.uint64)
    exp64 = jnp.where(exp == 0xFF, np.uint64(0x7FF), exp + 896)
    exp64 = jnp.where(exp == 0, jnp.where(man == 0, np.uint64(0), sub_exp), exp64)
    man64 = jnp.where((exp == 0) & (man != 0), sub_man, man << 29)
    return (sign << 63) | (exp64 << 52) | man64


@register(aten.hash_tensor.default)
def hash_tensor(x, dim=(), *, keepdim=False, mode=0):
    """XOR of the elements' bits after widening to float64 / int64 (mode 0, torch's only)."""
    if mode != 0:
        raise ValueError(f"hash_tensor: mode {mode} is not supported, only mode=0 (xor)")
    if x.dtype == np.float64:
        bits = lax.bitcast_convert_type(x, np.uint64)
    elif jnp.issubdtype(x.dtype, jnp.floating):
        bits = _float64_bits(x)
    elif jnp.issubdtype(x.dtype, jnp.unsignedinteger):
        bits = x.astype(np.uint64)
    else:
        bits = lax.bitcast_convert_type(x.astype(np.int64), np.uint64)
    axes = reduce_dims(dim, x.ndim)
    out = lax.reduce(bits, np.uint64(0), lax.bitwise_xor, axes)
    return jnp.expand_dims(out, axes) if keepdim else out


# ---------------------------------------------------------------------------------------
# segment_reduce: reductions over runs of rows given by lengths or offsets along `axis`
# (lengths/offsets carry the data's leading dims: shape data.shape[:axis] + (segments,)).


def _segments(data, lengths, offsets, axis):
    """(data as (batch, rows, ...), offsets as (batch, segments + 1), leading shape)."""
    axis = canon_dim(axis, data.ndim)
    lead = data.shape[:axis]
    if offsets is None:
        zero = jnp.zeros(lengths.shape[:-1] + (1,), lengths.dtype)
        offsets = jnp.concatenate([zero, jnp.cumsum(lengths, axis=-1)], axis=-1)
    batch = int(np.prod(lead, dtype=np.int64))
    rows = data.reshape((batch,) + data.shape[axis:])
    return rows, offsets.reshape(batch, -1), lead


def _segment_ids(offsets, rows):
    """The segment of each row; rows outside every segment get id `segments` (dropped)."""
    j = jnp.arange(rows)
    ids = jnp.sum(offsets[None, 1:] <= j[:, None], axis=1)
    return jnp.where(j < offsets[0], offsets.shape[0] - 1, ids)


def _column(v, like):
    return v.reshape(v.shape + (1,) * (like.ndim - 1))


def _segment_forward(reduce, initial):
    def one(d, offsets):
        n = offsets.shape[0] - 1
        ids = _segment_ids(offsets, d.shape[0])
        count = _column(offsets[1:] - offsets[:-1], d)
        start = None if initial is None else jnp.asarray(initial, d.dtype)
        if reduce in ("sum", "mean"):
            total = jax.ops.segment_sum(d, ids, n) + (0 if start is None else start)
            if reduce == "sum":
                return total
            empty = jnp.asarray(jnp.nan, d.dtype) if start is None else start
            return jnp.where(count > 0, total / jnp.maximum(count, 1).astype(d.dtype), empty)
        if reduce == "prod":
            return jax.ops.segment_prod(d, ids, n) * (1 if start is None else start)
        found = (jax.ops.segment_max if reduce == "max" else jax.ops.segment_min)(d, ids, n)
        pick = jnp.maximum if reduce == "max" else jnp.minimum
        return found if start is None else pick(start, found)

    return one


@register(aten.segment_reduce.default)
def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    if indices is not None:
        raise NotImplementedError("segment_reduce: indices= is not supported (nor by torch)")
    rows, offs, lead = _segments(data, lengths, offsets, axis)
    c = upcast(data.dtype)
    out = jax.vmap(_segment_forward(reduce, initial))(rows.astype(c), offs)
    return out.reshape(lead + out.shape[1:]).astype(data.dtype)


def _segment_backward(reduce, initial):
    """torch's CPU backward, quirks included: tied max/min rows share the gradient, but
    only positive gradients are divided; prod recomputes the product without a zero row."""

    def one(g_out, out, d, offsets):
        n = offsets.shape[0] - 1
        ids = _segment_ids(offsets, d.shape[0])
        g = jnp.take(g_out, ids, axis=0, mode="fill", fill_value=0)
        at = jnp.take(out, ids, axis=0, mode="fill", fill_value=0)
        zero = jnp.zeros((), d.dtype)
        if reduce == "sum":
            return g
        if reduce == "mean":
            count = _column(jnp.take(offsets[1:] - offsets[:-1], ids, mode="fill",
                                     fill_value=1), d)
            return g / count.astype(d.dtype)
        if reduce in ("max", "min"):
            hit = jnp.isnan(d) | (d == at)
            ties = jnp.take(jax.ops.segment_sum(hit.astype(d.dtype), ids, n), ids, axis=0,
                            mode="fill", fill_value=0)
            grad = jnp.where(hit, g, zero)
            return jnp.where((ties >= 2) & (grad > 0), grad / ties, grad)
        nan, is_zero = jnp.isnan(d), d == 0
        special = nan | is_zero

        def per_row(v):
            return jnp.take(jax.ops.segment_sum(v, ids, n), ids, axis=0, mode="fill",
                            fill_value=0)

        zeros, nans = per_row(is_zero.astype(np.int32)), per_row(nan.astype(np.int32))
        rest = jnp.take(jax.ops.segment_prod(jnp.where(special, 1, d), ids, n), ids, axis=0,
                        mode="fill", fill_value=1)
        rest = rest * (1 if initial is None else jnp.asarray(initial, d.dtype))
        other_nans, other_zeros = nans - nan, zeros - is_zero
        one = jnp.ones((), d.dtype)
        others = jnp.where(other_nans > 0, jnp.nan * one, jnp.where(other_zeros > 0, zero, one))
        return jnp.where(special, g * rest * others, g * at / d)

    return one


@register(aten._segment_reduce_backward.default)
def segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                            initial=None):
    rows, offs, lead = _segments(data, lengths, offsets, axis)
    c = upcast(data.dtype)
    batch = rows.shape[0]
    g = grad.reshape((batch,) + grad.shape[len(lead):]).astype(c)
    out = output.reshape(g.shape).astype(c)
    result = jax.vmap(_segment_backward(reduce, initial))(g, out, rows.astype(c), offs)
    return result.reshape(data.shape).astype(data.dtype)


@register(aten.logsumexp.default)
def logsumexp(x, dim=(), keepdim=False):
    out = dtypes.float_type(x)
    x = x.astype(upcast(out))
    return jax.nn.logsumexp(x, axis=reduce_dims(dim, x.ndim), keepdims=keepdim).astype(out)


def _vector_norm(x, ord, axes, keepdim):
    a = jnp.abs(x)
    if ord == float("inf"):
        return jnp.max(a, axis=axes, keepdims=keepdim)
    if ord == float("-inf"):
        return jnp.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, axis=axes, keepdims=keepdim).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a, axis=axes, keepdims=keepdim)
    if ord == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    return jnp.sum(a**ord, axis=axes, keepdims=keepdim) ** (1.0 / ord)


@register(aten.linalg_vector_norm.default)
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = x.astype(dtypes.to_jax(dtype))
    real = jnp.real(jnp.zeros((), x.dtype)).dtype
    x = x.astype(upcast(x.dtype))
    return _vector_norm(x, ord, reduce_dims(dim, x.ndim), keepdim).astype(real)


@register(aten.norm.Scalar, aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dtype,
          aten.norm.ScalarOpt_dim_dtype)
def norm(x, p=2, dim=None, keepdim=False, *, dtype=None):
    return linalg_vector_norm(x, 2 if p is None else p, dim, keepdim, dtype=dtype)


def _scan_input(x, dim):
    """0-d tensors scan as 1-element vectors."""
    if x.ndim == 0:
        return x.reshape(1), 0
    return x, canon_dim(dim, x.ndim)


@register(aten.cumsum.default)
def cumsum(x, dim, *, dtype=None):
    shape = x.shape
    x, out = _accumulate(x, dtype, dtypes.sum_type)
    x, axis = _scan_input(x, dim)
    return jnp.cumsum(x, axis=axis).astype(out).reshape(shape)


@register(aten.cumprod.default)
def cumprod(x, dim, *, dtype=None):
    shape = x.shape
    x, out = _accumulate(x, dtype, dtypes.sum_type)
    x, axis = _scan_input(x, dim)
    return jnp.cumprod(x, axis=axis).astype(out).reshape(shape)


@register(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    shape, dtype = x.shape, x.dtype
    x, axis = _scan_input(x.astype(upcast(x.dtype)), dim)
    if dtypes.is_complex(dtype):
        # torch accumulates left to right keeping the larger-real-part term's imaginary
        # part, so results are not reduced to the principal branch: scan sequentially.
        def step(carry, item):
            big = jnp.where(carry.real >= item.real, carry, item)
            small = jnp.where(carry.real >= item.real, item, carry)
            out = big + jnp.log1p(jnp.exp(small - big))
            out = jnp.where(jnp.isneginf(big.real), item, out)
            return out, out

        moved = jnp.moveaxis(x, axis, 0)
        start = jnp.full(moved.shape[1:], -jnp.inf, moved.dtype)
        _, scanned = lax.scan(step, start, moved)
        return jnp.moveaxis(scanned, 0, axis).astype(dtype).reshape(shape)
    return lax.cumlogsumexp(x, axis=axis).astype(dtype).reshape(shape)


def _cum_extreme(x, dim, better):
    shape = x.shape
    x, axis = _scan_input(x, dim)
    index = lax.broadcasted_iota(np.int64, x.shape, axis)

    def combine(a, b):
        # b is later in the scan: it wins on ties and when it is NaN (torch's rule).
        (va, ia), (vb, ib) = a, b
        take_b = better(vb, va) | (vb == va)
        if dtypes.is_floating(x.dtype):
            take_b = jnp.isnan(vb) | (~jnp.isnan(va) & take_b)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    values, indices = lax.associative_scan(combine, (x, index), axis=axis)
    return values.reshape(shape), indices.reshape(shape)


@register(aten.cummax.default)
def cummax(x, dim):
    return _cum_extreme(x, dim, jnp.greater)


@register(aten.cummin.default)
def cummin(x, dim):
    return _cum_extreme(x, dim, jnp.less)


def _sort(x, dim, descending):
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    axis = canon_dim(dim, x.ndim)
    indices = jnp.argsort(x, axis=axis, stable=True, descending=descending)
    return jnp.take_along_axis(x, indices, axis=axis), indices.astype(np.int64)


@register(aten.sort.default)
def sort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)


@register(aten.sort.stable)
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return _sort(x, dim, descending)


@register(aten.argsort.default)
def argsort(x, dim=-1, descending=False):
    return _sort(x, dim, descending)[1]


@register(aten.argsort.stable)
def argsort_stable(x, *, stable, dim=-1, descending=False):
    return _sort(x, dim, descending)[1]


@register(aten.topk.default)
def topk(x, k, dim=-1, largest=True, sorted=True):
    values, indices = _sort(x, dim, descending=largest)
    if x.ndim == 0:
        return values, indices
    axis = canon_dim(dim, x.ndim)
    return lax.slice_in_dim(values, 0, k, axis=axis), lax.slice_in_dim(indices, 0, k, axis=axis)


def _greater_or_nan(a, b):
    """torch's selection order: NaN above everything, then by value."""
    return (jnp.isnan(a) & ~jnp.isnan(b)) | (a > b)


def _swap_if(flag, arrays, a, b):
    out = []
    for arr in arrays:
        va, vb = arr[a], arr[b]
        out.append(arr.at[a].set(jnp.where(flag, vb, va)).at[b].set(jnp.where(flag, va, vb)))
    return out


def _partition(arr, idx, low, high, active):
    """Hoare partition around arr[low] (torch's inner loop); returns the arrays and the
    stopping points i, j."""

    def step(state):
        arr, idx, i, j, going = state
        piv = arr[low]
        i = lax.while_loop(lambda i: going & _greater_or_nan(piv, arr[i]), lambda i: i + 1,
                           i + 1)
        j = lax.while_loop(lambda j: going & _greater_or_nan(arr[j], piv), lambda j: j - 1,
                           j - 1)
        crossed = j < i
        arr, idx = _swap_if(going & ~crossed, (arr, idx), i, j)
        return arr, idx, i, j, going & ~crossed

    state = (arr, idx, low + 1, high, active)
    arr, idx, i, j, _ = lax.while_loop(lambda st: st[-1], step, state)
    return arr, idx, i, j


def _quick_select(row, k):
    """(k-th smallest value, its index) by torch's CPU quickselect (`quick_select_template`:
    median of three, Hoare partition), so ties resolve to the index eager returns."""

    def step(state):
        arr, idx, low, high, _ = state
        pair, big = high == low + 1, high > low + 1
        arr, idx = _swap_if(pair & _greater_or_nan(arr[low], arr[high]), (arr, idx), low, high)
        mid = low + (high - low) // 2
        arr, idx = _swap_if(big, (arr, idx), mid, low + 1)
        for a, b in ((low + 1, high), (low, high), (low + 1, low)):
            arr, idx = _swap_if(big & _greater_or_nan(arr[a], arr[b]), (arr, idx), a, b)
        arr, idx, i, j = _partition(arr, idx, low, high, big)
        arr, idx = _swap_if(big, (arr, idx), low, j)
        low = jnp.where(big & (j <= k), i, low)
        high = jnp.where(big & (j >= k), j - 1, high)
        return arr, idx, low, high, ~big

    n = row.shape[0]
    state = (row, jnp.arange(n, dtype=np.int64), jnp.asarray(0, np.int64),
             jnp.asarray(n - 1, np.int64), jnp.asarray(False))
    arr, idx = lax.while_loop(lambda st: ~st[-1], step, state)[:2]
    return arr[k], idx[k]


@register(aten.kthvalue.default)
def kthvalue(x, k, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    axis = canon_dim(dim, x.ndim)
    rows = jnp.moveaxis(x, axis, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    values, indices = jax.vmap(lambda r: _quick_select(r, k - 1))(flat)
    values, indices = values.reshape(rows.shape[:-1]), indices.reshape(rows.shape[:-1])
    if keepdim:
        values, indices = jnp.expand_dims(values, axis), jnp.expand_dims(indices, axis)
    return values, indices


def _median(x, dim, keepdim, ignore_nan):
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    axis = canon_dim(dim, x.ndim)
    values, indices = _sort(x, axis, descending=False)
    n = x.shape[axis]
    if ignore_nan and dtypes.is_floating(x.dtype):
        valid = jnp.sum(~jnp.isnan(x), axis=axis, keepdims=True)
        k = jnp.maximum((valid - 1) // 2, 0)
    else:
        has_nan = jnp.any(jnp.isnan(x), axis=axis, keepdims=True) if dtypes.is_floating(
            x.dtype) else False
        # A NaN sorts last; torch's median returns it (and its index) when present.
        k = jnp.where(has_nan, n - 1, (n - 1) // 2) * jnp.ones((1,), np.int64)
    k = jnp.broadcast_to(k, values.shape[:axis] + (1,) + values.shape[axis + 1:])
    v = jnp.take_along_axis(values, k, axis=axis)
    i = jnp.take_along_axis(indices, k, axis=axis)
    if not keepdim:
        v, i = jnp.squeeze(v, axis), jnp.squeeze(i, axis)
    return v, i


@register(aten.median.dim)
def median_dim(x, dim, keepdim=False):
    return _median(x, dim, keepdim, ignore_nan=False)


@register(aten.median.default)
def median(x):
    return _median(x.reshape(-1), 0, False, ignore_nan=False)[0]


@register(aten.nanmedian.dim)
def nanmedian_dim(x, dim, keepdim=False):
    return _median(x, dim, keepdim, ignore_nan=True)


@register(aten.nanmedian.default)
def nanmedian(x):
    return _median(x.reshape(-1), 0, False, ignore_nan=True)[0]


@register(aten.mode.default)
def mode(x, dim=-1, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), np.int64)
    axis = canon_dim(dim, x.ndim)
    moved = jnp.moveaxis(x, axis, -1)
    equal = moved[..., :, None] == moved[..., None, :]
    counts = jnp.sum(equal, axis=-1)
    best = jnp.max(counts, axis=-1, keepdims=True)
    # Among the most frequent values torch returns the smallest, with its last index.
    candidate = jnp.where(counts == best, moved, jnp.max(moved, axis=-1, keepdims=True))
    value = jnp.min(candidate, axis=-1, keepdims=True)
    positions = jnp.arange(moved.shape[-1])
    index = jnp.max(jnp.where(moved == value, positions, -1), axis=-1, keepdims=True)
    value, index = jnp.moveaxis(value, -1, axis), jnp.moveaxis(index, -1, axis)
    if not keepdim:
        value, index = jnp.squeeze(value, axis), jnp.squeeze(index, axis)
    return value, index.astype(np.int64)


@register(aten._aminmax.default)
def aminmax_all(x):
    return jnp.min(x), jnp.max(x)


@register(aten._aminmax.dim)
def aminmax_dim(x, dim, keepdim=False):
    return amin(x, [dim], keepdim), amax(x, [dim], keepdim)


@register(aten._is_all_true.default)
def is_all_true(x):
    return jnp.all(x)


@register(aten._is_any_true.default)
def is_any_true(x):
    return jnp.any(x)


@register(aten._logcumsumexp.default)
def logcumsumexp_private(x, dim):
    return logcumsumexp(x, dim)
