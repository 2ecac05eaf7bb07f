"""Run PyTorch/XLA's own test files (../shared/upstream, unmodified) as its run_tests.sh does,
print one line per run, and write docs/compatibility.md.

    python integration/upstream/run_upstream.py ../shared/upstream docs/compatibility.md

Each run starts from the file's folder with PJRT_DEVICE=CPU and CPU_NUM_DEVICES=1 (4 for
the multi-device files), and passes when it exits 0. Files that test features not built
yet are expected failures, each with the tests that fail in it and why
(`EXPECTED_FAILURES`): such a run counts as an expected failure only when unittest reports
exactly those tests failing, so a regression elsewhere in the file fails the run, and a
listed test that passes is reported so the list cannot go stale. Exit status: 0 when every
run passed or failed exactly as expected.

Runs go two at a time on two cores or more (TORCH_XLA_UPSTREAM_JOBS sets how many), the
longest of the last report first; lines and the report keep the runs' own order.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import api_report  # beside this file

HERE = pathlib.Path(__file__).resolve().parent
STANDINS = HERE / "standins"  # torchvision's import names (its wheels need CUDA torch)

# Files that test features of later issues, each with the tests that fail in it (unittest's
# `Class.test` names) and why. The run is an "expected failure" only when exactly these fail:
# another failing test, a crash, or one of these passing is reported (FAIL / unexpected pass).
@dataclasses.dataclass(frozen=True)
class Expected:
    failing: frozenset[str]
    why: str


EXPECTED_FAILURES = {
    "test/spmd/test_xla_sharding.py": Expected(frozenset({
        "BasicXlaShardingTest.test_mark_sharding_ir",
        "BasicXlaShardingTest.test_backward_optimization_barrier",
        "BasicXlaShardingTest.test_sharding_propagation",
        "BasicXlaShardingTest.test_fallback"}),
        "(issue 11) 2 compare PyTorch/XLA's own HLO text where XLA's StableHLO-to-HLO "
        "conversion (the only way jaxlib prints HLO) canonicalizes: it folds `x += 0` away "
        "(test_mark_sharding_ir) and turns the transpose of a [64,1] gradient into a reshape, "
        "so the barrier's tuple shows layout {1,0}, not {0,1}, and is numbered %tuple.1 "
        "(test_backward_optimization_barrier); test_sharding_propagation expects XLA's GSPMD "
        "to shard an output that jax's partitioner (Shardy, and GSPMD through jax too) leaves "
        "replicated; test_fallback expects torch.polar's result kept on the host (ours is "
        "lowered and stays pending on the device)"),
    "test/spmd/test_fsdp_v2.py": Expected(frozenset({"FSDPv2Test.test_fsdp_v2_basic"}),
        "(issue 11) test_fsdp_v2_basic compares the exact HLO text of the backward "
        "optimization barrier, where XLA's conversion prints the [1,64] gradient's transpose "
        "as a reshape (layout {1,0}, not {0,1}) and numbers the tuple %tuple.1"),
    "test/dynamo/test_dynamo.py": Expected(frozenset({
        "DynamoCpuFallbackTest.test_operator_fallback",
        "DynamoCpuFallbackTest.test_fallback_multiple_submodules",
        "DynamoErrorMessageTest.test_mixed_cpu_tensor"}),
        "(issue 12) dynamo breaks the graph at torch._foobar (no meta kernel: fake-tensor "
        "propagation runs its real kernel with Python dispatch off, where a backend written "
        "in Python has no kernels, and torch's Python fallback for a backend key asserts on "
        "our tensors), torch 2.13 words its device error 'found at least two devices', and "
        "identical graphs share one program here (CompileTime 1, not 2)"),
    "test/dynamo/test_dynamo_dynamic_shape.py": Expected(frozenset({
        "DynamoDynamicShapeBasicTest.test_dynamic_shape_mix_with_non_dynamic"}),
        "(issue 12) torch 2.13's dynamo reuses one nn.Linear's dynamic graph for a second "
        "Linear (no new DynamoExtractCompiledGraph)"),
}

# Files of this issue (10) that do not pass yet, in the same form: reported as "known
# failure", checked test by test as the expected failures are.
KNOWN_FAILURES: dict[str, Expected] = {
}

# Files upstream's multi-device runs start with four CPU devices (run_tests.sh itself
# starts every file with one; pjrt/test_ddp.py stays at one here, as there: it also
# initializes torch.distributed from one thread per device of a process).
MULTI_DEVICE = ("test/test_mp_", "test/torch_distributed/",
                "test/test_torch_distributed_xla_backend.py",
                # SPMD files as upstream's TPU CI runs them, over several devices (its CPU
                # run_tests.sh gives test_xla_sharding one, where most of it is skipped)
                "test/spmd/test_xla_sharding.py", "test/spmd/test_fsdp_v2.py",
                "test/spmd/test_sharding_strategies.py")

# Files left out of CI for their length (each measured; LONG_RUNS_ENV=1 runs them, as
# pass/FAIL): reported as "not run" with the reason.
LONG_RUNS = {
    "test/spmd/test_train_spmd_linear_model.py": "(issue 11) trains a 141M-parameter model "
    "5 times (64 steps of batch 128 each): about 4 min per 8 steps on this 2-core CPU while "
    "shared, over an hour in all; its parts (SPMD, utils.checkpoint, gradient "
    "accumulation's While loop) are tested in packages/core/tests and passed this file's "
    "comparisons at input_dim 64",
}
LONG_RUNS_ENV = "TORCH_XLA_UPSTREAM_LONG"

# Arguments a run gets: files whose defaults size a TPU pod job (upstream's CI does not run
# test_sharding_strategies; its defaults hold a 2 GB batch and 4 layers of 2048 x 8192).
ARGS = {
    "test/spmd/test_sharding_strategies.py": ["--batch_size", "16", "--embedding_dimension",
                                               "128", "--num_layers", "2"],
}

MNIST = "test/test_train_mp_mnist.py"
MNIST_RUNS = [  # (arguments, CPU_NUM_DEVICES)
    (["--fake_data", "--num_epochs", "1"], "1"),
    (["--fake_data", "--num_epochs", "1"], "4"),
    (["--fake_data", "--num_epochs", "1", "--ddp"], "4"),
    (["--fake_data", "--num_epochs", "1", "--pjrt_distributed"], "4"),
]
# Files run_tests.sh runs more than once, each time with extra variables.
VARIANTS = {
    "test/test_data_type.py": [{}, {"XLA_USE_BF16": "1"}, {"XLA_DOWNCAST_BF16": "1"}],
    # Upstream's CPU client drives every CPU device from one process (one thread each), and
    # this file checks that layout; our CPU plugin starts one process per device unless
    # CPU_DEVICES_PER_PROCESS asks for threads (docs/guide/distributed.md).
    "test/pjrt/test_runtime_multi_cpu.py": [{"CPU_DEVICES_PER_PROCESS": "all"}],
}
# What run_tests.sh exports for every run.
RUN_TESTS_ENV = {"TRIM_GRAPH_SIZE": "500", "TRIM_GRAPH_CHECK_FREQUENCY": "100",
                 "PYTORCH_TEST_WITH_SLOW": "1", "XLA_DUMP_FATAL_STACK": "1"}
TIMEOUT = 1200  # seconds per run
# Runs at a time (each its own processes; the files use free ports or fixed ports of their
# own: pjrt/test_ddp 12355, pjrt/test_profiler 9012, test_profiler_session 8005). The
# default is one per core, at most 2: a multi-device run already starts 4 processes.
JOBS_ENV = "TORCH_XLA_UPSTREAM_JOBS"


@dataclasses.dataclass
class Run:
    file: str
    args: list[str]
    devices: str
    expected: Expected | None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    result: str = ""
    reason: str = ""
    seconds: float = 0.0

    @property
    def name(self) -> str:
        extra = " ".join(self.args)
        env = "".join(f" {k}={v}" for k, v in self.env.items())
        return f"{self.file}{' ' + extra if extra else ''} (CPU_NUM_DEVICES={self.devices}{env})"


def runs(listed: list[str]) -> list[Run]:
    out = []
    for file in listed:
        expected = next((e for prefix, e in {**EXPECTED_FAILURES, **KNOWN_FAILURES}.items()
                         if file.startswith(prefix)), None)
        if file == MNIST:
            out += [Run(file, args, devices, expected) for args, devices in MNIST_RUNS]
        else:
            devices = "4" if file.startswith(MULTI_DEVICE) else "1"
            out += [Run(file, ARGS.get(file, []), devices, expected, env)
                    for env in VARIANTS.get(file, [{}])]
    return out


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "FAILED" in line or "failed" in line]
    return (errors or lines or ["no output"])[-1][:200]


# unittest's report of a failing test: `FAIL: test_x (__main__.Class.test_x)`, or
# `ERROR: setUpClass (__main__.Class)` for a class that failed to set up.
_FAILED_TEST = re.compile(r"^(?:FAIL|ERROR): (\S+) \(([^)\s]+)\)", re.M)
_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_SKIPPED = re.compile(r"^FAILED \(.*\bskipped=(\d+)", re.M)


def failed_tests(output: str) -> frozenset[str] | None:
    """The `Class.test` names unittest reports failing in `output`, or None when the output
    has no unittest summary (the run crashed, hung or is not a unittest run)."""
    if not _RAN.search(output):
        return None
    names = set()
    for test, where in _FAILED_TEST.findall(output):
        where = where.removeprefix("__main__.")
        names.add(where if where.endswith("." + test) else f"{where}.{test}")
    return frozenset(names)


def judge(expected: Expected, known: bool, returncode: int | None, output: str,
          failure: str) -> tuple[str, str]:
    """The result and reason of a run of a file listed with the tests expected to fail in
    it (`returncode` None: it timed out): "expected failure" (or "known failure") only when
    it exited 1, as upstream's files do after failing tests, and exactly those failed."""
    label = "known failure" if known else "expected failure"
    table = "KNOWN_FAILURES" if known else "EXPECTED_FAILURES"
    if returncode == 0:
        return "unexpected pass", f"every test passes: remove the file from {table}"
    failed = failed_tests(output)
    if failed is None or returncode != 1:
        return "FAIL", f"{failure} (it did not finish its tests and exit 1)"
    if failed - expected.failing:
        return "FAIL", (f"failing beyond {table}: {', '.join(sorted(failed - expected.failing))}"
                        f" ({failure})")
    if expected.failing - failed:
        return "unexpected pass", (f"{', '.join(sorted(expected.failing - failed))} now "
                                   f"pass: remove them from {table}")
    skipped = _SKIPPED.findall(output)
    ran = int(_RAN.findall(output)[-1]) - int(skipped[-1] if skipped else 0)
    return label, (f"{ran - len(failed)} of {ran} run tests pass (skipped ones not counted); "
                   f"failing: {', '.join(sorted(failed))}. {expected.why}")


