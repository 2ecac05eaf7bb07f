"""OpInfo-driven tests: every ATen op an OpInfo sample dispatches must be lowered (or
decomposed into lowered ops) and must match torch eager on the same inputs.

The CI selection (`CI_ENTRIES`, one dtype, a few samples each) runs by default; the full
sweep over every OpInfo entry and several dtypes is marked `slow` (`pytest -m slow`).
What is expected not to pass, and why, is in `../opinfo_expectations.py` (shared with
the engine sweep); an expected failure that passes fails its test.
"""

from __future__ import annotations

import os

import expecttest  # noqa: F401  (torch's OpInfo database needs it: a missing one must fail)
import pytest
import torch
from opinfo_expectations import LOWERING_FAILURES, NOT_LOWERED, SKIPPED_ENTRIES, expected

from .sweep import SWEEP_DTYPES, op_db, opinfo_name, run_entry

SAMPLES_CI = 4
# Samples per (entry, dtype) in the slow sweep; TORCH_XLA_OPINFO_SAMPLES=0 runs them all.
SAMPLES_FULL = int(os.environ.get("TORCH_XLA_OPINFO_SAMPLES", "12")) or None

# The CI selection, grouped by the lowering module that carries most of each entry.
CI_ENTRIES: dict[str, list[str]] = {
    "elementwise": [
        "abs", "acos", "add", "addcdiv", "addcmul", "asin", "atan2", "bitwise_and",
        "bitwise_not", "ceil", "clamp", "clamp_min", "copysign", "cos", "div.no_rounding_mode",
        "div.trunc_rounding", "div.floor_rounding", "eq", "erf", "exp", "expm1", "floor",
        "floor_divide", "fmod", "frac", "ge", "gt", "isnan", "isinf", "le", "lerp", "log",
        "log1p", "log2", "logical_and", "logical_not", "lt", "maximum", "minimum", "mul", "ne",
        "neg", "pow", "reciprocal", "remainder", "round", "round.decimals_3", "rsqrt",
        "rsub", "sigmoid", "sign", "sin", "sqrt", "sub", "tan", "tanh", "trunc", "true_divide",
        "where", "xlogy", "nan_to_num", "logit", "heaviside", "hypot", "float_power",
    ],
    "activations": [
        "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
        "nn.functional.elu", "nn.functional.leaky_relu", "nn.functional.hardtanh",
        "nn.functional.hardswish", "nn.functional.hardsigmoid", "nn.functional.softplus",
        "nn.functional.mish", "nn.functional.logsigmoid", "nn.functional.glu",
        "nn.functional.relu6", "nn.functional.threshold", "nn.functional.prelu",
        "nn.functional.softshrink", "nn.functional.hardshrink", "nn.functional.celu",
        "nn.functional.selu",
    ],
    "reductions": [
        "sum", "mean", "var", "std", "var_mean", "std_mean", "amax", "amin", "argmax",
        "argmin", "max.reduction_with_dim", "min.reduction_with_dim", "max.reduction_no_dim",
        "prod", "any", "all", "cumsum", "cumprod", "cummax", "logsumexp", "sort", "topk",
        "argsort", "kthvalue", "median", "norm", "linalg.vector_norm", "count_nonzero",
        "logcumsumexp", "aminmax", "nansum", "mode", "nn.functional.cosine_similarity",
        "nn.functional.normalize",
    ],
    "shape": [
        "view", "reshape", "t", "transpose", "permute", "expand", "squeeze", "unsqueeze",
        "flatten", "unflatten", "narrow", "select", "diagonal", "as_strided", "unfold",
        "split", "split_with_sizes", "chunk", "unbind", "cat", "stack", "hstack", "flip",
        "roll", "repeat", "tile", "tril", "triu", "select_scatter", "slice_scatter",
        "diagonal_scatter", "movedim", "clone", "contiguous",
        "view_as_real", "view_as_complex", "repeat_interleave", "nn.functional.pixel_shuffle",
    ],
    "indexing": [
        "index_select", "gather", "scatter", "scatter_add", "scatter_reduce.sum",
        "scatter_reduce.amax", "scatter_reduce.mean", "index_put", "index_add", "index_copy",
        "index_fill", "masked_fill", "masked_scatter", "take", "take_along_dim",
        "__getitem__", "searchsorted", "bucketize",
    ],
    "conv": [
        "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
        "nn.functional.unfold",
    ],
    "norm": [
        "nn.functional.batch_norm", "nn.functional.layer_norm", "nn.functional.group_norm",
        "nn.functional.instance_norm",
    ],
    "softmax": ["softmax", "log_softmax", "nn.functional.softmin"],
    "losses": [
        "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
        "nn.functional.l1_loss", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
        "nn.functional.binary_cross_entropy",
        "nn.functional.binary_cross_entropy_with_logits",
    ],
    "pooling": [
        "nn.functional.max_pool2d", "nn.functional.max_pool1d", "nn.functional.avg_pool2d",
        "nn.functional.avg_pool1d", "nn.functional.adaptive_avg_pool2d",
        "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_max_pool2d",
        "nn.functional.interpolate.area",
    ],
    "padding": [
        "constant_pad_nd", "nn.functional.pad.constant", "nn.functional.pad.reflect",
        "nn.functional.pad.replicate", "nn.functional.pad.circular",
    ],
    "resampling": [
        "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
        "nn.functional.upsample_nearest", "nn.functional.interpolate.trilinear",
        "nn.functional.grid_sample",
    ],
    "distances": ["cdist", "nn.functional.pdist"],
    "embedding": ["nn.functional.embedding", "nn.functional.embedding_bag"],
    "linalg": [
        "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "matmul", "outer",
        "einsum", "nn.functional.linear", "nn.functional.bilinear", "linalg.det", "linalg.inv",
        "linalg.solve", "linalg.cholesky", "trace", "linalg.qr", "linalg.svd", "linalg.eigh",
        "addr", "linalg.cross", "diag_embed",
    ],
    "factories": [
        "arange", "linspace", "logspace", "full", "zeros", "ones", "eye", "full_like",
        "zeros_like", "ones_like", "new_full", "new_zeros", "to", "double", "bool", "float",
        "tril_indices", "triu_indices",
    ],
    "fft": ["fft.fft", "fft.rfft", "fft.irfft", "fft.fft2", "fft.ifft"],
    "special": [
        "special.chebyshev_polynomial_t", "special.shifted_chebyshev_polynomial_u",
        "special.hermite_polynomial_h", "special.laguerre_polynomial_l",
        "special.legendre_polynomial_p", "special.i0e", "special.ndtri", "lgamma", "digamma",
    ],
}

