"""`torch_xla.compile(f, num_different_graphs_allowed=n)`: the calls of `f` may trace at
most `n` different graphs; one more raises RuntimeError at the first op that differs (or
at the end of the call), naming what the earlier graphs did there, in PyTorch/XLA's words.
Values: the same function run eagerly on the CPU."""

from __future__ import annotations

import re

import pytest
import torch

import torch_xla
from torch_xla import _XLAC
from torch_xla.lazy import eager


def exceeded(limit: int, *lines: str) -> str:
    """The start of the error, as a regular expression."""
    return re.escape("\n".join(
        [f"Maximum number of different graphs allowed per function exceeded: {limit}", *lines]))


def add(size: int) -> str:
    return f"[] aten::add, xla_shape=f32[{size}]{{0}}, dynamic_dims: ()"


def check(f, *args, limit: int):
    """`f` compiled with the limit, called on XLA copies of `args`, equals `f` on the CPU."""
    cpu = f(*args)
    xla_args = [a.to("xla") if isinstance(a, torch.Tensor) else a for a in args]
    out = torch_xla.compile(f, num_different_graphs_allowed=limit)(*xla_args)
    torch.testing.assert_close(out.cpu(), cpu)


def test_calls_tracing_one_graph_pass_and_a_new_shape_is_one_too_many():
    def double(x):
        return x + x

    x10, x5 = torch.rand(10), torch.rand(5)
    for _ in range(3):  # the same graph again and again
        check(double, x10, limit=1)
    with pytest.raises(RuntimeError, match=exceeded(1, f"Got: {add(5)}", f"Expected: {add(10)}")):
        check(double, x5, limit=1)
    check(double, x10, limit=1)  # the failed call left nothing behind
    check(double, x5, limit=2)  # a larger limit lets it in


def test_another_branch_is_one_graph_too_many():
    def f(x, step):
        return x + x if step == 0 else x * 5

    x = torch.rand(10)
    check(f, x, 0, limit=1)
    mul = "[] aten::mul, xla_shape=f32[10]{0}, dynamic_dims: ()"
    with pytest.raises(RuntimeError, match=exceeded(1, f"Got: {mul}", f"Expected: {add(10)}")):
        check(f, x, 1, limit=1)


def test_a_fork_lists_every_graph_seen_there():
    def f(x, step):
        r = x + x
        if step == 0:
            return r * 2
        if step == 1:
            return r + x
        if step == 2:
            return r / 3
        return r

    x = torch.rand(10)
    check(f, x, 0, limit=2)
    check(f, x, 1, limit=2)
    div = "[] aten::div, xla_shape=f32[10]{0}, dynamic_dims: ()"
    mul = "[] aten::mul, xla_shape=f32[10]{0}, dynamic_dims: ()"
    with pytest.raises(RuntimeError, match=exceeded(
            2, f"Got: {div}", "Expected either of:", f"  - {mul}", f"  - {add(10)}")):
        check(f, x, 2, limit=2)
    # a call stopping at the fork is a new graph too
    with pytest.raises(RuntimeError, match=exceeded(
            2, f"Reached the end of the function at: {add(10)}", "Expected either of:",
            f"  - {mul}", f"  - {add(10)}")):
        check(f, x, 3, limit=2)


def test_a_call_ending_where_the_earlier_graph_went_on_is_one_too_many():
    def f(x, mul):
        r = x + x
        return r * 10 if mul else r

    x = torch.rand(10)
    check(f, x, True, limit=1)
    mul = "[] aten::mul, xla_shape=f32[10]{0}, dynamic_dims: ()"
    with pytest.raises(RuntimeError, match=exceeded(
            1, f"Reached the end of the function at: {add(10)}", f"Expected: {mul}")):
        check(f, x, False, limit=1)


