"""Run one OpInfo entry through the xla device and compare with eager CPU.

Shared by `test_opinfo.py` (a CI-sized subset, and the full sweep behind `-m slow`) and
`python opinfo_check.py` which writes docs/op-coverage.md.
"""

from __future__ import annotations

import collections
import dataclasses
import sys

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils import _pytree as pytree

import torch_xla
import torch_xla.debug.metrics as met

# XLA fuses and reassociates float math and uses its own transcendental functions.
TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4}}
SAMPLES_PER_OP = 3

# Ops whose values are random: compared by shape and dtype only (reason: random numbers
# come from XLA's generator, not torch's CPU generator).
RANDOM = frozenset(
    {
        "bernoulli",
        "normal",
        "normal.number_mean",
        "rand_like",
        "randint_like",
        "randn_like",
        "randint",
        "randn",
        "rand",
        "nn.functional.dropout",
        "nn.functional.dropout2d",
        "nn.functional.dropout3d",
        "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout",
        "multinomial",
        "uniform",
        "cauchy",
        "exponential",
        "geometric",
        "log_normal",
        "nn.functional.rrelu",
        "randperm",
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
        "new_empty_strided",
        "empty_permuted",
        "torch.empty",
    }
)


# Why an entry is not native (shown in docs/op-coverage.md next to the error or the
# fallback ops): data only, never consulted when checking.
_DATA_DEPENDENT = "the output shape depends on the values (no static shape under jit)"
_CHECK_ERRORS = (
    "`_linalg_check_errors` returns nothing: the engine runs ops without outputs on the "
    "CPU, which raises torch's errors for singular inputs"
)
_NO_META = "torch has no meta kernel for it (the engine needs the output shape to record)"
_RNG = "random values come from XLA's generator, not torch's CPU one"
WHY_NOT_NATIVE: dict[str, str] = {
    "allclose": "returns a Python bool (a host sync), not a tensor",
    "combinations": "torch builds it with masked_select: " + _DATA_DEPENDENT,
    "masked_select": _DATA_DEPENDENT,
    "nonzero": _DATA_DEPENDENT,
    "argwhere": _DATA_DEPENDENT,
    "unique": _DATA_DEPENDENT,
    "unique_consecutive": _DATA_DEPENDENT,
    "bincount": _DATA_DEPENDENT,
    "index_fill": "the backward of a tensor fill value calls _unique: " + _DATA_DEPENDENT,
    "index_put": "the backward of a boolean-mask index_put indexes by the mask: "
    + _DATA_DEPENDENT,
    "sparse.sampled_addmm": "sparse layouts are not supported on XLA",
    "sparse.mm.reduce": "sparse layouts are not supported on XLA",
    "to_sparse": "sparse layouts are not supported on XLA",
    "resize_": "storage resize has no functional meaning on XLA",
    "chalf": "complex32 has no XLA type",
    "geqrf": _NO_META + "; jax has no public geqrf",
    "linalg.lstsq": _NO_META,
    "linalg.lstsq.grad_oriented": _NO_META,
    "nn.functional.ctc_loss": "_ctc_loss_backward: " + _NO_META,
    "linalg.ldl_factor": "no LDL factorization in jax; " + _CHECK_ERRORS,
    "linalg.ldl_factor_ex": "no LDL factorization in jax",
    "linalg.ldl_solve": "no LDL factorization in jax",
    "linalg.cholesky": _CHECK_ERRORS,
    "linalg.eig": _CHECK_ERRORS,
    "linalg.eigvals": _CHECK_ERRORS,
    "linalg.inv": _CHECK_ERRORS,
    "linalg.lu_factor": _CHECK_ERRORS,
    "linalg.solve": _CHECK_ERRORS,
    "linalg.tensorinv": _CHECK_ERRORS,
    "linalg.tensorsolve": _CHECK_ERRORS,
    "linalg.eigh": "eigenvectors are unique only up to sign; jax's LAPACK picks other signs",
    "matrix_exp": "float32 rounding grows with each squaring: on these samples torch's own "
    "float32 result is 2e-3 off float64 (ours 5e-4), beyond the 1e-4 tolerance",
    "topk": "torch's CPU topk orders tied values by libstdc++'s nth_element; ours by index",
    "sort": "torch's unstable CPU sort orders tied values by libstdc++'s introsort; ours is "
    "stable",
    "argsort": "as sort: torch's unstable CPU sort orders ties by libstdc++'s introsort",
    "tensor_split": "the sample's index tensor must stay on the CPU (torch requires it); "
    "this check moves every tensor to the device",
    "as_strided.partial_views": "the input is a view into a larger storage; "
    "functionalization replays as_strided on the base",
    "native_batch_norm": "in eval mode torch's CPU kernel returns empty save_mean/invstd, "
    "its meta kernel (C,) ones; the engine follows the meta kernel (the values are unused)",
    "_native_batch_norm_legit": "as native_batch_norm: eval-mode statistics' shape",
    "nn.functional.scaled_dot_product_attention": _RNG + " (the samples with dropout_p > 0)",
    "nn.functional.multi_head_attention_forward": _RNG + " (the samples with dropout_p > 0)",
    "nn.functional.fractional_max_pool2d": "not lowered; its pooling regions are random",
    "nn.functional.fractional_max_pool3d": "its pooling regions are random: " + _RNG,
    "svd_lowrank": "U and V are unique only up to signs, which the random projection "
    "decides: " + _RNG,
    "pca_lowrank": "as svd_lowrank: signs decided by a random projection",
}