_CI = [(module, name) for module, names in CI_ENTRIES.items() for name in names]
_BY_NAME = {}


def _entry(name: str):
    if not _BY_NAME:
        _BY_NAME.update({opinfo_name(info): info for info in op_db()})
    if name not in _BY_NAME:
        pytest.fail(f"no OpInfo entry named {name!r} in this torch; fix CI_ENTRIES")
    return _BY_NAME[name]


def _check(info, dtype: torch.dtype, samples: int | None) -> None:
    name = opinfo_name(info)
    if name in SKIPPED_ENTRIES:
        pytest.skip(SKIPPED_ENTRIES[name])
    where = f"{name} ({str(dtype).replace('torch.', '')})"
    result = run_entry(info, dtype, samples)
    if result.error:
        pytest.skip(f"{where}: {result.error}")
    problems = [o for o in result.outcomes if o.status == "failing" or (
        o.status == "missing" and o.op not in NOT_LOWERED)]
    failure = expected(LOWERING_FAILURES, name, dtype)
    if failure is not None:
        if problems:
            pytest.xfail(failure[1])
        pytest.fail(f"{where} passes now: remove {failure[0]} from LOWERING_FAILURES in "
                    "opinfo_expectations.py (strict expected failure)")
    if problems:
        lines = sorted({f"{o.op}: {o.status}: {o.detail[:400]}" for o in problems})
        pytest.fail(f"{where}:\n" + "\n".join(lines[:10]))


@pytest.mark.parametrize("module,name", _CI, ids=[f"{m}:{n}" for m, n in _CI])
def test_opinfo_ci(module, name):
    info = _entry(name)
    supported = info.supported_dtypes("cpu")
    dtype = next((d for d in SWEEP_DTYPES if d in supported), torch.float32)
    _check(info, dtype, SAMPLES_CI)


def _full_cases():
    try:
        db = op_db()
    except Exception:  # noqa: BLE001 - reported by the CI tests instead
        return []
    cases = []
    for info in db:
        supported = info.supported_dtypes("cpu")
        for dtype in SWEEP_DTYPES:
            if dtype in supported:
                cases.append(pytest.param(info, dtype,
                                          id=f"{opinfo_name(info)}-{str(dtype)[6:]}"))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("info,dtype", _full_cases())
def test_opinfo_full(info, dtype):
    _check(info, dtype, SAMPLES_FULL)
