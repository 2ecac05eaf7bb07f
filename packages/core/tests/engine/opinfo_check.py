"""Run one OpInfo entry through the xla device and compare with eager CPU.

Shared by `test_opinfo.py` (a CI-sized subset, and the full sweep behind `-m slow`) and
`python opinfo_check.py` which writes docs/op-coverage.md. What to expect of each entry,
and why, is in `../opinfo_expectations.py`, which the lowering sweep reads too.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

# The shared expectations live one folder up; a script run (or a subprocess that imports
# this file from its folder) does not have that folder on sys.path.
_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

import opinfo_expectations as expectations  # noqa: E402
import torch  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402

import torch_xla  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402

SAMPLES_PER_OP = 3


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


def _tolerance(dtype) -> dict[str, float]:
    if dtype not in expectations.ENGINE_TOLERANCE:
        return {}
    rtol, atol = expectations.ENGINE_TOLERANCE[dtype]
    return {"rtol": rtol, "atol": atol}


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
                torch.testing.assert_close(a, e.detach(), equal_nan=True, **_tolerance(dtype))
        elif isinstance(e, float):
            torch.testing.assert_close(a, e, equal_nan=True, **_tolerance(dtype))
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
    random = name in expectations.RANDOM_ENTRIES or op.name in expectations.RANDOM_ENTRIES
    grad = backward and dtype == torch.float32 and op.supports_autograd and not random
    torch.manual_seed(0)  # the same samples whatever ran before: expectations are strict
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
        and n != "aten::_local_scalar_dense"  # a host read (.item()), not an op on the CPU
    )
    if fallbacks:
        return Result(name, dtype, "fallback", ", ".join(fallbacks))
    return Result(name, dtype, "native")


def _worker(first: int, out_path: str, dtypes) -> None:
    """Check entries from index `first` on, appending one JSON line per result (and a
    `start` line before each entry, so a crash can be attributed)."""
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
    results: list[Result] = []
    total = len(list(entries()))
    first = 0
    names = [str(d) for d in dtypes]
    while first < total:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=False) as f:
            path = f.name
        code = (
            "import torch; from engine import opinfo_check as o; "
            f"o._worker({first}, {path!r}, [{', '.join(names)}])"
        )
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=_TESTS,
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


_EXPECTED_BY_STATUS = {
    "fallback": expectations.ENGINE_FALLBACKS,
    "failing": expectations.ENGINE_FAILURES,
}


def write_report(path: str, dtypes=(torch.float32, torch.int64, torch.bool)) -> None:
    """Run every OpInfo entry and write the coverage table to `path`."""
    results = _sweep(dtypes)
    by_status = collections.Counter(r.status for r in results)
    tested = [r for r in results if r.status != "unsupported"]
    native = by_status["native"] / max(1, len(tested))
    rtol, atol = expectations.ENGINE_TOLERANCE[torch.float32]
    lines = [
        "# Op coverage through the xla device",
        "",
        "Generated by `python packages/core/tests/engine/opinfo_check.py docs/op-coverage.md`:",
        "every entry of PyTorch's OpInfo database (`op_db`), float32 / int64 / bool samples",
        f"(at most {SAMPLES_PER_OP} per op), forward and, for differentiable float32 ops,",
        f"backward, run on the xla device and compared with eager CPU (float32 rtol={rtol},",
        f"atol={atol}). Samples are drawn after `torch.manual_seed(0)`.",
        "",
        f"- (op, dtype) pairs eager CPU supports: {len(tested)}",
        f"- native (lowered, matches eager): {by_status['native']} ({native:.1%})",
        f"- CPU fallback (matches eager, runs `aten::` ops on the host): {by_status['fallback']}",
        f"- failing: {by_status['failing']}",
        "",
        "Rows that are not native say why (`ENGINE_FALLBACKS` / `ENGINE_FAILURES` in",
        "packages/core/tests/opinfo_expectations.py, which `pytest -m slow` holds the sweep",
        "to), then, in parentheses, the error or the `aten::` ops that ran on the host.",
        "",
        "| op | dtype | status | detail |",
        "|---|---|---|---|",
    ]
    for r in tested:
        detail = r.reason
        why = expectations.expected(_EXPECTED_BY_STATUS.get(r.status, {}), r.name, r.dtype)
        if why is not None:
            detail = f"{why[1]} ({detail})"
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
