"""Matrix products and dense linear algebra."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from torch_xla.lowering import dtypes, policy
from torch_xla.lowering.ops._common import HIGHEST, aten, upcast
from torch_xla.lowering.registry import register


def _matmul(a, b):
    dtype = dtypes.result_type(a, b)
    c = upcast(dtype)
    if dtypes.is_integral(c, include_bool=True):
        out = jnp.matmul(a.astype(c), b.astype(c), preferred_element_type=c)
    elif c != dtype:  # 16-bit operands (an accelerator's fast path, autocast's point), f32 sums
        out = jnp.matmul(a.astype(dtype), b.astype(dtype), preferred_element_type=c)
    else:
        out = jnp.matmul(a.astype(c), b.astype(c), precision=policy.precision())
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


def _det_lu(a):
    """The LU factors torch's det/slogdet kernels return for their backward: of A^T for a
    contiguous real A (LAPACK's column-major view of it, free of a copy; engine tensors
    are contiguous), of A for complex A."""
    if not dtypes.is_complex(a.dtype):
        a = jnp.swapaxes(a, -1, -2)
    lu, pivots, _ = lax.linalg.lu(a)
    return lu, (pivots + 1).astype(np.int32)


@register(aten._linalg_det.default)
def linalg_det(a):
    return (jnp.linalg.det(a), *_det_lu(a))


@register(aten.linalg_det.default)
def det(a):
    return jnp.linalg.det(a)


@register(aten._linalg_slogdet.default)
def linalg_slogdet(a):
    sign, logabsdet = jnp.linalg.slogdet(a)
    return (sign, logabsdet, *_det_lu(a))


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


@register(aten.linalg_householder_product.default, aten.orgqr.default)
def householder_product(a, tau):
    return lax.linalg.householder_product(a, tau)


@register(aten.ormqr.default)
def ormqr(a, tau, other, left=True, transpose=False):
    """Q (or Q^H) times `other` from the side `left` says, Q the full square product of
    the reflectors in `a` (zero taus beyond k are identity reflectors)."""
    m = a.shape[-2]
    square = jnp.zeros(a.shape[:-1] + (m,), a.dtype).at[..., : a.shape[-1]].set(
        a[..., :, :m])
    taus = jnp.zeros(tau.shape[:-1] + (m,), tau.dtype).at[..., : tau.shape[-1]].set(tau)
    q = lax.linalg.householder_product(square, taus)
    if transpose:
        q = jnp.swapaxes(jnp.conj(q), -1, -2)
    return _matmul(q, other) if left else _matmul(other, q)


@register(aten.linalg_cross.default)
def linalg_cross(a, b, *, dim=-1):
    a, b = jnp.broadcast_arrays(a, b)
    return jnp.cross(a, b, axis=dim)


# torch's matrix exponential (Bader, Blanes, Casas 2019: optimized Taylor polynomials of
# degree 1, 2, 4, 8, 12, 18 chosen by the 1-norm, scaling and squaring above the last).
_EXP_THETAS = {
    np.dtype(np.float32): (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
                           5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00),
    np.dtype(np.float64): (2.220446049250313e-16, 2.580956802971767e-08, 3.397168839976962e-04,
                           4.991228871115323e-02, 2.996158913811580e-01, 1.090863719290036e+00),
}
_T12 = ((9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740),
        (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031,
         0.01108844528519167989),
        (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968,
         0.00610700528898058230),
        (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079,
         -0.00675951846863086359))
_T18 = ((0., -1.00365581030144618291e-01, -8.02924648241156932449e-03,
         -8.92138498045729985177e-04, 0.),
        (0., 3.97849749499645077844e-01, 1.36783778460411720168e+00,
         4.98289622525382669416e-01, -6.37898194594723280150e-04),
        (-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
         -6.98210122488052056106e-03, 3.34975017086070470649e-05),
        (-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
         2.95552570429315521194e-02, -1.39180257516060693404e-05),
        (0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
         -1.40086798182036094347e-05))


def _combine(coefficients, powers):
    return [sum(c * p for c, p in zip(row, powers, strict=False)) for row in coefficients]


def _taylor_exps(a):
    """torch's T1 ... T18 polynomials of `a` (T18 unscaled)."""
    mm = functools.partial(jnp.matmul, precision=HIGHEST)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    a2 = mm(a, a)
    a3 = mm(a, a2)
    t4 = eye + a + mm(a2, eye / 2 + a / 6 + a2 / 24)
    r177 = 0.1330413469565007072504e+2
    x3 = 2 / 3
    x1, x2 = x3 * ((1 + r177) / 88), x3 * ((1 + r177) / 352)
    x4, x5 = (-271 + 29 * r177) / (315 * x3), (-11 + 11 * r177) / (1260 * x3)
    x6, x7 = (-99 + 11 * r177) / (5040 * x3), (89 - r177) / (5040 * x3)
    a4 = mm(a2, x1 * a + x2 * a2)
    a8 = mm(x3 * a2 + a4, x4 * eye + x5 * a + x6 * a2 + x7 * a4)
    t8 = eye + a + (857 - 58 * r177) / 630 * a2 + a8
    b = _combine(_T12, (eye, a, a2, a3))
    b[2] = b[2] + mm(b[3], b[3])
    t12 = b[0] + mm(b[1] + b[2], b[2])
    b = _combine(_T18, (eye, a, a2, a3, mm(a3, a3)))
    b[3] = b[3] + mm(b[0], b[4])
    t18 = b[1] + mm(b[2] + b[3], b[3])
    return (eye + a, eye + a + a2 / 2, t4, t8, t12), t18


@register(aten.linalg_matrix_exp.default)
def linalg_matrix_exp(a):
    c = upcast(a.dtype)
    x = a.astype(c)
    if x.shape[-1] <= 1:
        return jnp.exp(x).astype(a.dtype)
    thetas = _EXP_THETAS[np.dtype(jnp.finfo(c).dtype)]
    norm = jnp.max(jnp.sum(jnp.abs(x), axis=-2), axis=-1)[..., None, None]
    low_degree, _ = _taylor_exps(x)
    steps = jnp.maximum(jnp.ceil(jnp.log2(norm / thetas[5])), 0)
    _, scaled = _taylor_exps(x / jnp.exp2(steps).astype(c))

    def square(p, m):
        return jnp.where(p < steps, jnp.matmul(m, m, precision=HIGHEST), m)

    out = lax.fori_loop(0, jnp.max(steps, initial=0).astype(np.int32), square, scaled)
    for i, t in enumerate(low_degree):
        lower = -1 if i == 0 else thetas[i - 1]
        out = jnp.where((norm > lower) & (norm <= thetas[i]) & (norm < thetas[4]), t, out)
    return out.astype(a.dtype)


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
