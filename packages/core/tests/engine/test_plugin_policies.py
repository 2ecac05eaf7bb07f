"""A plugin's dtype_policy() changes what the device stores and what XLA compiles."""

from __future__ import annotations

import json

from conftest import run_python

PROGRAM = """
import json, sys
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.plugins import DtypePolicy, register_plugin
from torch_xla_cpu import CpuPlugin


class NarrowCpu(CpuPlugin):
    # a device without 64-bit floats or 16-bit integers, emulated on the CPU
    def dtype_policy(self):
        return DtypePolicy(f64_as_f32={narrow}, s16_as_s32={narrow})


register_plugin("narrowcpu", NarrowCpu())
xr.set_device_type("narrowcpu")
device = xm.xla_device()
x = torch.tensor([1 + 2**-40, 3.0], dtype=torch.float64).to(device)
y = (x * 2).sum()
s = torch.tensor([300, -7], dtype=torch.int16).to(device) * 3
print(json.dumps({{"x_dtype": str(x.dtype), "y": y.item(), "s_dtype": str(s.dtype),
                  "s": s.cpu().tolist(), "x": x.cpu().tolist()}}))
"""


def run(tmp_path, narrow: bool) -> tuple[dict, str]:
    dump = tmp_path / f"hlo-{narrow}.txt"
    result = run_python(PROGRAM.format(narrow=narrow),
                        {"XLA_SAVE_TENSORS_FILE": str(dump), "XLA_SAVE_TENSORS_FMT": "hlo"})
    assert result.returncode == 0, result.stderr
    written = dump.with_name(dump.name + ".0")  # the device's ordinal ends the name
    return json.loads(result.stdout.strip().splitlines()[-1]), written.read_text()


def test_narrow_policy_stores_reduced_types_but_reports_torch_dtypes(tmp_path):
    wide, wide_hlo = run(tmp_path, narrow=False)
    narrow, narrow_hlo = run(tmp_path, narrow=True)
    for values in (wide, narrow):  # tensors always report their PyTorch dtype
        assert values["x_dtype"] == "torch.float64" and values["s_dtype"] == "torch.int16"
        assert values["s"] == [900, -21]
    assert wide["x"][0] == 1 + 2**-40  # really 64-bit by default
    assert narrow["x"][0] == 1.0  # stored as float32: the 2**-40 is gone
    assert narrow["y"] == 8.0 and wide["y"] == 8 + 2**-39
    # the compiled programs: f64/s16 by default, f32/s32 under the policy
    assert "f64[" in wide_hlo and "s16[" in wide_hlo
    assert "f64[" not in narrow_hlo and "s16[" not in narrow_hlo
    assert "f32[" in narrow_hlo and "s32[" in narrow_hlo
