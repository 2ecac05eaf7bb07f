"""A plugin's autocast_dtype() is the dtype of `torch.autocast('xla')` without dtype=.

Each plugin runs in a fresh process (the default is set when the client starts);
XLA dumps the HLO it was given, so the dot's operand types are read before XLA's
CPU passes widen 16-bit dots. Values are compared with eager CPU autocast in the
same dtype, in the same process.
"""

from __future__ import annotations

import json
import re

import pytest

from .helpers import run_python

PROGRAM = """
import json
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.plugins import register_plugin
from torch_xla_cpu import CpuPlugin


class AutocastCpu(CpuPlugin):
    def autocast_dtype(self):
        return {dtype}


register_plugin("autocastcpu", AutocastCpu())
xr.set_device_type("autocastcpu")
device = xm.xla_device()
default = torch.get_autocast_dtype("xla")
torch.manual_seed(0)
a, b, target = torch.randn(64, 128), torch.randn(128, 32), torch.randn(64, 32)
w = torch.randn(32, 128, requires_grad=True)
wx = w.detach().to(device).requires_grad_()


def step(x, weight, y, device_type, dtype=None):
    with torch.autocast(device_type, dtype=dtype):
        product = x @ b.to(x.device)
        hidden = F.linear(x, weight)
        loss = F.mse_loss(hidden, y)  # a float32 op under autocast
    loss.backward()
    return product, hidden, loss, weight.grad


got = step(a.to(device), wx, target.to(device), "xla")
xm.mark_step()
want = step(a, w, target, "cpu", dtype=default)
with torch.autocast("xla", dtype=torch.float16):
    explicit = (a.to(device) @ b.to(device)).dtype
errors = {{}}
for name, g, e in zip(("product", "hidden", "loss", "grad"), got, want):
    g = g.cpu()
    try:
        if name == "grad":  # float32, but made by a matmul in the autocast dtype: its precision
            reduced = torch.ones((), dtype=default)
            rtol, atol = torch.testing._comparison.default_tolerances(reduced)
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol)
        else:
            torch.testing.assert_close(g, e)  # dtype included; tolerance: torch's for that dtype
        errors[name] = None
    except AssertionError as error:
        errors[name] = str(error)
print(json.dumps({{"default": str(default), "dtypes": [str(t.dtype) for t in got],
                  "errors": errors, "explicit": str(explicit)}}))
"""


def run(tmp_path, dtype: str) -> tuple[dict, str]:
    dump = tmp_path / dtype
    out = run_python(PROGRAM.format(dtype=f"torch.{dtype}"),
                     {"XLA_FLAGS": f"--xla_dump_to={dump}"})
    hlo = "".join(p.read_text() for p in dump.glob("*graph_fn*.before_optimizations.txt"))
    return json.loads(out.strip().splitlines()[-1]), hlo


@pytest.fixture(scope="module", params=["bfloat16", "float16"])
def case(request, tmp_path_factory):
    return request.param, *run(tmp_path_factory.mktemp("autocast"), request.param)


def test_the_plugin_dtype_is_the_default(case):
    dtype, result, _ = case
    assert result["default"] == f"torch.{dtype}"
    assert result["dtypes"] == [f"torch.{dtype}", f"torch.{dtype}", "torch.float32",
                                "torch.float32"]
    assert result["explicit"] == "torch.float16"  # dtype= still wins


def test_values_match_eager_cpu_autocast(case):
    _, result, _ = case
    assert result["errors"] == {"product": None, "hidden": None, "loss": None, "grad": None}


def dot_operand_types(hlo: str) -> list[tuple[str, str]]:
    """(lhs, rhs) element types of every dot in the HLO text."""
    types = dict(re.findall(r"%([\w.]+) = (\w+)\[", hlo))
    dots = re.findall(r"= \w+\[[^=]*\bdot\(%([\w.]+), %([\w.]+)\)", hlo)
    return [(types[lhs], types[rhs]) for lhs, rhs in dots]


def test_the_matmuls_compile_to_dots_in_that_dtype(case):
    """Forward and backward matmuls multiply 16-bit operands (sums are float32, as torch's)."""
    dtype, _, hlo = case
    short = {"bfloat16": "bf16", "float16": "f16"}[dtype]
    operands = dot_operand_types(hlo)
    assert len(operands) == 3 and set(operands) == {(short, short)}, operands
