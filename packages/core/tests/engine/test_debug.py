"""Lowering errors name the ATen op and, with XLA_IR_DEBUG=1, the user's Python line."""

from __future__ import annotations

from .helpers import run_python

BROKEN_LOWERING = """
    import torch, torch_xla
    from torch_xla.lowering import registry
    from torch_xla.lazy.compiler import LoweringError

    @registry.register(torch.ops.aten.sinh.default, override=True)
    def broken(x):
        raise ValueError("deliberately broken")

    x = torch.ones(3).to(torch_xla.device())
    y = x.sinh()  # THE USER LINE
    try:
        torch_xla.sync()
    except LoweringError as e:
        print("ERROR:", e)
"""


def test_lowering_error_names_op_and_hint():
    out = run_python(BROKEN_LOWERING, env={"XLA_IR_DEBUG": "0"})
    assert "aten.sinh.default" in out and "deliberately broken" in out
    assert "XLA_IR_DEBUG=1" in out


def test_lowering_error_names_user_line_with_ir_debug():
    out = run_python(BROKEN_LOWERING, env={"XLA_IR_DEBUG": "1"})
    assert "aten.sinh.default" in out
    assert "created at <string>:11" in out
