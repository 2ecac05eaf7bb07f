"""What the OpInfo sweeps expect, as data: every entry carries its reason.

Both sweeps read this one module:
- the lowering sweep (`lowering/test_opinfo.py`): each ATen op an OpInfo sample dispatches
  is lowered under jax.jit and compared with torch eager on the same values
  (`lowering/harness.py`);
- the engine sweep (`engine/test_opinfo.py`, and `engine/opinfo_check.py`, which writes
  docs/op-coverage.md): each OpInfo entry runs on the xla device and is compared with
  eager CPU.

Entries are keyed by OpInfo name (with its variant: "max.reduction_no_dim") and dtype name
("float32"), or "*" for every dtype the sweep runs for that entry. Expected outcomes are
strict: a listed entry that does better than listed fails its test, naming the table to
prune. They hold for the samples the sweeps draw (seeded per entry, so the order tests run
in does not matter) at their default sample counts.
"""

from __future__ import annotations

import torch

# ---------------------------------------------------------------------------------------
# Both sweeps.

# OpInfo entries neither sweep can run.
SKIPPED_ENTRIES: dict[str, str] = {
    "jiterator_unary": "CUDA-only",
    "jiterator_binary": "CUDA-only",
    "jiterator_4inputs_with_extra_args": "CUDA-only",
    "jiterator_binary_return_by_ref": "CUDA-only",
    "jiterator_2inputs_2outputs": "CUDA-only",
}

# Reasons that recur below.
_DATA_DEPENDENT = "the output shape depends on the values (no static shape under jit)"
_SPARSE = "sparse layouts are not supported on XLA"
_COMPLEX32 = "complex32 has no XLA type"
_PARTIAL_VIEW = (
    "the input is a view into a larger storage and as_strided indexes that storage; a "
    "lowering sees only the view's values (functionalization replays as_strided on the base)"
)
_PARTIAL_VIEW_MOVED = (
    "the samples' input is base[5:15] of a 20-element tensor; moved to the device it is a "
    "tensor of its own, as `.to('cuda')` makes one, so as_strided with storage offset 0 "
    "reads its first elements, not the base's (a view made on the device maps offsets to "
    "its base's, `lazy/layout.py`)"
)
_CHECK_ERRORS = (
    "`_linalg_check_errors` returns nothing: the engine runs ops without outputs on the "
    "CPU, which raises torch's errors for singular inputs"
)
_NO_META = "torch has no meta kernel for it (the engine needs the output shape to record)"
_XLA_RNG = "random values come from XLA's generator, not torch's CPU one"
_PINV_BUG = (
    "torch bug: eager linalg_pinv on complex input gives a wrong result while a "
    "TorchDispatchMode is active (ours equals torch.linalg.inv outside it)"
)


def expected(table: dict[tuple[str, str], str], name: str, dtype: torch.dtype | str):
    """(key, reason) of the entry for `name` at `dtype` in `table`, or None."""
    dtype_name = str(dtype).replace("torch.", "")
    for key in ((name, dtype_name), (name, "*")):
        if key in table:
            return key, table[key]
    return None


# ---------------------------------------------------------------------------------------
# The lowering sweep: ATen ops.

