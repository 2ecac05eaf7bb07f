"""Print, per OpInfo entry, whether its ATen ops are native / decomposed / missing / failing.

    python packages/core/tests/lowering/coverage_report.py [--dtypes N] [--samples N]
        [--only NAME ...] [--markdown]

Feeds docs/op-coverage.md. Statuses: native = every ATen op it dispatches has a lowering
that matches eager; decomposed = some op goes through a torch._decomp decomposition that
matches; fallback = an op's output shape depends on values (CPU by design); missing = an
op has neither (CPU fallback); failing = a lowering or decomposition
disagrees with eager or crashes (the reason follows).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

if not __package__:  # run as a script: make this folder importable as package `lowering`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    __package__ = "lowering"

from . import conftest  # noqa: E402,F401  (jax x64, cpu platform, like the tests)
from .sweep import op_db, opinfo_name, run_entry, supported_dtypes  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", type=int, default=1, help="dtypes per entry (default 1)")
    parser.add_argument("--samples", type=int, default=None, help="samples per entry")
    parser.add_argument("--only", nargs="*", help="OpInfo names to run")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    opts = parser.parse_args()
    totals = Counter()
    start = time.time()
    if opts.markdown:
        print("| OpInfo | dtype | status | detail |\n|---|---|---|---|")
    for info in op_db():
        name = opinfo_name(info)
        if opts.only and name not in opts.only:
            continue
        for dtype in supported_dtypes(info, opts.dtypes):
            result = run_entry(info, dtype, opts.samples)
            status = result.status if not result.error else "skipped"
            totals[status] += 1
            detail = _detail(result)
            dtype_name = str(dtype).replace("torch.", "")
            if opts.markdown:
                print(f"| {name} | {dtype_name} | {status} | {detail.replace('|', '/')} |")
            else:
                print(f"{name:45s} {dtype_name:9s} {status:10s} {detail}", flush=True)
    print(f"# {dict(totals)} in {time.time() - start:.0f}s", file=sys.stderr)
    return 0


def _detail(result) -> str:
    if result.error:
        return result.error
    if result.status == "failing":
        first = next(o for o in result.outcomes if o.status == "failing")
        return first.detail[:300].replace("\n", " ")
    if result.status == "missing":
        return "no lowering: " + ", ".join(sorted(result.ops("missing")))
    if result.status == "fallback":
        return "data-dependent shape: " + ", ".join(sorted(result.ops("fallback")))
    if result.status == "decomposed":
        return "via decomposition: " + ", ".join(sorted(result.ops("decomposed")))
    return ""


if __name__ == "__main__":
    sys.exit(main())
