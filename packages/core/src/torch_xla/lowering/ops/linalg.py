"""Matrix products and dense linear algebra."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes
from torch_xla.lowering.ops._common import aten, upcast
from torch_xla.lowering.registry import register

HIGHEST = lax.Precision.HIGHEST


def _matmul(a, b):
    dtype = dtypes.result_type(a, b)
    c = upcast(dtype)
    if dtypes.is_integral(c, include_bool=True):
        out = jnp.matmul(a.astype(c), b.astype(c), preferred_element_type=c)
    else:
        out = jnp.matmul(a.astype(c), b.astype(c), precision=HIGHEST)
    return out.astype(dtype)


def _scaled_add(x, product, beta, alpha):
    """beta * x + alpha * product, with beta == 0 ignoring x (NaNs included), as torch."""
    if dtypes.is_integral(product.dtype, include_bool=True):
        # torch converts the scalars to the integer dtype first (0.6 -> 0).
        alpha, beta = int(alpha), int(beta)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return jnp.broadcast_to(product, product.shape)
    x = x.astype(product.dtype)
    return (x if beta == 1 else x * beta) + product


@register(aten.mm.default, aten.bmm.default, aten.matmul.default, aten.mv.default,
          aten.dot.default, aten.inner.default)
def mm(a, b):
    return _matmul(a, b)


@register(aten.vdot.default)
def vdot(a, b):
    return _matmul(jnp.conj(a), b)


@register(aten.addmm.default, aten.baddbmm.default, aten.addmv.default)
def addmm(x, a, b, *, beta=1, alpha=1):
    return _scaled_add(x, _matmul(a, b), beta, alpha).astype(dtypes.result_type(x, a, b))


@register(aten.addbmm.default)
def addbmm(x, a, b, *, beta=1, alpha=1):
    return _scaled_add(x, jnp.sum(_matmul(a, b), axis=0), beta, alpha)


@register(aten.addr.default)
def addr(x, a, b, *, beta=1, alpha=1):
    product = a[:, None] * b[None, :]
    if product.dtype == np.bool_:
        return (x & (beta != 0)) | (product & (alpha != 0))
    return _scaled_add(x, product, beta, alpha)


@register(aten.outer.default, aten.ger.default)
def outer(a, b):
    a, b = a.astype(dtypes.result_type(a, b)), b.astype(dtypes.result_type(a, b))
    return a[:, None] * b[None, :]


@register(aten.trace.default)
def trace(x):
    return jnp.trace(x).astype(dtypes.sum_type(x.dtype))


@register(aten._linalg_det.default)
def linalg_det(a):
    lu, pivots, _ = lax.linalg.lu(a)
    return jnp.linalg.det(a), lu, (pivots + 1).astype(np.int32)


@register(aten.linalg_det.default)
def det(a):
    return jnp.linalg.det(a)


@register(aten._linalg_slogdet.default)
def linalg_slogdet(a):
    sign, logabsdet = jnp.linalg.slogdet(a)
    lu, pivots, _ = lax.linalg.lu(a)
    return sign, logabsdet, lu, (pivots + 1).astype(np.int32)


@register(aten.linalg_cholesky_ex.default)
def linalg_cholesky_ex(a, *, upper=False, check_errors=False):
    low = jnp.linalg.cholesky(a)
    info = jnp.where(jnp.any(jnp.isnan(low), axis=(-2, -1)), 1, 0).astype(np.int32)
    return (jnp.swapaxes(jnp.conj(low), -1, -2) if upper else low), info


@register(aten.linalg_inv_ex.default)
def linalg_inv_ex(a, *, check_errors=False):
    return jnp.linalg.inv(a), jnp.zeros(a.shape[:-2], np.int32)


@register(aten._linalg_solve_ex.default)
def linalg_solve_ex(a, b, *, left=True, check_errors=False):
    vector = b.ndim == a.ndim - 1
    if not left:
        a_t = jnp.swapaxes(a, -1, -2)
        x = jnp.swapaxes(jnp.linalg.solve(a_t, jnp.swapaxes(b, -1, -2)), -1, -2)
    elif vector:
        x = jnp.linalg.solve(a, b[..., None])[..., 0]
    else:
        x = jnp.linalg.solve(a, b)
    lu, pivots, _ = lax.linalg.lu(a)
    return x, lu, (pivots + 1).astype(np.int32), jnp.zeros(a.shape[:-2], np.int32)


@register(aten.linalg_solve_triangular.default)
def linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    return lax.linalg.triangular_solve(a, b, left_side=left, lower=not upper,
                                       unit_diagonal=unitriangular, transpose_a=False)


@register(aten.triangular_solve.default)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    x = lax.linalg.triangular_solve(a, b, left_side=True, lower=not upper,
                                    transpose_a=transpose, unit_diagonal=unitriangular)
    return x, a


@register(aten.cholesky_solve.default)
def cholesky_solve(b, factor, upper=False):
    low = jnp.swapaxes(jnp.conj(factor), -1, -2) if upper else factor
    y = lax.linalg.triangular_solve(low, b, left_side=True, lower=True)
    return lax.linalg.triangular_solve(low, y, left_side=True, lower=True, transpose_a=True,
                                       conjugate_a=True)


@register(aten.linalg_qr.default)
def linalg_qr(a, mode="reduced"):
    if mode == "r":
        return jnp.zeros((0,), a.dtype), jnp.linalg.qr(a, mode="r")
    return jnp.linalg.qr(a, mode=mode)


@register(aten._linalg_eigh.default)
def linalg_eigh(a, UPLO="L", compute_v=True):
    w, v = jnp.linalg.eigh(a, UPLO=UPLO, symmetrize_input=False)
    return w, (v if compute_v else jnp.zeros((0,), a.dtype))


@register(aten._linalg_svd.default)
def linalg_svd(a, full_matrices=False, compute_uv=True, *, driver=None):
    if not compute_uv:
        s = jnp.linalg.svd(a, compute_uv=False)
        return jnp.zeros((0,), a.dtype), s, jnp.zeros((0,), a.dtype)
    u, s, vh = jnp.linalg.svd(a, full_matrices=full_matrices)
    return u, s, vh


@register(aten.linalg_lu_factor_ex.default)
def linalg_lu_factor_ex(a, *, pivot=True, check_errors=False):
    lu, pivots, _ = lax.linalg.lu(a)
    return lu, (pivots + 1).astype(np.int32), jnp.zeros(a.shape[:-2], np.int32)


@register(aten.linalg_cross.default)
def linalg_cross(a, b, *, dim=-1):
    a, b = jnp.broadcast_arrays(a, b)
    return jnp.cross(a, b, axis=dim)


@register(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(a):
    from jax.scipy.linalg import expm

    return expm(a.astype(upcast(a.dtype))).astype(a.dtype)


@register(aten.diag_embed.default)
def diag_embed(x, offset=0, dim1=-2, dim2=-1):
    n = x.shape[-1] + abs(offset)
    out = jnp.zeros(x.shape[:-1] + (n, n), x.dtype)
    i = np.arange(x.shape[-1]) + max(-offset, 0)
    j = np.arange(x.shape[-1]) + max(offset, 0)
    out = out.at[..., i, j].set(x)
    nd = out.ndim
    return jnp.moveaxis(out, (nd - 2, nd - 1), (dim1 % nd, dim2 % nd))


@register(aten.cholesky.default)
def cholesky(a, upper=False):
    low = jnp.linalg.cholesky(a)
    return jnp.swapaxes(jnp.conj(low), -1, -2) if upper else low


@register(aten.cholesky_inverse.default)
def cholesky_inverse(factor, upper=False):
    low = jnp.swapaxes(jnp.conj(factor), -1, -2) if upper else factor
    eye = jnp.broadcast_to(jnp.eye(low.shape[-1], dtype=low.dtype), low.shape)
    return cholesky_solve(eye, low)


@register(aten._linalg_check_errors.default)
def linalg_check_errors(info, api_name, *, is_matrix):
    # Errors in factorizations surface as NaNs on XLA: there is no host check to make.
    return None


@register(aten.linalg_eig.default)
def linalg_eig(a):
    w, v = jnp.linalg.eig(a)
    return w, v


def _permutation_matrix(pivots, n, dtype):
    """P with A = P @ L @ U from LAPACK-style 1-based row swaps."""
    perm = lax.linalg.lu_pivots_to_permutation(pivots.astype(np.int32) - 1, n)
    return jnp.swapaxes(jax_one_hot(perm, n, dtype), -1, -2)


def jax_one_hot(indices, n, dtype):
    return (indices[..., None] == jnp.arange(n)).astype(dtype)


def _split_lu(lu):
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    upper = jnp.triu(lu[..., :k, :])
    return lower, upper


@register(aten.lu_unpack.default)
def lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    m = lu.shape[-2]
    p = _permutation_matrix(pivots, m, lu.dtype) if unpack_pivots else jnp.zeros((0,), lu.dtype)
    lower, upper = _split_lu(lu) if unpack_data else (jnp.zeros((0,), lu.dtype),) * 2
    return p, lower, upper


@register(aten.linalg_lu.default)
def linalg_lu(a, *, pivot=True):
    lu, pivots, _ = lax.linalg.lu(a)
    lower, upper = _split_lu(lu)
    return _permutation_matrix(pivots + 1, a.shape[-2], a.dtype), lower, upper


@register(aten.linalg_lu_solve.default)
def linalg_lu_solve(lu, pivots, b, *, left=True, adjoint=False):
    p = _permutation_matrix(pivots, lu.shape[-1], lu.dtype)
    lower, upper = _split_lu(lu)
    a = p @ lower @ upper  # rebuild A; its solve is exact up to rounding
    if adjoint:
        a = jnp.swapaxes(jnp.conj(a), -1, -2)
    if left:
        return jnp.linalg.solve(a, b)
    return jnp.swapaxes(jnp.linalg.solve(jnp.swapaxes(a, -1, -2), jnp.swapaxes(b, -1, -2)),
                        -1, -2)


def _pinv(a, atol, rtol, hermitian):
    real = jnp.finfo(a.dtype).dtype
    if hermitian:
        w, v = jnp.linalg.eigh(a, UPLO="L", symmetrize_input=False)
        s = jnp.abs(w)
    else:
        u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    smax = jnp.max(s, axis=-1, keepdims=True) if s.shape[-1] else jnp.zeros(
        s.shape[:-1] + (1,), real)
    default_rtol = 0.0 if atol is not None and rtol is None else (
        max(a.shape[-2:]) * float(jnp.finfo(real).eps))
    atol = jnp.zeros((), real) if atol is None else jnp.asarray(atol, real)[..., None]
    rtol = jnp.asarray(default_rtol if rtol is None else rtol, real)
    rtol = rtol[..., None] if rtol.ndim else rtol
    cutoff = jnp.maximum(atol, rtol * smax)
    keep = s > cutoff
    if hermitian:
        w_inv = jnp.where(keep, 1 / jnp.where(keep, w, 1), 0).astype(a.dtype)
        return (v * w_inv[..., None, :]) @ jnp.swapaxes(jnp.conj(v), -1, -2)
    s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(a.dtype)
    return jnp.swapaxes(jnp.conj(vh), -1, -2) @ (s_inv[..., None] * jnp.swapaxes(
        jnp.conj(u), -1, -2))


@register(aten.linalg_pinv.atol_rtol_tensor, aten.linalg_pinv.atol_rtol_float)
def linalg_pinv(a, *, atol=None, rtol=None, hermitian=False):
    return _pinv(a, atol, rtol, hermitian)


@register(aten.linalg_pinv.default, aten.linalg_pinv.rcond_tensor)
def linalg_pinv_rcond(a, rcond, hermitian=False):
    return _pinv(a, 0.0, rcond, hermitian)


@register(aten._trilinear.default)
def trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    def expand(x, dims):
        for d in sorted(dims):
            x = jnp.expand_dims(x, d)
        return x

    product = expand(i1, expand1) * expand(i2, expand2) * expand(i3, expand3)
    return jnp.sum(product, axis=tuple(sumdim)) if sumdim else product


@register(aten._linalg_eigvals.default)
def linalg_eigvals(a):
    return jnp.linalg.eigvals(a)


@register(aten._int_mm.default)
def int_mm(a, b):
    return jnp.matmul(a, b, preferred_element_type=np.int32)
