"""What the lowering tests expect not to pass, as data. Every line carries its reason."""

# ATen ops we do not lower, and why (the engine runs them on the CPU fallback).
NOT_LOWERED: dict[str, str] = {
    "aten.nonzero.default": "output shape depends on values (no static shape under jit)",
    "aten.masked_select.default": "output shape depends on values",
    "aten._unique2.default": "output shape depends on values",
    "aten.unique_consecutive.default": "output shape depends on values",
    "aten.unique_dim.default": "output shape depends on values",
    "aten.bincount.default": "output length depends on values",
    "aten.repeat_interleave.Tensor": "output length depends on values",
    "aten.equal.default": "returns a host bool (a sync point), not a tensor",
    "aten.allclose.default": "returns a host bool (a sync point), not a tensor",
    "aten.resize.default": "storage resize has no functional meaning on XLA",
    "aten.resize_.default": "storage resize has no functional meaning on XLA",
    "aten._to_sparse.default": "sparse layouts are not supported on XLA",
    "aten._to_sparse.sparse_dim": "sparse layouts are not supported on XLA",
    "aten.sparse_sampled_addmm.default": "sparse layouts are not supported on XLA",
    "aten._sparse_mm_reduce_impl.default": "sparse layouts are not supported on XLA",
    "aten._ctc_loss.default": "not yet lowered (CPU fallback)",
    "aten._ctc_loss.Tensor": "not yet lowered (CPU fallback)",
    "aten.geqrf.default": "jax has no public geqrf (and torch no meta kernel for it)",
    "aten.linalg_lstsq.default": "not yet lowered",
    "aten.linalg_ldl_factor_ex.default": "no LDL factorization in jax",
    "aten.linalg_ldl_solve.default": "no LDL factorization in jax",
    "aten.special_bessel_j0.default": "jax.scipy.special.bessel_jn returns NaN for large x",
    "aten.special_bessel_j1.default": "jax.scipy.special.bessel_jn returns NaN for large x",
    "aten.special_spherical_bessel_j0.default": "not yet lowered",
}

# OpInfo entries (name, dtype name or "*") whose samples are known to disagree.
KNOWN_FAILURES: dict[tuple[str, str], str] = {
    ("as_strided.partial_views", "*"): "the input is a view into a larger storage; lowerings "
    "see only the view's values (functionalization replays as_strided on the base)",
    ("chalf", "*"): "complex32 has no XLA type",
    ("linalg.pinv", "complex64"): "torch bug: eager linalg_pinv on complex input gives a wrong "
    "result while a TorchDispatchMode is active (ours equals torch.linalg.inv outside it)",
    ("linalg.pinv.singular", "complex64"): "same torch bug under TorchDispatchMode",
    ("pinverse", "complex64"): "same torch bug under TorchDispatchMode",
    ("matrix_exp", "bfloat16"): "torch's bfloat16 matrix_exp returns NaN on these samples; "
    "ours matches torch's float32 result",
}

# OpInfo entries whose eager run cannot be checked here.
SKIPPED_ENTRIES: dict[str, str] = {
    "jiterator_unary": "CUDA-only",
    "jiterator_binary": "CUDA-only",
    "jiterator_4inputs_with_extra_args": "CUDA-only",
    "jiterator_binary_return_by_ref": "CUDA-only",
    "jiterator_2inputs_2outputs": "CUDA-only",
}


def known_failure(name: str, dtype: str) -> str | None:
    return KNOWN_FAILURES.get((name, dtype)) or KNOWN_FAILURES.get((name, "*"))
