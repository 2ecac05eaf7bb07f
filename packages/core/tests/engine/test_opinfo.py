"""OpInfo conformance through the xla device (eager CPU is the oracle).

A fixed representative subset runs in CI; the whole op_db runs with `-m slow`.
"""

from __future__ import annotations

import pytest
import torch

from .opinfo_check import check, entries

# One or two ops of each family: elementwise, reductions, shape/view, indexing, linear
# algebra, nn functional, comparisons, casts.
CI_OPS = [
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "abs",
    "neg",
    "sigmoid",
    "tanh",
    "sin",
    "where",
    "clamp",
    "maximum",
    "eq",
    "lt",
    "logical_and",
    "sum",
    "mean",
    "amax",
    "argmax",
    "cumsum",
    "std",
    "softmax",
    "log_softmax",
    "reshape",
    "view",
    "permute",
    "transpose",
    "cat",
    "stack",
    "expand",
    "squeeze",
    "unsqueeze",
    "flip",
    "index_select",
    "gather",
    "scatter_add",
    "masked_fill",
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "nn.functional.linear",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.conv2d",
    "nn.functional.max_pool2d",
    "nn.functional.layer_norm",
    "nn.functional.embedding",
    "nn.functional.cross_entropy",
    "to",
    "clone",
    "topk",
    "sort",
    # Lowered since the coverage drive of issue 3 (see docs/op-coverage.md).
    "kthvalue",
    "linalg.det",
    "polar",
    "polygamma.polygamma_n_2",
    "special.bessel_y0",
    "hash_tensor",
    "nn.functional.embedding_bag",
    "nn.functional.multi_margin_loss",
    "_segment_reduce.lengths",
]
DTYPES = [torch.float32, torch.int64, torch.bool]

# Known lowering bugs in the CI subset (reported to the lowering owner). Not strict: the
# lowerings are being fixed in parallel, and a fixed entry shows up as XPASS to prune.
KNOWN_FAILURES = {
    ("topk", torch.int64): "indices of tied values differ from eager's order",
    ("sort", torch.bool): "indices of tied values differ from eager's stable order",
}


def _params(names):
    params = []
    for name, op in entries(names):
        supported = op.supported_dtypes("cpu")
        for dtype in (d for d in DTYPES if d in supported):  # eager's own dtypes only
            known = KNOWN_FAILURES.get((name, dtype))
            marks = pytest.mark.xfail(reason=known, strict=False) if known else ()
            ident = f"{name}-{str(dtype).replace('torch.', '')}"
            params.append(pytest.param(name, op, dtype, id=ident, marks=marks))
    return params


def _run(device, name, op, dtype):
    result = check(name, op, dtype, device)
    if result.status == "unsupported":
        pytest.skip(f"eager CPU does not support {name} for {dtype}: {result.reason}")
    assert result.status != "failing", f"{name} {dtype}: {result.reason}"
    return result


@pytest.mark.parametrize("name, op, dtype", _params(CI_OPS))
def test_representative_ops_match_eager(device, name, op, dtype):
    result = _run(device, name, op, dtype)
    assert result.status == "native", f"{name} {dtype} fell back to the CPU: {result.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("name, op, dtype", _params(None))
def test_every_opinfo_entry(device, name, op, dtype):
    _run(device, name, op, dtype)