# ATen ops we do not lower, and why (the engine runs them on the CPU fallback). An OpInfo
# sample that dispatches one of them is not a failure.
NOT_LOWERED: dict[str, str] = {
    "aten.nonzero.default": _DATA_DEPENDENT,
    "aten.masked_select.default": _DATA_DEPENDENT,
    "aten._unique2.default": _DATA_DEPENDENT,
    "aten.unique_consecutive.default": _DATA_DEPENDENT,
    "aten.unique_dim.default": _DATA_DEPENDENT,
    "aten.bincount.default": "output length depends on values",
    "aten.repeat_interleave.Tensor": "output length depends on values",
    "aten.equal.default": "returns a host bool (a sync point), not a tensor",
    "aten.allclose.default": "returns a host bool (a sync point), not a tensor",
    "aten.resize.default": "storage resize has no functional meaning on XLA",
    "aten.resize_.default": "storage resize has no functional meaning on XLA",
    "aten._to_sparse.default": _SPARSE,
    "aten._to_sparse.sparse_dim": _SPARSE,
    "aten.sparse_sampled_addmm.default": _SPARSE,
    "aten._sparse_mm_reduce_impl.default": _SPARSE,
    "aten._ctc_loss.default": "an engine rule (its int-list lengths fed as arrays)",
    "aten._ctc_loss.Tensor": "an engine rule (its int-list lengths fed as arrays)",
    "aten.geqrf.default": "jax has no public geqrf (and torch no meta kernel for it)",
    "aten.linalg_lstsq.default": "not yet lowered",
    "aten.linalg_ldl_factor_ex.default": "no LDL factorization in jax",
    "aten.linalg_ldl_solve.default": "no LDL factorization in jax",
    "aten.special_bessel_j0.default": "jax.scipy.special.bessel_jn returns NaN for large x",
    "aten.special_bessel_j1.default": "jax.scipy.special.bessel_jn returns NaN for large x",
    "aten.special_spherical_bessel_j0.default": "not yet lowered",
    "aten.fractional_max_pool2d.default": "not lowered: its pooling regions come from "
    "torch's generator (random_samples), which the CPU fallback keeps",
    "aten.fractional_max_pool3d.default": "not lowered: its pooling regions come from "
    "torch's generator (random_samples), which the CPU fallback keeps",
}

# ATen ops the lowering checker lets run unchecked.
IGNORED_OPS: dict[str, str] = {
    "profiler._record_function_enter_new.default": "profiler bookkeeping, no values",
    "profiler._record_function_exit._RecordFunction": "profiler bookkeeping, no values",
}

# Tolerances by result dtype: (rtol, atol). float32 is torch.testing's default widened by
# the reassociation XLA is allowed (fusion, reduction order); integers and bool are exact.
DTYPE_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (3e-2, 3e-2),
    torch.float32: (1.3e-6 * 20, 1e-5 * 10),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6 * 20, 1e-5 * 10),
    torch.complex128: (1e-7, 1e-7),
}

# Per-op tolerance overrides (name of the overload -> (rtol, atol, reason)).
OP_TOLERANCE: dict[str, tuple[float, float, str]] = {
    "aten.convolution.default": (1e-4, 1e-4, "XLA's conv algorithm sums in another order"),
    "aten.convolution_backward.default": (1e-4, 1e-4, "conv transpose sums in another order"),
    "aten._cdist_forward.default": (1e-4, 1e-4, "torch uses the matmul expansion for p=2"),
    "aten.linalg_vector_norm.default": (1e-5, 1e-5, "sum of squares, another order"),
    "aten.pow.Tensor_Tensor": (1e-5, 1e-5, "XLA pow goes through exp/log"),
    "aten.pow.Tensor_Scalar": (1e-5, 1e-5, "XLA pow goes through exp/log"),
    "aten.pow.Scalar": (1e-5, 1e-5, "XLA pow goes through exp/log"),
    "aten.lgamma.default": (1e-5, 1e-5, "different lgamma approximation"),
    "aten.digamma.default": (1e-5, 1e-4, "different digamma approximation"),
    "aten.erfinv.default": (1e-5, 1e-5, "different erfinv approximation"),
    "aten.tan.default": (1e-5, 1e-5, "XLA tan near poles"),
    "aten.var.correction": (1e-5, 1e-5, "two-pass variance, another order"),
    "aten.std.correction": (1e-5, 1e-5, "two-pass variance, another order"),
    "aten.var_mean.correction": (1e-5, 1e-5, "two-pass variance, another order"),
    "aten.std_mean.correction": (1e-5, 1e-5, "two-pass variance, another order"),
    "aten._linalg_det.default": (1e-4, 1e-4, "LU in another order"),
    "aten._linalg_slogdet.default": (1e-4, 1e-4, "LU in another order"),
    "aten.linalg_inv_ex.default": (1e-4, 1e-4, "LU in another order"),
    "aten._linalg_solve_ex.default": (1e-4, 1e-4, "LU in another order"),
    "aten.logcumsumexp.default": (1e-5, 1e-5, "associative scan order"),
    "aten.cumprod.default": (1e-5, 1e-5, "associative scan order"),
    "aten.cumsum.default": (1e-5, 1e-5, "associative scan order"),
    "aten.prod.default": (1e-5, 1e-5, "product order"),
    "aten.prod.dim_int": (1e-5, 1e-5, "product order"),
    "aten.native_group_norm_backward.default": (1e-4, 1e-4, "VJP formula, another order"),
    "aten.native_layer_norm_backward.default": (1e-4, 1e-4, "formula in another order"),
    "aten.native_batch_norm_backward.default": (1e-4, 1e-4, "formula in another order"),
    "aten.upsample_bilinear2d.vec": (1e-5, 1e-5, "matrix form of the interpolation"),
    "aten.grid_sampler_2d.default": (1e-5, 1e-5, "weights computed in another order"),
    "aten.addmm.default": (1e-5, 1e-5, "matmul summation order"),
    "aten.baddbmm.default": (1e-5, 1e-5, "matmul summation order"),
    "aten.addbmm.default": (1e-5, 1e-5, "matmul summation order"),
    "aten.mm.default": (1e-5, 1e-5, "matmul summation order"),
    "aten.bmm.default": (1e-5, 1e-5, "matmul summation order"),
}

