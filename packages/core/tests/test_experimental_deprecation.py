"""`torch_xla.experimental.deprecation`: old names that call the new function and warn once."""

from __future__ import annotations

import logging
import sys
import types

from torch_xla.experimental.deprecation import deprecated, mark_deprecated, register_deprecated


def renamed(x):
    return x + 1


def test_an_old_name_calls_the_new_function_and_warns_once(caplog):
    here = sys.modules[__name__]
    old = deprecated(here, renamed, "old_name")
    with caplog.at_level(logging.WARNING):
        assert old(1) == 2 and old(2) == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"{__name__}.old_name is deprecated. Use {__name__}.renamed instead."]
    module = types.ModuleType("legacy")
    register_deprecated(module, renamed)
    assert module.renamed(5) == 6


def test_a_marked_function_runs_the_new_one(caplog):
    @mark_deprecated(renamed)
    def old_function(x):
        return x - 100

    with caplog.at_level(logging.WARNING):
        assert old_function(1) == 2
    assert "old_function is deprecated. Use" in caplog.text and "renamed" in caplog.text
    assert old_function.__name__ == "old_function"
