"""One test matrix for every package: `nox -t tests -p 3.11` runs what CI runs.

Sessions (each in its own virtualenv, so every package is tested as installed):
  core-<py>                    the core package's tests
  plugin-<py>(plugin=NAME)     one plugin package's tests
  conformance-<py>(plugin=NAME) the conformance kit on NAME's device; skipped without hardware
  integration-<py>             cross-package tests: wheels, real models, every installed plugin
  lint                         ruff over the whole tree
  main                         the README's main job
  upstream                     PyTorch/XLA's own test files; writes docs/compatibility.md
  slow                         the long runs CI leaves out (pytest -m slow): full OpInfo
                               sweeps, the ten-fold xmp.spawn race repeats
  coverage                     regenerate docs/op-coverage.md from the full OpInfo sweep
"""

from __future__ import annotations

import os
import subprocess
import sys

import nox

PYTHONS = ["3.10", "3.11", "3.12"]
# torch 2.13.0 is the oldest torch the core supports; CI tests exactly that floor.
TORCH = os.environ.get("TORCH_XLA_TEST_TORCH", "torch==2.13.0")
# The jax/jaxlib release the suite is tested with (the core accepts newer ones).
JAX = ["jax==0.10.2", "jaxlib==0.10.2"]
PLUGINS = ["cpu", "tpu", "cuda", "neuron", "template"]
# Test extras of our packages (installed with the package). The core's brings what its
# tests need beyond pytest (expecttest; graphviz-pure, the `dot` that renders the dot
# dumps; pytest-xdist, which runs every session's tests in workers()): nothing comes from
# the machine, so CI (`.ci/run`) installs nothing itself.
EXTRAS = {"core": "[test]"}
# Extra requirements a plugin's tests need beyond its own dependencies.
# The Neuron tests stand a real PJRT CPU library in for libneuronxla's.
# The CUDA tests load jax's real CUDA PJRT library of the tested jax release (no GPU
# needed: without one it must fail fast and clearly): a 124 MB download, 401 MB installed
# (jax-cuda12-pjrt would be 174 MB / 480 MB).
PLUGIN_EXTRAS = {
    "neuron": ["lammps-jax-pjrt-cpu"],
    "cuda": [f"jax-cuda13-pjrt=={JAX[0].partition('==')[2]}"],
}

nox.options.error_on_missing_interpreters = True
# uv makes a session's environment in seconds; plain virtualenv + pip when uv is absent.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = []  # choose explicitly: `nox -t tests -p 3.11`, `nox -s main`


def find_links() -> list[str]:
    """Local wheel folders pip is configured with (uv does not read pip's settings)."""
    folders = os.environ.get("PIP_FIND_LINKS") or subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
        capture_output=True, text=True, check=False,
    ).stdout
    return [arg for folder in folders.split() for arg in ("--find-links", folder)]


def install(session: nox.Session, *packages: str) -> None:
    """Torch first (pinned), then our packages from this checkout, editable."""
    session.install(*find_links(), TORCH, *JAX, "pytest")
    session.install(*(arg for p in packages for arg in ("-e", f"packages/{p}{EXTRAS.get(p, '')}")))


def workers() -> int:
    """Test processes for a session: TORCH_XLA_TEST_WORKERS, else one per core, at most 4
    (each holds torch and a jax client; most tests start fresh Pythons of their own)."""
    if os.environ.get("TORCH_XLA_TEST_WORKERS"):
        return int(os.environ["TORCH_XLA_TEST_WORKERS"])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return min(cores or 1, 4)


def pytest(session: nox.Session, *paths: str, env: dict[str, str] | None = None,
           parallel: bool = True) -> None:
    """pytest on `paths`; `parallel`: in workers() pytest-xdist processes (the core's [test]
    extra), each test file whole on one worker (--dist loadfile: a file's module fixtures
    run once and its tests in order). One worker (or `-- -n 0`) runs in this process."""
    report = []
    if os.environ.get("TORCH_XLA_JUNIT_DIR"):  # CI sums these into one closing line
        report = [f"--junitxml={os.environ['TORCH_XLA_JUNIT_DIR']}/{session.name}.xml"]
    xdist = ["-n", str(workers()), "--dist", "loadfile"] if parallel and workers() > 1 else []
    session.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, *report, *paths,
        *session.posargs, env=env,
    )


@nox.session(python=PYTHONS, tags=["tests"])
def core(session: nox.Session) -> None:
    install(session, "core", "plugin-cpu")
    pytest(session, "packages/core/tests")


def plugin_packages(plugin: str) -> list[str]:
    return ["core", "plugin-cpu"] + ([] if plugin == "cpu" else [f"plugin-{plugin}"])