# Per-(op, dtype) overrides: (rtol, atol, reason).
OP_DTYPE_TOLERANCE: dict[tuple[str, torch.dtype], tuple[float, float, str]] = {
    ("aten.addbmm.default", torch.bfloat16): (
        0.1, 0.5, "torch rounds to bfloat16 after each batch's product; we accumulate in float32"
    ),
    ("aten.baddbmm.default", torch.bfloat16): (
        0.1, 0.5, "torch rounds the product to bfloat16 before adding"
    ),
    ("aten.binary_cross_entropy_with_logits.default", torch.bfloat16): (
        0.1, 0.1, "torch composes it of bfloat16 ops, rounding after each"
    ),
    ("aten.convolution.default", torch.bfloat16): (
        0.1, 0.5, "torch rounds partial sums of bfloat16 convolutions"
    ),
    ("aten.linalg_matrix_exp.default", torch.float32): (
        1e-3, 2e-3, "float32 rounding grows with each squaring"
    ),
}

# Ops whose values are not defined by torch (uninitialised memory) or not unique: only
# shape and dtype are compared. (Random ops are recognised by their `needs_rng` flag.)
UNCOMPARED_VALUES: dict[str, str] = {
    "aten.empty.memory_format": "uninitialised memory",
    "aten.empty_strided.default": "uninitialised memory",
    "aten.empty_like.default": "uninitialised memory",
    "aten.empty_permuted.default": "uninitialised memory",
    "aten.new_empty.default": "uninitialised memory",
    "aten.new_empty_strided.default": "uninitialised memory",
    "aten.linalg_qr.default": "Q/R are unique only up to signs",
    "aten._linalg_svd.default": "U/V are unique only up to signs",
    "aten._linalg_eigh.default": "eigenvectors are unique only up to signs",
    "aten._linalg_det.default": "LU factors depend on the pivoting algorithm",
    "aten._linalg_slogdet.default": "LU factors depend on the pivoting algorithm",
    "aten._linalg_solve_ex.default": "LU factors depend on the pivoting algorithm",
    "aten.linalg_lu_factor_ex.default": "LU factors depend on the pivoting algorithm",
}