def test_graphs_seen_before_do_not_count_again():
    def f(x, step):
        r0 = x + x + x
        r = r0 + x
        if step in (0, 3):
            return r + x
        if step == 2:
            return r * 4
        return r0

    x = torch.rand(10)
    for step in range(6):  # three different graphs
        check(f, x, step, limit=3)
    with pytest.raises(RuntimeError, match="exceeded: 3"):
        check(f, torch.rand(11), 0, limit=3)


def test_another_function_of_the_same_name_is_another_session():
    """Sessions are named after the function's name and id, as PyTorch/XLA names them; a
    dead function's id can be reused by a new one of the same name, whose calls must not
    count against the dead one's traces."""
    def f(x):
        return x + x

    stale = f"f_{id(f)}"  # what a dead function with f's id left behind: a trace of x * 3
    torch_xla._XLAC._dynamic_shape_detector_remove_session(stale)  # an earlier test's
    torch_xla._XLAC._dynamic_shape_detector_set_max_num_different_graphs_allowed(1)
    x = torch.rand(7).to("xla")
    torch_xla._XLAC._dynamic_shape_detector_start_session(stale)
    try:
        y = x * 3
    finally:
        torch_xla._XLAC._dynamic_shape_detector_end_session()
    torch_xla.sync()
    del y
    check(f, torch.rand(3), limit=1)  # f's first trace: a fresh session
    with pytest.raises(RuntimeError, match="exceeded: 1"):
        check(f, torch.rand(4), limit=1)  # and f's own traces count


def test_older_names_of_the_limit_and_bad_limits():
    def f(x):
        return x + x

    x = torch.rand(3)
    for name in ("max_different_graphs", "allowed_traces"):
        g = torch_xla.compile(f, **{name: 1})
        torch.testing.assert_close(g(x.to("xla")).cpu(), x + x)
        with pytest.raises(RuntimeError, match="exceeded: 1"):
            g(torch.rand(4).to("xla"))
    with pytest.raises(TypeError, match="pass num_different_graphs_allowed only"):
        torch_xla.compile(f, num_different_graphs_allowed=1, allowed_traces=1)
    before = eager.enabled()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="must be an int >= 1"):
            torch_xla.compile(f, num_different_graphs_allowed=bad)(x.to("xla"))
        assert eager.enabled() == before  # nothing changed


def test_a_with_block_is_a_session_of_its_own_and_state_is_restored_after_an_error():
    x = torch.rand(4).to("xla")
    for size in (4, 5):  # two blocks: two sessions, one graph each
        with torch_xla.compile(num_different_graphs_allowed=1):
            y = torch.rand(size).to("xla") + 1
        assert y.shape == (size,)

    def f(x):
        return x * 2

    g = torch_xla.compile(f, num_different_graphs_allowed=1)
    g(x)
    before = eager.enabled()
    with pytest.raises(RuntimeError, match="exceeded"):
        g(torch.rand(7).to("xla"))
    assert eager.enabled() == before
    torch.testing.assert_close((x + 1).cpu(), x.cpu() + 1)  # recording works as before


def test_the_detector_through_xlac_as_pytorch_xla_exposes_it():
    x = torch.rand(6).to("xla")
    _XLAC._dynamic_shape_detector_set_max_num_different_graphs_allowed(1)
    for expected_error in (False, True):
        _XLAC._dynamic_shape_detector_start_session("by_hand")
        try:
            y = x + x if not expected_error else x - x
        except RuntimeError as e:
            assert expected_error and "exceeded: 1" in str(e)
        else:
            assert not expected_error, y
        finally:
            _XLAC._dynamic_shape_detector_end_session()
    _XLAC._dynamic_shape_detector_remove_session("by_hand")
    _XLAC._dynamic_shape_detector_start_session("by_hand")  # fresh: any graph again
    x - x
    _XLAC._dynamic_shape_detector_end_session()
    _XLAC._dynamic_shape_detector_remove_session("by_hand")
    with pytest.raises(RuntimeError, match="No dynamic shape detector session"):
        _XLAC._dynamic_shape_detector_end_session()
