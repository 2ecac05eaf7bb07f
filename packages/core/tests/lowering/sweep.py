"""Run PyTorch OpInfo samples under the LoweringChecker (shared by tests and the report)."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import torch

from .harness import LoweringChecker, Outcome

# Dtypes tried per OpInfo entry, in order; the first few the entry supports are used.
SWEEP_DTYPES = (torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.complex64)


@dataclasses.dataclass
class EntryResult:
    name: str  # OpInfo name, with variant ("nn.functional.conv2d", "max.reduction_no_dim")
    dtype: torch.dtype
    outcomes: list[Outcome]
    error: str = ""  # the sample itself failed in eager (not our problem), or no samples

    @property
    def status(self) -> str:
        statuses = {o.status for o in self.outcomes}
        for status in ("failing", "missing", "fallback", "decomposed", "native"):
            if status in statuses:
                return status
        return "skipped"

    def ops(self, status: str) -> Counter:
        return Counter(o.op for o in self.outcomes if o.status == status)


def opinfo_name(info) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db

    return db


def find(name: str):
    return next(info for info in op_db() if opinfo_name(info) == name)


def run_entry(info, dtype: torch.dtype, max_samples: int | None = None) -> EntryResult:
    name = opinfo_name(info)
    torch.manual_seed(0)  # the same samples whatever ran before: expectations are strict
    try:
        samples = info.sample_inputs("cpu", dtype, requires_grad=False)
        samples = list(itertools.islice(samples, max_samples))
    except Exception as err:  # noqa: BLE001 - OpInfo generators fail for odd dtypes
        return EntryResult(name, dtype, [], f"sample generation failed: {err}")
    checker = LoweringChecker()
    errors = []
    for sample in samples:
        with checker:
            try:
                info(sample.input, *sample.args, **sample.kwargs)
            except Exception as err:  # noqa: BLE001 - eager failures are not ours
                errors.append(f"{type(err).__name__}: {str(err)[:120]}")
    error = "" if checker.outcomes or not errors else f"eager failed: {errors[0]}"
    return EntryResult(name, dtype, checker.outcomes, error)


def supported_dtypes(info, limit: int) -> list[torch.dtype]:
    supported = info.supported_dtypes("cpu")
    return [d for d in SWEEP_DTYPES if d in supported][:limit]