def execute(run: Run, root: pathlib.Path) -> None:
    if run.file in LONG_RUNS and not os.environ.get(LONG_RUNS_ENV):
        run.result, run.reason = "not run", f"{LONG_RUNS[run.file]} (run it with {LONG_RUNS_ENV}=1)"
        return
    path = root / run.file
    env = {**os.environ, **RUN_TESTS_ENV, **run.env, "PJRT_DEVICE": "CPU",
           "CPU_NUM_DEVICES": run.devices,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(STANDINS),
                                                       os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, path.name, *run.args], cwd=path.parent, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
        returncode, output = done.returncode, done.stdout + done.stderr
        failure = f"exit {done.returncode}: {_last_error(output)}"
    except subprocess.TimeoutExpired:
        returncode, output, failure = None, "", f"no result within {TIMEOUT} s"
    run.seconds = time.perf_counter() - start
    if run.expected:
        run.result, run.reason = judge(run.expected, run.file in KNOWN_FAILURES, returncode,
                                       output, failure)
    else:
        run.result, run.reason = ("pass", "") if returncode == 0 else ("FAIL", failure)


def report(all_runs: list[Run], source: str) -> str:
    passed = sum(r.result == "pass" for r in all_runs)
    failed = sum(r.result in ("FAIL", "unexpected pass") for r in all_runs)
    lines = [
        "# Compatibility with PyTorch/XLA's own tests",
        "",
        "Written by `nox -s upstream` (`integration/upstream/run_upstream.py`): each file of",
        f"`{source}` (PyTorch/XLA's tests, unmodified) run as its `test/run_tests.sh` runs it,",
        "from its folder with `PJRT_DEVICE=CPU`. A run passes when it exits 0; an expected",
        "failure is a run where exactly the listed tests failed (named in its reason); seconds",
        f"are its wall time, {jobs()} run(s) at a time (`{JOBS_ENV}`).",
        "",
        f"{passed} passed, {failed} failed, "
        f"{sum(r.result == 'expected failure' for r in all_runs)} expected failures (features "
        "of issues 11 and 12), "
        f"{sum(r.result == 'known failure' for r in all_runs)} known failures (issue 10, "
        "not done yet; the reason says what is missing), "
        f"{sum(r.result == 'not run' for r in all_runs)} not run for their length "
        f"({LONG_RUNS_ENV}=1 runs them).",
        "",
        "| file | result | seconds | reason |",
        "|---|---|---|---|",
    ]
    for r in all_runs:
        reason = r.reason.replace("|", "\\|")
        lines.append(f"| `{r.name}` | {r.result} | {r.seconds:.0f} | {reason} |")
    return "\n".join(lines) + "\n"


