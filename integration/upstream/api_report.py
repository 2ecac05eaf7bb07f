"""Upstream PyTorch/XLA's public API against ours, module by module (docs/compatibility.md).

    python integration/upstream/api_report.py [MODULE ...]   # prints the section

Each module of `upstream_api.MODULES` is imported in a fresh Python process (so one that
fails to import is reported, not fatal) and each upstream name is looked up with
`hasattr`. Every missing name needs a reason in `REASONS`; one without is an error the
section prints in bold, and so is a reason left for a name that is now present, so the
list cannot go stale. Nothing here is hard-coded about our side: the counts are live.

`append_section(path)` adds the section to a written docs/compatibility.md and returns the
problems (names without a reason, stale reasons), empty when all is well.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

from upstream_api import MODULES, RELEASE, Module

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
TIMEOUT = 300  # seconds for one module's import
WORKERS = 4  # imports run side by side, each in its own process
MARK = "API_REPORT_PRESENT="  # prefix of the probe's answer line, whatever the import prints

# Runs in the child: import the module, answer which of the names (stdin, JSON) it has.
PROBE = f"""
import importlib, json, sys
names = json.load(sys.stdin)
module = importlib.import_module(sys.argv[1])
print({MARK!r} + json.dumps([n for n in names if hasattr(module, n)]))
"""

# Why an upstream name is missing here. Keys: (module, name) for one name, or a module for
# every missing name of that module and of its submodules; the most specific key wins.
ISSUE_11 = "belongs to issue 11 (SPMD)"
ISSUE_12 = "belongs to issue 12 (dynamo / profiler)"
TPU_ONLY = "TPU-only, comes from torch-xla-tpu"
NOT_BUILT = "not built yet: "
REASONS: dict[str | tuple[str, str], str] = {
    # whole modules
    "torch_xla.experimental.spmd_fully_sharded_data_parallel": ISSUE_11 + " (FSDP v2 over SPMD)",
    "torch_xla._dynamo": ISSUE_12,
    "torch_xla.core.dynamo_bridge": ISSUE_12,
    **{(module, n): "internals of upstream's bridge, which partitions the FX graph with "
       "its own passes and runs each part by graph hash; here `GraphFunction` traces the graph "
       "on the lazy engine and partitions it with torch's `CapabilityBasedPartitioner`"
       for module in ("torch_xla._dynamo.dynamo_bridge", "torch_xla.core.dynamo_bridge")
       for n in ("Deduper", "InputCollector", "SpecialReturnHandler",
                 "UnsupportedNodesCollector", "XLAConstructorMoverPass",
                 "extract_compiled_graph_helper", "extract_graph_helper",
                 "partition_fx_graph_for_cpu_fallback")},
    "torch_xla.experimental.custom_kernel": NOT_BUILT + "upstream's Pallas kernels for TPUs "
    "(paged and ragged attention, grouped matmul, int8 matmul: Mosaic custom calls for one "
    "chip family, whose place would be torch-xla-tpu) and the internals of its flash "
    "attention kernel; `flash_attention` itself is here, as XLA ops every device compiles",
    "torch_xla.distributed.data_parallel": NOT_BUILT + "thread-per-device `DataParallel`",
    "torch_xla.experimental.gradient_accumulation": "upstream's helper that builds the While "
    "loop with its C++ XLA builder; here the loop is a jax `fori_loop` (lazy/loop.py)",
    "torch_xla.core.xla_builder": "the callable wrappers behind upstream's `call_jax`, which "
    "lowers the JAX function to HLO and calls it as a separate computation; here `call_jax` "
    "inlines the JAX function into the step's program, so none is needed",
    ("torch_xla.experimental.assume_pure", "make_fake_inputs"): "internals of upstream's "
    "`assume_pure_torch` (placeholder tensors of its C++ lowering context); here "
    "`torch_xla.lazy.region` records over placeholders",
    ("torch_xla.experimental.assume_pure", "prepare_computation_inputs"): "internals of "
    "upstream's `assume_pure_torch` (parameter ids of its C++ lowering context); here "
    "`torch_xla.lazy.region` records over placeholders",
    "torch_xla.utils.checkpoint": "upstream's recomputation bookkeeping and CUDA "
    "device-state helpers; here the RNG replay saves the device RNG position itself",
    # torch_xla
    ("torch_xla", "eager_mode"): "upstream binds it here only when XLA_USE_EAGER_DEBUG_MODE=1 "
    "(an import-time side effect); `torch_xla.experimental.eager_mode` is the API",
    # torch_xla.core.xla_env_vars: TPU runtime variables, read by torch-xla-tpu
    **{("torch_xla.core.xla_env_vars", n): TPU_ONLY for n in (
        "ACCELERATOR_TYPE", "CLOUD_TPU_TASK_ID", "TPUVM_MODE", "TPU_ACCELERATOR_TYPE",
        "TPU_CHIPS_PER_HOST_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_HOST_BOUNDS",
        "TPU_MESH_CTLER_ADDR", "TPU_MESH_CTLER_PORT", "TPU_NUM_DEVICES", "TPU_PROCESS_ADDRESSES",
        "TPU_PROCESS_BOUNDS", "TPU_PROCESS_PORT", "TPU_SKIP_MDS_QUERY", "TPU_VISIBLE_CHIPS",
        "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID", "WORKER_ID")},
    ("torch_xla.core.xla_env_vars", "PJRT_DYNAMIC_PLUGINS"): NOT_BUILT + "the constant; "
    "plugins are always dynamic here, so nothing reads the variable",
    # torch_xla.core.xla_model
    ("torch_xla.core.xla_model", "CoalescingBuckets"): NOT_BUILT + "upstream's bucketing "
    "helper class; `all_reduce_bucketized_gradients` buckets gradients itself, and the other "
    "`*_bucketized` collectives leave merging to XLA's combiner passes",
    ("torch_xla.core.xla_model", "DeviceContext"): NOT_BUILT + "upstream's per-device "
    "state record for its thread-per-device mode; state here is per process",
    ("torch_xla.core.xla_model", "send"): NOT_BUILT + "XLA Send/Recv point-to-point ops",
    ("torch_xla.core.xla_model", "recv"): NOT_BUILT + "XLA Send/Recv point-to-point ops",
    # torch_xla.distributed
    ("torch_xla.distributed.parallel_loader", "PerDeviceQueue"): NOT_BUILT + "upstream's "
    "internal queue class of `ParallelLoader`",
    ("torch_xla.distributed.xla_multiprocessing", "create_optimized_replica_groups"): TPU_ONLY
    + " (replica-group orders for TPU v5p/v6e topologies)",
    ("torch_xla.distributed.xla_multiprocessing", "device_kind_handler_dict"): TPU_ONLY
    + " (replica-group orders for TPU v5p/v6e topologies)",
    # torch_xla.runtime, torch_xla.utils
}


@dataclasses.dataclass(frozen=True)
class ModuleResult:
    module: str
    upstream: Module
    present: tuple[str, ...]
    import_error: str | None = None

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(n for n in self.upstream.names if n not in self.present)


def check_module(module: str, upstream: Module, python: str = sys.executable) -> ModuleResult:
    """Import `module` in a fresh process and return which of `upstream.names` it has."""
    try:
        done = subprocess.run([python, "-c", PROBE, module], input=json.dumps(upstream.names),
                              capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    except subprocess.TimeoutExpired:
        return ModuleResult(module, upstream, (), f"import did not finish within {TIMEOUT} s")
    answers = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not answers:
        return ModuleResult(module, upstream, (), _last_error(done.stderr + done.stdout))
    present = set(json.loads(answers[-1][len(MARK):]))
    return ModuleResult(module, upstream, tuple(n for n in upstream.names if n in present))


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines or ["exited without output"])[-1][:200]


def check_all(modules: Mapping[str, Module] = MODULES) -> list[ModuleResult]:
    """Every module of `modules`, sorted by name."""
    names = sorted(modules)
    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(lambda m: check_module(m, modules[m]), names))


def reason_for(module: str, name: str,
               reasons: Mapping[str | tuple[str, str], str] = REASONS) -> str | None:
    if (module, name) in reasons:
        return reasons[(module, name)]
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in reasons:
            return reasons[".".join(parts[:end])]
    return None


def unexplained(results: Iterable[ModuleResult],
                reasons: Mapping[str | tuple[str, str], str] = REASONS) -> list[str]:
    """`module.name` for every missing name without a reason."""
    return [f"{r.module}.{n}" for r in results for n in r.missing
            if reason_for(r.module, n, reasons) is None]


def stale_reasons(results: Iterable[ModuleResult],
                  reasons: Mapping[str | tuple[str, str], str] = REASONS) -> list[str]:
    """Reasons keyed by (module, name) whose name is not missing (present, or not upstream's)."""
    missing = {(r.module, n) for r in results for n in r.missing}
    checked = {r.module for r in results}
    return sorted(f"{key[0]}.{key[1]}" for key in reasons
                  if isinstance(key, tuple) and key[0] in checked and key not in missing)


HEADING = "## Upstream API, module by module"


def render(results: list[ModuleResult],
           reasons: Mapping[str | tuple[str, str], str] = REASONS) -> str:
    total = sum(len(r.upstream.names) for r in results)
    present = sum(len(r.present) for r in results)
    lines = [
        HEADING,
        "",
        f"Written by `integration/upstream/api_report.py`: each public name of PyTorch/XLA "
        f"{RELEASE}'s modules",
        "(`integration/upstream/upstream_api.py`, with the upstream file each list was read "
        "from) looked up",
        "with `hasattr` on our module, imported in a fresh process.",
        "",
        f"{present} of {total} names present in {len(results)} modules.",
        "",
    ]
    lines += _problems(results, reasons)
    for r in sorted(results, key=lambda r: r.module):
        lines += _module_section(r, reasons)
    return "\n".join(lines) + "\n"


def _problems(results: list[ModuleResult], reasons: Mapping) -> list[str]:
    out = []
    if bad := unexplained(results, reasons):
        out += [f"**ERROR: {len(bad)} missing names have no reason** (add them to `REASONS` in "
                f"`integration/upstream/api_report.py`): {', '.join(bad)}", ""]
    if stale := stale_reasons(results, reasons):
        out += [f"**ERROR: {len(stale)} reasons name a name that is not missing** (remove them "
                f"from `REASONS`): {', '.join(stale)}", ""]
    return out


def _module_section(r: ModuleResult, reasons: Mapping) -> list[str]:
    lines = [f"### `{r.module}`: {len(r.present)} of {len(r.upstream.names)} present", "",
             f"Upstream: `{r.upstream.path}`."]
    if r.import_error:
        lines.append(f"Our module does not import: `{r.import_error}`.")
    lines.append("")
    if not r.missing:
        return lines
    by_reason: dict[str, list[str]] = {}
    for name in r.missing:
        why = reason_for(r.module, name, reasons) or "**NO REASON: add one to `REASONS`**"
        by_reason.setdefault(why, []).append(name)
    lines += ["| missing | reason |", "|---|---|"]
    for why, names in sorted(by_reason.items()):
        cell = why.replace("|", "\\|")
        lines.append(f"| {', '.join(f'`{n}`' for n in names)} | {cell} |")
    return lines + [""]


def append_section(path: pathlib.Path) -> list[str]:
    """Append the section to `path` (a written docs/compatibility.md), in place of one
    already there; return the problems."""
    results = check_all()
    text = path.read_text()
    kept = text.split("\n" + HEADING + "\n", 1)[0].rstrip("\n") + "\n"
    path.write_text(kept + "\n" + render(results))
    return unexplained(results) + stale_reasons(results)


def main(argv: list[str]) -> int:
    chosen = {m: MODULES[m] for m in argv[1:]} if argv[1:] else MODULES
    results = check_all(chosen)
    print(render(results), end="")
    return 1 if unexplained(results) or stale_reasons(results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
