"""`torch_xla.test.test_utils`: progress lines, TensorBoard summaries, `mp_test`."""

from __future__ import annotations

import os
import re
import sys
import unittest

import pytest

import torch_xla.debug.metrics as met
import torch_xla.test.test_utils as xtu
from torch_xla import _metrics

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="the tensorboard package (core's test extra) reads the summaries back",
)


def _scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    acc = event_accumulator.EventAccumulator(logdir)
    acc.Reload()
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]
    }


class _Recorder:
    def __init__(self):
        self.scalars = []

    def add_scalar(self, name, value, step):
        self.scalars.append((name, value, step))


def test_summary_writer_writes_scalars_and_metrics(tmp_path):
    met.clear_all()
    _metrics.metric("CompileTime").add(0.5)
    _metrics.counter("aten::nonzero").inc(2)
    _metrics.counter("aten::median").inc(3)
    writer = xtu.get_summary_writer(str(tmp_path))
    xtu.write_to_summary(writer, 7, {"loss": 0.25}, write_xla_metrics=True)
    xtu.close_summary_writer(writer)
    met.clear_all()
    scalars = _scalars(str(tmp_path))
    assert scalars["TensorboardStartTimestamp"][0][0] == 0
    assert scalars["loss"] == [(7, 0.25)]
    assert scalars["CompileTime__Accumulator_sec"] == [(7, 0.5)]
    assert scalars["aten::nonzero__Value"] == [(7, 2.0)]
    assert scalars["aten_ops_sum"] == [(7, 5.0)]


def test_no_logdir_no_writer():
    assert xtu.get_summary_writer(None) is None and xtu.get_summary_writer("") is None
    xtu.write_to_summary(None, 1, {"loss": 1.0})  # writes nothing, raises nothing
    xtu.close_summary_writer(None)


def test_training_update_line_and_rates(capsys):
    writer = _Recorder()
    xtu.print_training_update("xla:0", 10, 0.123456, 12.345, 11.0, epoch=2, summary_writer=writer)
    line = capsys.readouterr().out
    assert re.fullmatch(
        r"\| Training Device=xla:0/0 Epoch=2 Step=10 Loss=0\.12346 Rate=12\.35 "
        r"GlobalRate=11\.00 Time=\d\d:\d\d:\d\d\n",
        line,
    ), line
    assert writer.scalars == [("examples/sec", 12.345, None), ("average_examples/sec", 11.0, None)]


def test_test_update_line_leaves_out_what_is_unknown(capsys):
    xtu.print_test_update("xla:0", 97.5, epoch=1)
    assert re.fullmatch(
        r"\| Test Device=xla:0/0 Epoch=1 Accuracy=97\.50 Time=\d\d:\d\d:\d\d\n",
        capsys.readouterr().out,
    )
    xtu.print_test_update("xla:0", None, step=4)
    assert "Step=4" in capsys.readouterr().out


def _exit_with(code):
    sys.stdout.flush()
    os._exit(code)


class _Case(unittest.TestCase):
    @xtu.mp_test
    def passes(self):
        _exit_with(0)

    @xtu.mp_test
    def fails(self):
        _exit_with(3)

    def runTest(self):  # noqa: N802 - unittest's name
        pass


def test_mp_test_runs_in_a_child_and_checks_its_exit_code():
    case = _Case()
    assert case.passes() == 0
    with pytest.raises(AssertionError, match="3 != 0"):
        case.fails()
