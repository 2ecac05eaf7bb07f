"""integration/upstream/api_report.py: upstream PyTorch/XLA's API, module by module, against ours.

The present/missing computation is checked on modules built here (known answers); the
live inventory is only checked for what must always hold: every module of ours that
upstream has imports, and every missing name carries a reason.
"""

from __future__ import annotations

import pathlib
import sys
import textwrap

import pytest

UPSTREAM_TOOLS = pathlib.Path(__file__).resolve().parents[3] / "integration" / "upstream"
sys.path.insert(0, str(UPSTREAM_TOOLS))

import api_report  # noqa: E402
from upstream_api import MODULES, Module  # noqa: E402

# A module whose names are known: two upstream names present (one a constant), one only
# present through a module-level __getattr__, two absent.
FAKE_SOURCE = """
LIMIT = 3

def present():
    pass

def __getattr__(name):
    if name == "lazy":
        return 1
    raise AttributeError(name)
"""
FAKE = Module("fake/path.py", ("LIMIT", "absent", "lazy", "other_absent", "present"))


@pytest.fixture
def fake_modules(tmp_path, monkeypatch):
    (tmp_path / "fake_api_good.py").write_text(textwrap.dedent(FAKE_SOURCE))
    (tmp_path / "fake_api_broken.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return {"fake_api_good": FAKE, "fake_api_broken": FAKE}


def test_present_and_missing_of_a_known_module(fake_modules):
    result = api_report.check_module("fake_api_good", FAKE)
    assert result.import_error is None
    assert result.present == ("LIMIT", "lazy", "present")
    assert result.missing == ("absent", "other_absent")


def test_a_module_that_fails_to_import_is_reported_not_fatal(fake_modules):
    results = api_report.check_all(fake_modules)
    assert [r.module for r in results] == ["fake_api_broken", "fake_api_good"]
    broken = results[0]
    assert "broken on purpose" in broken.import_error
    assert broken.present == () and broken.missing == FAKE.names
    assert results[1].present == ("LIMIT", "lazy", "present")


def test_the_most_specific_reason_wins():
    reasons = {"pkg": "package", "pkg.mod": "module", ("pkg.mod", "x"): "name"}
    assert api_report.reason_for("pkg.mod", "x", reasons) == "name"
    assert api_report.reason_for("pkg.mod", "y", reasons) == "module"
    assert api_report.reason_for("pkg.other.deep", "y", reasons) == "package"
    assert api_report.reason_for("elsewhere", "y", reasons) is None


def test_section_counts_and_flags_unexplained_and_stale_reasons(fake_modules):
    results = api_report.check_all(fake_modules)
    reasons = {"fake_api_broken": "broken on purpose",
               ("fake_api_good", "absent"): "not built yet: absent",
               ("fake_api_good", "present"): "a reason left behind"}
    assert api_report.unexplained(results, reasons) == ["fake_api_good.other_absent"]
    assert api_report.stale_reasons(results, reasons) == ["fake_api_good.present"]
    text = api_report.render(results, reasons)
    assert "### `fake_api_good`: 3 of 5 present" in text
    assert "### `fake_api_broken`: 0 of 5 present" in text
    assert "3 of 10 names present in 2 modules" in text
    assert "| `other_absent` | **NO REASON" in text
    assert "**ERROR: 1 missing names have no reason**" in text
    assert "**ERROR: 1 reasons name a name that is not missing**" in text
    assert "| `absent` | not built yet: absent |" in text
    assert text.index("fake_api_broken`:") < text.index("fake_api_good`:")  # sorted


def test_the_section_written_twice_is_there_once(fake_modules, monkeypatch, tmp_path):
    """run_upstream.py writes the test table, then appends the section: a second append
    (a rerun on a written file) replaces the section instead of adding another."""
    results = api_report.check_all(fake_modules)
    monkeypatch.setattr(api_report, "check_all", lambda: results)
    page = tmp_path / "compatibility.md"
    page.write_text("# Compatibility\n\n| file | result |\n")
    api_report.append_section(page)
    once = page.read_text()
    api_report.append_section(page)
    assert page.read_text() == once
    assert once.startswith("# Compatibility\n\n| file | result |\n\n## Upstream API")
    assert once.count(api_report.HEADING) == 1


def test_small_live_modules_import_and_are_explained():
    chosen = ["torch_xla.debug.metrics_compare_utils", "torch_xla.utils.serialization"]
    results = api_report.check_all({m: MODULES[m] for m in chosen})
    assert [r.import_error for r in results] == [None, None]
    assert api_report.unexplained(results) == []


@pytest.mark.slow  # ~2 CPU-minutes; `nox -s upstream` checks the same on every run
def test_every_missing_upstream_name_has_a_reason_and_no_reason_is_stale():
    results = api_report.check_all()
    bad = api_report.unexplained(results)
    assert not bad, (f"{len(bad)} upstream names are missing without a reason: {bad}; add "
                     "each to REASONS in integration/upstream/api_report.py")
    stale = api_report.stale_reasons(results)
    assert not stale, (f"REASONS explains names that are no longer missing: {stale}; remove "
                       "them from integration/upstream/api_report.py")