@dataclasses.dataclass
class Result:
    name: str
    dtype: torch.dtype
    status: str  # native / fallback / failing / unsupported (eager CPU has no such dtype)
    reason: str = ""


def entries(names=None):
    wanted = set(names) if names is not None else None
    for op in op_db:
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if wanted is None or full in wanted:
            yield full, op


def _to_device(tree, device):
    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        moved = t.detach().to(device)
        return moved.requires_grad_() if t.requires_grad else moved

    return pytree.tree_map(move, tree)


def _compare(actual, expected, dtype, random: bool) -> None:
    flat_a, flat_e = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    if len(flat_a) != len(flat_e):
        raise AssertionError(f"{len(flat_a)} outputs, eager has {len(flat_e)}")
    for a, e in zip(flat_a, flat_e, strict=False):
        if isinstance(e, torch.Tensor):
            a = a.detach().cpu()
            if random:
                assert a.shape == e.shape and a.dtype == e.dtype, (
                    a.shape,
                    a.dtype,
                    e.shape,
                    e.dtype,
                )
            else:
                torch.testing.assert_close(
                    a, e.detach(), equal_nan=True, **TOLERANCE.get(dtype, {})
                )
        elif isinstance(e, float):
            torch.testing.assert_close(a, e, equal_nan=True, **TOLERANCE.get(dtype, {}))
        else:
            assert a == e, (a, e)


def _grads(out, inputs):
    outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
    if not outs or not inputs:
        return None
    total = sum(o.float().sum() if not o.is_complex() else o.abs().sum() for o in outs)
    return torch.autograd.grad(total, inputs, allow_unused=True)


