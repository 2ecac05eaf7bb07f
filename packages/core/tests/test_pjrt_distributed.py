"""The pieces of `torch_xla.pjrt.distributed` that need no job; meetings between real
processes are tested in test_multiprocess.py."""

from __future__ import annotations

import pytest

from torch_xla.pjrt import distributed


@pytest.mark.parametrize("text", ["soon", "0", "-5", "inf", "nan"])
def test_a_bad_collective_timeout_is_refused_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv(distributed.COLLECTIVE_TIMEOUT_ENV, text)
    with pytest.raises(distributed.DistributedError) as info:
        distributed.collective_timeout()
    assert f"{distributed.COLLECTIVE_TIMEOUT_ENV}={text!r} is not a positive number" in str(
        info.value)


def test_collective_timeout_reads_seconds_or_the_default(monkeypatch):
    monkeypatch.delenv(distributed.COLLECTIVE_TIMEOUT_ENV, raising=False)
    assert distributed.collective_timeout() == distributed.DEFAULT_COLLECTIVE_TIMEOUT
    monkeypatch.setenv(distributed.COLLECTIVE_TIMEOUT_ENV, " 2.5 ")
    assert distributed.collective_timeout() == 2.5
