"""integration/upstream/run_upstream.py: a file listed as an expected failure counts as one
only when unittest reports exactly its listed tests failing.

The outputs judged are real unittest runs of a small file written here (unittest itself is
the reference for the report format), not hand-written text.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

UPSTREAM_TOOLS = pathlib.Path(__file__).resolve().parents[3] / "integration" / "upstream"
sys.path.insert(0, str(UPSTREAM_TOOLS))

from run_upstream import Expected, failed_tests, judge  # noqa: E402

# An upstream-style test file: which tests fail is chosen by the FAILING variable.
SOURCE = """
import os
import sys
import unittest

FAILING = set(os.environ["FAILING"].split(",")) - {""}


class First(unittest.TestCase):
    def test_a(self):
        self.assertNotIn("First.test_a", FAILING)

    def test_b(self):
        if "First.test_b" in FAILING:
            raise RuntimeError("an error, not an assertion")

    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertNotIn("First.test_sub", FAILING)

    @unittest.skip("not here")
    def test_skipped(self):
        pass


class Second(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if "Second.setUpClass" in FAILING:
            raise RuntimeError("no set-up")

    def test_c(self):
        pass


if __name__ == "__main__":
    test = unittest.main(exit=False)
    if os.environ.get("CRASH"):
        os._exit(134)
    sys.exit(0 if test.result.wasSuccessful() else 1)
"""


@pytest.fixture(scope="module")
def run_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("upstream") / "test_fake.py"
    path.write_text(textwrap.dedent(SOURCE))

    def run(*failing: str, crash: bool = False) -> tuple[int, str]:
        env = {"FAILING": ",".join(failing), "PATH": "", **({"CRASH": "1"} if crash else {})}
        done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True,
                              text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr

    return run


EXPECTED = Expected(frozenset({"First.test_a", "First.test_b"}), "why they fail")


def test_failed_tests_are_named_by_class_and_test(run_file):
    _, output = run_file("First.test_a", "First.test_b", "First.test_sub", "Second.setUpClass")
    assert failed_tests(output) == {"First.test_a", "First.test_b", "First.test_sub",
                                    "Second.setUpClass"}
    assert failed_tests(run_file()[1]) == frozenset()


def test_exactly_the_listed_failures_are_an_expected_failure(run_file):
    code, output = run_file("First.test_a", "First.test_b")
    result, reason = judge(EXPECTED, False, code, output, "exit 1")
    assert result == "expected failure"
    # 5 tests ran, one skipped: 2 of the 4 run pass.
    assert reason.startswith("2 of 4 run tests pass")
    assert "First.test_a, First.test_b" in reason and reason.endswith("why they fail")
    assert judge(EXPECTED, True, code, output, "exit 1")[0] == "known failure"


@pytest.mark.parametrize("extra", ["First.test_sub", "Second.setUpClass"])
def test_a_failure_beyond_the_listed_ones_fails_the_run(run_file, extra):
    code, output = run_file("First.test_a", "First.test_b", extra)
    result, reason = judge(EXPECTED, False, code, output, "exit 1")
    assert result == "FAIL"
    assert f"failing beyond EXPECTED_FAILURES: {extra}" in reason


def test_a_listed_test_that_passes_is_reported(run_file):
    code, output = run_file("First.test_b")
    assert code == 1
    assert judge(EXPECTED, False, code, output, "exit 1") == (
        "unexpected pass", "First.test_a now pass: remove them from EXPECTED_FAILURES")
    code, output = run_file()
    assert code == 0
    assert judge(EXPECTED, True, code, output, "")[0] == "unexpected pass"


def test_a_crash_or_a_timeout_fails_the_run(run_file):
    assert judge(EXPECTED, False, -11, "Segmentation fault", "exit -11")[0] == "FAIL"
    assert judge(EXPECTED, False, None, "", "no result within 1200 s") == (
        "FAIL", "no result within 1200 s (it did not finish its tests and exit 1)")
    # A crash after unittest's summary (the listed tests failing) fails the run too.
    code, output = run_file("First.test_a", "First.test_b", crash=True)
    assert code == 134 and failed_tests(output) == EXPECTED.failing
    assert judge(EXPECTED, False, code, output, "exit 134")[0] == "FAIL"