def jobs() -> int:
    """TORCH_XLA_UPSTREAM_JOBS, else one run per core, at most 2."""
    text = os.environ.get(JOBS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise SystemExit(f"{JOBS_ENV}={text!r} is not a number of runs at a time; set a "
                             "positive integer (1 runs one file at a time) or unset it.")
        return int(text)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, 2))


def previous_seconds(report_path: pathlib.Path) -> dict[str, float]:
    """Each run's seconds in the last report (`| `name` | result | seconds |` rows), if any."""
    if not report_path.is_file():
        return {}
    rows = re.findall(r"^\| `(.+?)` \| [^|]+ \| (\d+) \|", report_path.read_text(), re.M)
    return {name: float(seconds) for name, seconds in rows}


def execute_all(all_runs: list[Run], root: pathlib.Path, workers: int,
                estimates: dict[str, float]) -> None:
    """Execute the runs `workers` at a time, the longest of the last report first (runs it
    lacks before all: new ones may be long), so that no long run starts last. Lines are
    printed in the runs' own order, each once it and every run before it are done, so the
    output does not depend on which run finishes first."""
    order = sorted(range(len(all_runs)),
                   key=lambda i: -estimates.get(all_runs[i].name, float("inf")))
    done = [False] * len(all_runs)
    printed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(execute, all_runs[i], root): i for i in order}
        for future in concurrent.futures.as_completed(futures):
            future.result()  # raises only for a bug of this script, not for a failing run
            done[futures[future]] = True
            while printed < len(all_runs) and done[printed]:
                run = all_runs[printed]
                print(f"{run.result:17} {run.seconds:6.0f} s  {run.name}  {run.reason}",
                      flush=True)
                printed += 1