# Outputs (by position) left uncompared for specific ops: (positions, reason).
IGNORED_OUTPUTS: dict[str, tuple[tuple[int, ...], str]] = {
    "aten._linalg_det.default": ((1, 2), "LU factors depend on pivoting"),
    "aten._linalg_slogdet.default": ((2, 3), "LU factors depend on pivoting"),
    "aten._linalg_solve_ex.default": ((1, 2), "LU factors depend on pivoting"),
    "aten.topk.default": ((1,), "indices of equal values are unspecified"),
    "aten.sort.default": ((1,), "torch's unstable sort orders equal values arbitrarily"),
    "aten.median.dim": ((1,), "index of equal values is unspecified"),
    "aten.nanmedian.dim": ((1,), "index of equal values is unspecified"),
    "aten.mode.default": ((1,), "index of equal values is unspecified"),
    "aten.native_batch_norm.default": ((1, 2), "CPU returns empty stats in eval"),
    "aten._native_batch_norm_legit.default": (
        (1, 2), "in eval the CPU kernel returns empty save_mean/invstd, the meta kernel (C,): "
        "unused"
    ),
    "aten._native_batch_norm_legit_no_training.default": ((1, 2), "same eval-mode stats"),
    "aten.native_layer_norm.default": ((1, 2), "mean/rstd shapes differ on CPU for 0-size"),
    "aten._embedding_bag.default": (
        (1, 2, 3), "bookkeeping for the backward: the CPU kernel leaves some empty, the "
        "lowering follows the meta kernel"
    ),
    "aten._embedding_bag_forward_only.default": ((1, 2, 3), "same bookkeeping outputs"),
}

# OpInfo entries (name, dtype name or "*") some of whose ATen ops disagree with eager.
LOWERING_FAILURES: dict[tuple[str, str], str] = {
    ("as_strided.partial_views", "*"): _PARTIAL_VIEW,
    ("chalf", "*"): _COMPLEX32,
    ("linalg.pinv", "complex64"): _PINV_BUG,
    ("linalg.pinv.singular", "complex64"): _PINV_BUG,
    ("pinverse", "complex64"): _PINV_BUG,
    ("matrix_exp", "bfloat16"): "torch's bfloat16 matrix_exp returns NaN on these samples; "
    "ours matches torch's float32 result",
}


# ---------------------------------------------------------------------------------------
# The engine sweep: whole OpInfo entries on the xla device.

# (rtol, atol) by dtype; other dtypes compare exactly.
ENGINE_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    # XLA fuses and reassociates float math and uses its own transcendental functions.
    torch.float32: (1e-4, 1e-4),
}

# Entries whose values are random or undefined: compared by shape and dtype only.
RANDOM_ENTRIES: dict[str, str] = {
    **dict.fromkeys(
        ["bernoulli", "normal", "normal.number_mean", "rand_like", "randint_like",
         "randn_like", "randint", "randn", "rand", "multinomial", "uniform", "cauchy",
         "exponential", "geometric", "log_normal", "randperm", "nn.functional.rrelu",
         "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
         "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout"],
        _XLA_RNG,
    ),
    **dict.fromkeys(
        ["empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided",
         "empty_permuted", "torch.empty"],
        "uninitialised memory: torch does not define the values",
    ),
}