@nox.session(python=PYTHONS, tags=["tests"])
@nox.parametrize("plugin", PLUGINS)
def plugin(session: nox.Session, plugin: str) -> None:
    install(session, *plugin_packages(plugin))
    if PLUGIN_EXTRAS.get(plugin):
        session.install(*find_links(), *PLUGIN_EXTRAS[plugin])
    pytest(session, f"packages/plugin-{plugin}/tests")


@nox.session(python=PYTHONS, tags=["tests"])
@nox.parametrize("plugin", PLUGINS)
def conformance(session: nox.Session, plugin: str) -> None:
    """The conformance kit on NAME's real device. Without its hardware: skipped, not passed."""
    install(session, *plugin_packages(plugin))
    if PLUGIN_EXTRAS.get(plugin):
        session.install(*find_links(), *PLUGIN_EXTRAS[plugin])
    probe = f"import torch_xla.plugins as p; print(p.get_plugin({plugin!r}).hardware_present())"
    present = session.run("python", "-c", probe, silent=True).strip().splitlines()[-1]
    if present != "True":
        session.skip(f"no {plugin.upper()} hardware on this machine; nothing was tested")
    session.run("torch-xla", "plugins", "--devices", env={"PJRT_DEVICE": plugin})
    env = {"PJRT_DEVICE": plugin}
    if plugin == "cpu":  # two CPU devices, so the kit's collectives run across processes
        env["CPU_NUM_DEVICES"] = "2"
    args = ["--pyargs", "torch_xla.testing.conformance"]
    if plugin == "template":
        # The template's stand-in library (lammps-jax-pjrt-cpu, XLA's CPU PJRT plugin
        # built on its own) carries no LAPACK custom calls, so linear algebra cannot
        # compile on it ("No FFI handler registered for lapack_sgetrf_ffi"); a vendor's
        # library must pass test_linalg.py (packages/plugin-template/README.md).
        args += ["-k", "not test_linalg_matches_eager"]
    # One process: a real device is opened by one process at a time.
    pytest(session, *args, env=env, parallel=False)


# transformers' Trainer as PyTorch/XLA users run it (integration/test_hf_trainer.py);
# pinned, so that a new release cannot change what the test runs.
HF_TRAINER = ("transformers==5.24.0", "accelerate==1.15.0")


@nox.session(python=PYTHONS, tags=["tests"])
def integration(session: nox.Session) -> None:
    install(session, "core", "plugin-cpu")
    session.install("build", "hatchling", "scikit-learn", *HF_TRAINER)
    pytest(session, "integration")


@nox.session(python="3.11")
def main(session: nox.Session) -> None:
    """The main job: train a CNN on scikit-learn's digits on the default plugin (the CPU)."""
    install(session, "core", "plugin-cpu")
    session.install("scikit-learn")  # ships the digits data set: no download
    session.run("torch-xla", "plugins")
    session.run("python", "examples/train_digits.py", *session.posargs)


@nox.session(python="3.11", tags=["tests"])
def upstream(session: nox.Session) -> None:
    """PyTorch/XLA's own test files (../shared/upstream, unmodified) as its run_tests.sh runs
    them; writes docs/compatibility.md (test results and upstream's API, module by module).
    Fails on any failing file outside the expected failures, on an expected-failure file
    where other tests fail than the ones listed by name or a listed one passes, and on a
    missing upstream name without a reason."""
    install(session, "core", "plugin-cpu")
    # torch_xla._internal.tpu, which upstream keeps in its core, comes from the TPU plugin
    # package (it imports without libtpu or a TPU; PJRT_DEVICE=CPU still picks the CPU).
    session.install("--no-deps", "-e", "packages/plugin-tpu")
    session.install("absl-py", "expecttest", "rich", "tensorboard")  # upstream's test deps
    shared = os.environ.get("TORCH_XLA_UPSTREAM_TESTS", "../shared/upstream")
    session.run("python", "integration/upstream/run_upstream.py", shared,
                "docs/compatibility.md", *session.posargs)


@nox.session(python="3.11")
def slow(session: nox.Session) -> None:
    """The full OpInfo sweeps and long matrices that CI deselects (about an hour here)."""
    install(session, "core", "plugin-cpu")
    pytest(session, "-m", "slow", "packages/core/tests")


@nox.session(python="3.11")
def coverage(session: nox.Session) -> None:
    """Rewrite docs/op-coverage.md: every OpInfo entry through the xla device (30+ min)."""
    install(session, "core", "plugin-cpu")
    session.run("python", "packages/core/tests/engine/opinfo_check.py", "docs/op-coverage.md")


@nox.session(python="3.11", tags=["tests"])
def lint(session: nox.Session) -> None:
    """ruff over every package, tests and tools (settings in .ruff.toml)."""
    session.install("ruff")
    session.run("ruff", "check", ".")
