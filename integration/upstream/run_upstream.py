"""Run PyTorch/XLA's own test files (../shared/upstream, unmodified) as its run_tests.sh does,
print one line per run, and write docs/compatibility.md.

    python integration/upstream/run_upstream.py ../shared/upstream docs/compatibility.md

Each run starts from the file's folder with PJRT_DEVICE=CPU and CPU_NUM_DEVICES=1 (4 for
the multi-device files), and passes when it exits 0. Files that belong to features not
built yet are expected failures, each with its reason (`EXPECTED_FAILURES`); an expected
failure that passes is reported, so the list cannot go stale. Exit status: 0 when every
other run passed.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import api_report  # beside this file

HERE = pathlib.Path(__file__).resolve().parent
STANDINS = HERE / "standins"  # torchvision's import names (its wheels need CUDA torch)

# Files that test features of later issues: expected to fail until those land.
EXPECTED_FAILURES = {
    "test/spmd/": "SPMD is not built yet beyond meshes (xs.mark_sharding, the virtual "
    "device: issue 11)",
    "test/dynamo/test_dynamo.py": "(issue 12) 27 of 30 pass; torch 2.13's dynamo breaks the "
    "graph at torch._foobar and words its device error 'found at least two devices', and identical "
    "graphs share one program here (CompileTime 1, not 2)",
    "test/dynamo/test_dynamo_dynamic_shape.py": "(issue 12) 6 of 7 pass; torch 2.13's dynamo "
    "reuses one nn.Linear's dynamic graph for a second Linear (no new DynamoExtractCompiledGraph)",
    "test/pjrt/test_profiler.py": "its 1 s trace window opens 0.5 s before the first "
    "transfer and compile, which take longer here (first use of torch's functionalization "
    "imports torch.distributed.tensor; issue 12)",
}

# Files of this issue (10) that do not pass yet, each with what is missing: reported as
# "known failure", and like the expected failures, a pass is reported so the list stays true.
KNOWN_FAILURES = {
    "test/test_torch_distributed_xla_backend.py": "21 of 28 pass; 7 read the HLO text of "
    "collectives in a world of one process (XLA_ALWAYS_ALLREDUCE=1, and replica groups of a "
    "mocked world such as {{0,1},{2,3},{4,5}}): we record no collective in a world of one, "
    "and jax cannot lower groups larger than the real world",
}

# Files upstream's multi-device runs start with four CPU devices (run_tests.sh itself
# starts every file with one; pjrt/test_ddp.py stays at one here, as there: it also
# initializes torch.distributed from one thread per device of a process).
MULTI_DEVICE = ("test/test_mp_", "test/torch_distributed/",
                "test/test_torch_distributed_xla_backend.py")

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


@dataclasses.dataclass
class Run:
    file: str
    args: list[str]
    devices: str
    expected_failure: str | None
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
        expected = next((why for prefix, why in {**EXPECTED_FAILURES, **KNOWN_FAILURES}.items()
                         if file.startswith(prefix)), None)
        if file == MNIST:
            out += [Run(file, args, devices, expected) for args, devices in MNIST_RUNS]
        else:
            devices = "4" if file.startswith(MULTI_DEVICE) else "1"
            out += [Run(file, [], devices, expected, env) for env in VARIANTS.get(file, [{}])]
    return out


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "FAILED" in line or "failed" in line]
    return (errors or lines or ["no output"])[-1][:200]


def execute(run: Run, root: pathlib.Path) -> None:
    path = root / run.file
    env = {**os.environ, **RUN_TESTS_ENV, **run.env, "PJRT_DEVICE": "CPU",
           "CPU_NUM_DEVICES": run.devices,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(STANDINS),
                                                       os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, path.name, *run.args], cwd=path.parent, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
        passed, output = done.returncode == 0, done.stdout + done.stderr
        failure = f"exit {done.returncode}: {_last_error(output)}"
    except subprocess.TimeoutExpired:
        passed, failure = False, f"no result within {TIMEOUT} s"
    run.seconds = time.perf_counter() - start
    if run.expected_failure:
        known = run.file in KNOWN_FAILURES
        run.result = "unexpected pass" if passed else (
            "known failure" if known else "expected failure")
        run.reason = run.expected_failure if not passed else (
            f"remove it from {'KNOWN' if known else 'EXPECTED'}_FAILURES")
    else:
        run.result, run.reason = ("pass", "") if passed else ("FAIL", failure)


def report(all_runs: list[Run], source: str) -> str:
    passed = sum(r.result == "pass" for r in all_runs)
    failed = sum(r.result in ("FAIL", "unexpected pass") for r in all_runs)
    lines = [
        "# Compatibility with PyTorch/XLA's own tests",
        "",
        "Written by `nox -s upstream` (`integration/upstream/run_upstream.py`): each file of",
        f"`{source}` (PyTorch/XLA's tests, unmodified) run as its `test/run_tests.sh` runs it,",
        "from its folder with `PJRT_DEVICE=CPU`. A run passes when it exits 0.",
        "",
        f"{passed} passed, {failed} failed, "
        f"{sum(r.result == 'expected failure' for r in all_runs)} expected failures (features "
        "of issues 11 and 12), "
        f"{sum(r.result == 'known failure' for r in all_runs)} known failures (issue 10, "
        "not done yet; the reason says what is missing).",
        "",
        "| file | result | seconds | reason |",
        "|---|---|---|---|",
    ]
    for r in all_runs:
        reason = r.reason.replace("|", "\\|")
        lines.append(f"| `{r.name}` | {r.result} | {r.seconds:.0f} | {reason} |")
    return "\n".join(lines) + "\n"


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
    for run in all_runs:
        execute(run, root)
        print(f"{run.result:17} {run.seconds:6.0f} s  {run.name}  {run.reason}", flush=True)
    problems: list[str] = []
    if not only:
        out = pathlib.Path(argv[2])
        out.write_text(report(all_runs, argv[1]))
        problems = api_report.append_section(out)  # upstream's public API, module by module
        for problem in problems:
            print(f"API inventory: {problem}")
    bad = [r for r in all_runs if r.result in ("FAIL", "unexpected pass")]
    print(f"upstream: {sum(r.result == 'pass' for r in all_runs)} passed, {len(bad)} failed")
    return 1 if bad or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