# Entries (name, dtype name or "*") that match eager but run some `aten::` ops on the host.
ENGINE_FALLBACKS: dict[tuple[str, str], str] = {
    ("allclose", "*"): "returns a Python bool (a host sync), not a tensor",
    ("median", "*"): "median of all elements (median.default) runs on the CPU as in "
    "PyTorch/XLA, whose programs expect aten::median among the fallbacks (lazy/dispatch.py "
    "ON_CPU); median.dim is lowered",
    ("combinations", "*"): "torch builds it with masked_select: " + _DATA_DEPENDENT,
    ("masked_select", "*"): _DATA_DEPENDENT,
    ("nonzero", "*"): _DATA_DEPENDENT,
    ("argwhere", "*"): _DATA_DEPENDENT,
    ("unique", "*"): _DATA_DEPENDENT,
    ("unique_consecutive", "*"): _DATA_DEPENDENT,
    ("bincount", "*"): _DATA_DEPENDENT,
    ("index_fill", "float32"): "the backward of a tensor fill value calls _unique: "
    + _DATA_DEPENDENT,
    ("index_put", "float32"): "the backward of a boolean-mask index_put indexes by the "
    "mask: " + _DATA_DEPENDENT,
    ("resize_", "*"): "storage resize has no functional meaning on XLA",
    ("geqrf", "*"): _NO_META + "; jax has no public geqrf",
    ("linalg.lstsq", "*"): _NO_META,
    ("linalg.lstsq.grad_oriented", "*"): _NO_META,
    ("nn.functional.fractional_max_pool2d", "*"): "not lowered; its pooling regions are "
    "random",
    ("linalg.ldl_factor", "*"): "no LDL factorization in jax; " + _CHECK_ERRORS,
    ("linalg.ldl_factor_ex", "*"): "no LDL factorization in jax",
    ("linalg.ldl_solve", "*"): "no LDL factorization in jax",
    ("linalg.cholesky", "*"): _CHECK_ERRORS,
    ("linalg.eig", "*"): _CHECK_ERRORS,
    ("linalg.eigvals", "*"): _CHECK_ERRORS,
    ("linalg.inv", "*"): _CHECK_ERRORS,
    ("linalg.lu_factor", "*"): _CHECK_ERRORS,
    ("linalg.solve", "*"): _CHECK_ERRORS,
    ("linalg.tensorinv", "*"): _CHECK_ERRORS,
    ("linalg.tensorsolve", "*"): _CHECK_ERRORS,
}

# Entries (name, dtype name or "*") whose result on the xla device differs from eager's
# or that raise there.
ENGINE_FAILURES: dict[tuple[str, str], str] = {
    ("chalf", "*"): _COMPLEX32,
    ("to_sparse", "*"): _SPARSE,
    ("sparse.sampled_addmm", "*"): _SPARSE,
    ("sparse.mm.reduce", "*"): _SPARSE,
    ("as_strided.partial_views", "*"): _PARTIAL_VIEW_MOVED,
    ("tensor_split", "*"): "the sample's index tensor must stay on the CPU (torch requires "
    "it); this check moves every tensor to the device",
    ("native_batch_norm", "float32"): "in eval mode torch's CPU kernel returns empty "
    "save_mean/invstd, its meta kernel (C,) ones; the engine follows the meta kernel (the "
    "values are unused)",
    ("_native_batch_norm_legit", "float32"): "as native_batch_norm: eval-mode statistics' "
    "shape",
    ("matrix_exp", "float32"): "float32 rounding grows with each squaring: on these samples "
    "torch's own float32 result is 2e-3 off float64 (ours 5e-4), beyond the 1e-4 tolerance",
    ("linalg.eigh", "float32"): "eigenvectors are unique only up to sign; jax's LAPACK picks "
    "other signs",
    ("topk", "int64"): "torch's CPU topk orders tied values by libstdc++'s nth_element; ours "
    "by index",
    ("sort", "bool"): "torch's unstable CPU sort orders tied values by libstdc++'s introsort; "
    "ours is stable",
    ("argsort", "bool"): "as sort: torch's unstable CPU sort orders ties by libstdc++'s "
    "introsort",
    ("nn.functional.scaled_dot_product_attention", "float32"): _XLA_RNG
    + " (the samples with dropout_p > 0)",
    ("nn.functional.multi_head_attention_forward", "float32"): _XLA_RNG
    + " (the samples with dropout_p > 0)",
    ("nn.functional.fractional_max_pool3d", "float32"): "its pooling regions are random: "
    + _XLA_RNG,
    ("svd_lowrank", "float32"): "U and V are unique only up to signs, which the random "
    "projection decides: " + _XLA_RNG,
    ("pca_lowrank", "float32"): "as svd_lowrank: signs decided by a random projection",
}
