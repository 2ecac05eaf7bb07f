"""forked_python.run against the real interpreter it stands in for: the same programs give
the same status, stdout and stderr, forked or fresh."""

from __future__ import annotations

import os
import subprocess
import sys

import forked_python
import pytest

PROGRAMS = {
    "argv and main": ("import sys, os\n"
                      "print(sys.argv, repr(sys.path[0]), __name__, os.getcwd())\n"
                      "print(sorted(k for k in globals() if k != '__builtins__'))", ["a", "b"]),
    "traceback": ("def f():\n    raise ValueError('boom')\nf()", []),
    "exit with a message": ("import sys\nsys.exit('stopped here')", []),
    "exit with a status": ("import sys\nprint('out')\nsys.exit(3)", []),
    "killed by a signal": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", []),
    "threads and atexit at the end": (
        "import atexit, threading, time\n"
        "atexit.register(print, 'atexit')\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread'))).start()", []),
    "stdin is empty": ("import sys\nprint(repr(sys.stdin.read()))", []),
    "the variables": ("import os\nprint(os.environ['TORCH_XLA_TEST_VALUE'], "
                      "os.environ.get('PJRT_DEVICE'))", []),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_forked_run_is_a_fresh_one(name, tmp_path, monkeypatch):
    code, args = PROGRAMS[name]
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "TORCH_XLA_TEST_VALUE": name}
    env.pop("PJRT_DEVICE", None)
    forked = forked_python.run(["-c", code, *args], env=env, timeout=120)
    fresh = forked_python.run(["-c", code, *args], env=env, timeout=120, fresh=True)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode, fresh.stdout, fresh.stderr)


def test_torch_comes_preloaded_and_torch_xla_does_not():
    code = "import sys\nprint('torch' in sys.modules, 'torch_xla' in sys.modules)"
    assert forked_python.run(["-c", code], timeout=120).stdout == "True False\n"
    fresh = forked_python.run(["-c", code], timeout=120, fresh=True)
    assert fresh.stdout == "False False\n"


@pytest.mark.parametrize(("variable", "forked"), [
    ("PJRT_DEVICE", True), ("XLA_IR_DEBUG", True), ("RANK", True),
    ("JAX_ENABLE_X64", False), ("XLA_FLAGS", False), ("PYTHONPATH", False),
])
def test_a_variable_read_at_import_gets_a_fresh_interpreter(variable, forked):
    env = {**os.environ, variable: "1"}
    code = "import sys\nprint('torch' in sys.modules)"
    done = forked_python.run(["-c", code], env=env, timeout=120)
    assert done.stdout == f"{forked}\n"


def test_a_run_past_its_timeout_is_killed_with_what_it_printed():
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        forked_python.run(["-c", code], timeout=3)
    assert caught.value.output == "started\n"
    assert caught.value.cmd == [sys.executable, "-c", code]


def test_the_opt_out_variable_makes_every_run_fresh(monkeypatch):
    monkeypatch.setenv(forked_python.FRESH_ENV, "1")
    code = "import sys\nprint('torch' in sys.modules)"
    assert forked_python.run(["-c", code], timeout=120).stdout == "False\n"
