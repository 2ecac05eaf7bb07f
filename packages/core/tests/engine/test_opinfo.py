"""OpInfo conformance through the xla device (eager CPU is the oracle).

A fixed representative subset runs in CI; the whole op_db runs with `-m slow`. Every
entry must be native unless `opinfo_expectations.py` lists it as a fallback or a failure
(with the reason); listed entries must still fall back or fail.
"""

from __future__ import annotations

import pytest
import torch
from opinfo_expectations import ENGINE_FAILURES, ENGINE_FALLBACKS, SKIPPED_ENTRIES, expected

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


def _params(names):
    params = []
    for name, op in entries(names):
        supported = op.supported_dtypes("cpu")
        for dtype in (d for d in DTYPES if d in supported):  # eager's own dtypes only
            ident = f"{name}-{str(dtype).replace('torch.', '')}"
            params.append(pytest.param(name, op, dtype, id=ident))
    return params


def _run(device, name, op, dtype):
    """Check one entry and hold it to its expectation: native unless listed."""
    if name in SKIPPED_ENTRIES:
        pytest.skip(SKIPPED_ENTRIES[name])
    result = check(name, op, dtype, device)
    if result.status == "unsupported":
        pytest.skip(f"eager CPU does not support {name} for {dtype}: {result.reason}")
    failure = expected(ENGINE_FAILURES, name, dtype)
    fallback = expected(ENGINE_FALLBACKS, name, dtype)
    where = f"{name} ({str(dtype).replace('torch.', '')})"
    if failure is not None:
        if result.status == "failing":
            pytest.xfail(f"{failure[1]} ({result.reason})")
        pytest.fail(f"{where} is {result.status} now: remove {failure[0]} from ENGINE_FAILURES "
                    "in opinfo_expectations.py (strict expected failure)")
    assert result.status != "failing", f"{where}: {result.reason}"
    if fallback is not None:
        assert result.status == "fallback", (
            f"{where} is native now: remove {fallback[0]} from ENGINE_FALLBACKS in "
            "opinfo_expectations.py")
    else:
        assert result.status == "native", (
            f"{where} ran {result.reason} on the CPU: lower them, or list the entry in "
            "ENGINE_FALLBACKS in opinfo_expectations.py with the reason")


@pytest.mark.parametrize("name, op, dtype", _params(CI_OPS))
def test_representative_ops_match_eager(device, name, op, dtype):
    _run(device, name, op, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("name, op, dtype", _params(None))
def test_every_opinfo_entry(device, name, op, dtype):
    _run(device, name, op, dtype)