def with_symlinks_restored(root: pathlib.Path, work: pathlib.Path) -> pathlib.Path:
    """A copy of `root` in `work` where each file that only holds a relative path to a
    sibling file (a symlink of upstream's repository, flattened when copied: e.g.
    test/pjrt/args_parse.py holds `../args_parse.py`) is that symlink again. The test
    files themselves are unchanged."""
    copy = work / root.name
    shutil.copytree(root, copy, symlinks=True)
    for path in copy.rglob("*.py"):
        if path.stat().st_size > 200:
            continue
        target = path.read_text().strip()
        if target.endswith(".py") and "\n" not in target and (path.parent / target).is_file():
            path.unlink()
            path.symlink_to(target)
    return copy


def main(argv: list[str]) -> int:
    source = pathlib.Path(argv[1]).resolve()
    listed = [line.strip() for line in (source / "list.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    only = argv[3:]  # optional: run only files containing one of these strings
    all_runs = [r for r in runs(listed) if not only or any(o in r.file for o in only)]
    work = tempfile.TemporaryDirectory(prefix="upstream-tests-")
    root = with_symlinks_restored(source, pathlib.Path(work.name))
    out = pathlib.Path(argv[2])
    execute_all(all_runs, root, jobs(), previous_seconds(out))
    problems: list[str] = []
    if not only:
        out.write_text(report(all_runs, argv[1]))
        problems = api_report.append_section(out)  # upstream's public API, module by module
        for problem in problems:
            print(f"API inventory: {problem}")
    bad = [r for r in all_runs if r.result in ("FAIL", "unexpected pass")]
    print(f"upstream: {sum(r.result == 'pass' for r in all_runs)} passed, {len(bad)} failed")
    return 1 if bad or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
