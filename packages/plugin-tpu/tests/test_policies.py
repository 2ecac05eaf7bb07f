"""TPU's declared policies take effect in the engine, shown on a CPU stand-in.

No TPU here: a CPU plugin borrows TpuPlugin's policy methods, so the compiled
graph is what the engine would build for a TPU (checked in the optimized HLO)
while the values can be compared with eager CPU PyTorch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

PROGRAM = """
import json
import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.plugins import register_plugin
from torch_xla_cpu import CpuPlugin
from torch_xla_tpu import TpuPlugin


class TpuPoliciesOnCpu(CpuPlugin):
    dense_gather_factor = TpuPlugin.dense_gather_factor
    rng_algorithm = TpuPlugin.rng_algorithm
    dtype_policy = TpuPlugin.dtype_policy
    autocast_dtype = TpuPlugin.autocast_dtype


register_plugin("tpupolicies", TpuPoliciesOnCpu())
xr.set_device_type("tpupolicies")
device = xm.xla_device()
torch.manual_seed(0)
table, ids = torch.randn(1000, 16), torch.randint(0, 1000, (4, 7))
looked_up = F.embedding(ids.to(device), table.to(device)).cpu()
print(json.dumps({
    "embedding_equal": torch.equal(looked_up, F.embedding(ids, table)),
    "autocast_dtype": str(torch.get_autocast_dtype("xla")),
}))
"""


def run(env: dict[str, str]) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROGRAM)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_tpu_looks_up_small_tables_densely_and_autocasts_to_bf16(tmp_path):
    dump = tmp_path / "hlo.txt"
    result = run({"XLA_SAVE_TENSORS_FILE": str(dump), "XLA_SAVE_TENSORS_FMT": "hlo"})
    assert result == {"embedding_equal": True, "autocast_dtype": "torch.bfloat16"}
    hlo = dump.with_name(dump.name + ".0").read_text()
    assert " gather(" not in hlo and " dot(" in hlo  # 1000 rows <= 10 * 8192


def test_xla_dense_gather_factor_lowers_the_limit(tmp_path):
    dump = tmp_path / "hlo.txt"
    result = run({"XLA_SAVE_TENSORS_FILE": str(dump), "XLA_SAVE_TENSORS_FMT": "hlo",
                  "XLA_DENSE_GATHER_FACTOR": "99"})  # 990 rows < 1000: a gather again
    assert result["embedding_equal"]
    assert " gather(" in dump.with_name(dump.name + ".0").read_text()