def check(name: str, op, dtype: torch.dtype, device, backward: bool = True) -> Result:
    if dtype not in op.supported_dtypes("cpu"):
        return Result(name, dtype, "unsupported")
    random = name in RANDOM or op.name in RANDOM
    grad = backward and dtype == torch.float32 and op.supports_autograd and not random
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))[:SAMPLES_PER_OP]
    except Exception as error:
        return Result(name, dtype, "unsupported", f"no samples: {error}")
    before = {n: met.counter_value(n) for n in met.counter_names() if n.startswith("aten::")}
    compared = 0
    for sample in samples:
        args = (sample.input, *sample.args)
        try:
            expected = op(*args, **sample.kwargs)
            cpu_leaves = [
                t
                for t in pytree.tree_leaves(args)
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            expected_grads = _grads(expected, cpu_leaves) if grad else None
        except Exception:
            continue  # eager CPU rejects this sample: nothing to compare
        try:
            xargs = _to_device(args, device)
            xkwargs = _to_device(sample.kwargs, device)
            actual = op(*xargs, **xkwargs)
            leaves = [
                t
                for t in pytree.tree_leaves(xargs)
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            actual_grads = _grads(actual, leaves) if grad else None
            torch_xla.sync()
            _compare(actual, expected, dtype, random)
            if expected_grads is not None:
                _compare(
                    [g for g in actual_grads if g is not None],
                    [g for g in expected_grads if g is not None],
                    dtype,
                    False,
                )
        except Exception as error:
            text = str(error).strip().splitlines()
            return Result(
                name, dtype, "failing", f"{type(error).__name__}: {text[0] if text else ''}"[:200]
            )
        compared += 1
    if not compared:
        return Result(name, dtype, "unsupported", "eager CPU rejects every sample")
    fallbacks = sorted(
        n
        for n in met.counter_names()
        if n.startswith("aten::") and met.counter_value(n) != before.get(n)
    )
    if fallbacks:
        return Result(name, dtype, "fallback", ", ".join(fallbacks))
    return Result(name, dtype, "native")


def _worker(first: int, out_path: str, dtypes) -> None:
    """Check entries from index `first` on, appending one JSON line per result (and a
    `start` line before each entry, so a crash can be attributed)."""
    import json

    device = torch_xla.device()
    all_entries = list(entries())
    with open(out_path, "a") as out:
        for index in range(first, len(all_entries)):
            name, op = all_entries[index]
            out.write(json.dumps({"start": index, "name": name}) + "\n")
            out.flush()
            for dtype in dtypes:
                r = check(name, op, dtype, device)
                line = {"index": index, "name": name, "dtype": str(dtype), "status": r.status}
                out.write(json.dumps({**line, "reason": r.reason}) + "\n")
                out.flush()


def _sweep(dtypes) -> list[Result]:
    """Every entry, in worker processes restarted after a crash (the entry is `failing`)."""
    import json
    import os
    import subprocess
    import tempfile

    results: list[Result] = []
    total = len(list(entries()))
    first = 0
    names = [str(d) for d in dtypes]
    while first < total:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as f:
            path = f.name
        code = (
            f"import opinfo_check as o, torch; o._worker({first}, {path!r}, [{', '.join(names)}])"
        )
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=os.path.dirname(__file__) or ".",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        started = None
        with open(path) as f:
            for line in f:
                item = json.loads(line)
                if "start" in item:
                    started = item
                    continue
                dtype = getattr(torch, item["dtype"].replace("torch.", ""))
                results.append(Result(item["name"], dtype, item["status"], item["reason"]))
        os.unlink(path)
        if started is None:
            break
        done = {(r.name, str(r.dtype)) for r in results}
        if started["start"] == total - 1 and all((started["name"], n) in done for n in names):
            break
        missing = [d for d in dtypes if (started["name"], str(d)) not in done]
        for d in missing:
            results.append(Result(started["name"], d, "failing", "the process crashed (abort)"))
        first = started["start"] + 1
    return results


def write_report(path: str, dtypes=(torch.float32, torch.int64, torch.bool)) -> None:
    """Run every OpInfo entry and write the coverage table to `path`."""
    results = _sweep(dtypes)
    by_status = collections.Counter(r.status for r in results)
    tested = [r for r in results if r.status != "unsupported"]
    native = by_status["native"] / max(1, len(tested))
    lines = [
        "# Op coverage through the xla device",
        "",
        "Generated by `python packages/core/tests/engine/opinfo_check.py docs/op-coverage.md`:",
        "every entry of PyTorch's OpInfo database (`op_db`), float32 / int64 / bool samples",
        f"(at most {SAMPLES_PER_OP} per op), forward and, for differentiable float32 ops,",
        "backward, run on the xla device and compared with eager CPU (float32 rtol=atol=1e-4).",
        "",
        f"- (op, dtype) pairs eager CPU supports: {len(tested)}",
        f"- native (lowered, matches eager): {by_status['native']} ({native:.1%})",
        f"- CPU fallback (matches eager, runs `aten::` ops on the host): {by_status['fallback']}",
        f"- failing: {by_status['failing']}",
        "",
        "Rows that are not native say why (`WHY_NOT_NATIVE` in opinfo_check.py), then, in",
        "parentheses, the error or the `aten::` ops that ran on the host.",
        "",
        "| op | dtype | status | detail |",
        "|---|---|---|---|",
    ]
    for r in tested:
        detail = r.reason
        if r.status != "native" and r.name in WHY_NOT_NATIVE:
            detail = f"{WHY_NOT_NATIVE[r.name]} ({detail})"
        detail = detail.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r.name} | {str(r.dtype).replace('torch.', '')} | {r.status} | {detail} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(
        f"{len(tested)} tested, {by_status['native']} native ({native:.1%}), "
        f"{by_status['fallback']} fallback, {by_status['failing']} failing -> {path}"
    )


if __name__ == "__main__":
    write_report(sys.argv[1] if len(sys.argv) > 1 else "op-coverage.md")
