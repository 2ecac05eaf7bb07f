"""`torch.autocast('xla')`: the casts of PyTorch's CPU autocast, for the xla device.

torch registers autocast kernels only for its own devices: for a PrivateUse1
backend the `AutocastPrivateUse1` key has neither kernels nor a fallthrough, so
every op under `torch.autocast('xla')` would fail. We register a fallthrough for
all ops and a casting kernel for each op of the lists below, which are torch's
CPU lists (`tests/test_amp_autocast.py` checks them against torch's AutocastCPU
kernels), so results match eager CPU autocast. PyTorch/XLA's own AutocastXLA
list differs in three ops (relu in 16 bits, batch_norm and _log_softmax in
float32; see docs/migration.md). The default dtype is the active plugin's
`autocast_dtype()`, set when the runtime client starts (`lowering/policy.py`);
`torch_xla.amp.autocast` reads it from the plugin directly.

torch's `torch.is_autocast_xla_enabled()` & co. query the dispatch key of
torch's built-in XLA device type, which our PrivateUse1 `xla` device never
uses: `register` points them at `torch.is_autocast_enabled('xla')` & co.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

aten = torch.ops.aten

# Run in the autocast dtype (bfloat16 or float16).
LOWER_PRECISION = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input",
    "_convolution.deprecated", "conv_tbc", "prelu", "bmm", "mm", "linalg_vecdot", "baddbmm",
    "addmm", "addbmm", "_addmm_activation", "linear", "matmul", "scaled_dot_product_attention",
    "_native_multi_head_attention",
)
# Run in float32: losses, reductions and decompositions that lose accuracy in 16 bits.
FLOAT32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "grid_sampler_2d",
    "grid_sampler_3d", "polar", "prod", "prod.dim_int", "quantile", "quantile.scalar",
    "nanquantile", "nanquantile.scalar", "stft", "stft.center", "cdist", "trace",
    "view_as_complex", "cholesky", "cholesky_inverse", "cholesky_solve", "inverse",
    "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d",
    "adaptive_avg_pool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss",
    "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "ctc_loss.IntList",
    "ctc_loss.Tensor", "kl_div", "multilabel_margin_loss",
    "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2",
    "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2",
    "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft", "linalg_cond", "linalg_cond.p_str",
    "linalg_matrix_rank", "linalg_matrix_rank.tol_tensor",
    "linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float",
    "linalg_solve", "linalg_cholesky", "linalg_svdvals", "linalg_eigvals",
    "linalg_eigvalsh", "linalg_inv", "linalg_householder_product", "linalg_tensorinv",
    "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info", "qr",
    "svd", "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d",
    "adaptive_max_pool3d", "multilabel_margin_loss_forward", "linalg_qr",
    "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh", "linalg_lstsq",
    "linalg_inv_ex",
)
# Run in the widest floating type among the tensor arguments.
PROMOTE = ("stack", "cat", "index_copy")
# torch's CPU autocast ops that the lists above leave out, each with the reason.
LEFT_OUT = {
    "mkldnn_rnn_layer": "a oneDNN kernel of the CPU; XLA devices never dispatch to it",
    "_grid_sampler_2d_cpu_fallback": "the CPU's own fallback of grid_sampler_2d (listed)",
}

SUPPORTED_DTYPES = [torch.bfloat16, torch.float16]
DEFAULT_DTYPE = torch.bfloat16  # DevicePlugin.autocast_dtype()'s default, until a client starts

_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_libraries: list[torch.library.Library] = []


def _eligible(x) -> bool:
    return (isinstance(x, torch.Tensor) and x.device.type == "xla" and x.is_floating_point()
            and x.dtype != torch.float64)


def _cast(value, dtype: torch.dtype):
    if _eligible(value) and value.dtype != dtype:
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _tensors(values):
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


def _widest(args, kwargs) -> torch.dtype:
    dtype = torch.get_autocast_dtype("xla")
    for t in _tensors([*args, *kwargs.values()]):
        if _eligible(t):
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


_TARGET: dict[str, Callable] = {
    "lower": lambda args, kwargs: torch.get_autocast_dtype("xla"),
    "float32": lambda args, kwargs: torch.float32,
    "promote": _widest,
}


def _kernel(op, policy: str):
    target = _TARGET[policy]

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST):
            dtype = target(args, kwargs)
            args = _cast(args, dtype)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet), overload or "default")


def is_autocast_xla_enabled() -> bool:
    """Whether autocast is on for the xla device in this thread."""
    return torch.is_autocast_enabled("xla")


def set_autocast_xla_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("xla", enabled)


def get_autocast_xla_dtype() -> torch.dtype:
    """The dtype `torch.autocast('xla')` casts to when no dtype is given."""
    return torch.get_autocast_dtype("xla")


def set_autocast_xla_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("xla", dtype)


# torch's functions of these names read the built-in XLA device type's key, which our
# PrivateUse1 device never sets; PyTorch/XLA programs (and its tests) call them.
TORCH_ALIASES = (is_autocast_xla_enabled, set_autocast_xla_enabled, get_autocast_xla_dtype,
                 set_autocast_xla_dtype)


def register(library: torch.library.Library) -> None:
    """Autocast kernels for the xla device, a fallthrough for every other op, and
    `torch.is_autocast_xla_enabled` & co. answering for this device."""
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _libraries.append(fallthrough)
    for policy, names in (("lower", LOWER_PRECISION), ("float32", FLOAT32),
                          ("promote", PROMOTE)):
        for name in names:
            library.impl(name, _kernel(_overload(name), policy), "AutocastPrivateUse1")
    torch.set_autocast_dtype("xla", DEFAULT_DTYPE)
    for function in TORCH_ALIASES:
        setattr(torch, function.__name__, function)

