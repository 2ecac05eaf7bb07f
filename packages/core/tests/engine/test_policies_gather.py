"""A plugin's dense_gather_factor(): small tables are read without an XLA gather.

Each case runs in a fresh process under a CPU plugin subclass registered by hand
(the policy is read once, when the client starts); the optimized HLO of each
op's graph is read from XLA_SAVE_TENSORS_FILE and its values are compared with
eager CPU PyTorch in the same process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import run_python

# Every program starts on a CPU plugin whose dense-gather factor is {factor}.
DENSE_CPU = """
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.plugins import register_plugin
from torch_xla_cpu import CpuPlugin


class GatherCpu(CpuPlugin):
    def dense_gather_factor(self):
        return {factor}


register_plugin("gathercpu", GatherCpu())
xr.set_device_type("gathercpu")
device = xm.xla_device()
"""

PROGRAM = """
import json
import torch
import torch.nn.functional as F
{dense_cpu}torch.manual_seed(0)
table = torch.randn(8, 5)
ints = torch.arange(24, dtype=torch.int32).reshape(8, 3) - 7
flags = torch.rand(8, 3) > 0.5
ids = torch.tensor([[3, 0, 7], [7, 7, 1]])
CASES = {{
    "index_select": lambda t: torch.index_select(t, 0, ids.view(-1).to(t.device)),
    "index_select_dim1": lambda t: torch.index_select(t.t(), 1, ids.view(-1).to(t.device)),
    "embedding": lambda t: F.embedding(ids.to(t.device), t),
    "tensor_index": lambda t: t[ids.to(t.device)],
    "negative_index": lambda t: t[torch.tensor([-1, 0]).to(t.device)],
    "gather": lambda t: torch.gather(t, 0, ids.repeat(1, 2)[:, :4].to(t.device)),
    "int_table": lambda t: ints.to(t.device)[ids.to(t.device)],
    "bool_table": lambda t: flags.to(t.device)[ids.to(t.device)],
}}
results = {{}}
for name, case in CASES.items():
    xm.mark_step()
    got = case(table.to(device)).cpu()
    want = case(table)
    results[name] = {{"equal": bool(torch.equal(got, want)), "dtype": str(got.dtype),
                     "shape": list(got.shape)}}
print(json.dumps({{"cases": list(CASES), "results": results}}))
"""


def run(tmp_path, factor: int) -> tuple[dict, dict[str, str]]:
    dump = tmp_path / f"hlo-{factor}.txt"
    out = run_python(PROGRAM.format(dense_cpu=DENSE_CPU.format(factor=factor)),
                     {"XLA_SAVE_TENSORS_FILE": str(dump), "XLA_SAVE_TENSORS_FMT": "hlo"})
    report = json.loads(out.strip().splitlines()[-1])
    written = dump.with_name(dump.name + ".0").read_text()  # the device's ordinal ends the name
    graphs = [g.split("## END_GRAPH")[0] for g in written.split("## BEGIN_GRAPH")[1:]]
    # The graphs with a gather or a reduction or dot: one per case, in order.
    computing = [g for g in graphs if any(w in g for w in (" gather(", " dot(", " reduce("))]
    assert len(computing) == len(report["cases"]), graphs
    return report["results"], dict(zip(report["cases"], computing, strict=True))


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return run(tmp_path_factory.mktemp("dense"), factor=8)


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    return run(tmp_path_factory.mktemp("sparse"), factor=7)  # the tables have 8 rows


CASES = ["index_select", "index_select_dim1", "embedding", "tensor_index", "negative_index",
         "gather", "int_table", "bool_table"]


@pytest.mark.parametrize("case", CASES)
def test_tables_within_the_factor_lower_without_a_gather(dense, case):
    results, hlo = dense
    assert results[case]["equal"], results[case]
    assert " gather(" not in hlo[case], hlo[case]
    assert " dot(" in hlo[case] or " reduce(" in hlo[case], hlo[case]


@pytest.mark.parametrize("case", CASES)
def test_tables_above_the_factor_keep_the_gather(sparse, case):
    results, hlo = sparse
    assert results[case]["equal"], results[case]
    assert " gather(" in hlo[case], hlo[case]


def test_float_tables_use_a_dot_other_tables_a_reduction(dense):
    _, hlo = dense
    assert " dot(" in hlo["embedding"] and " dot(" in hlo["index_select"]
    assert " dot(" not in hlo["int_table"] and " reduce(" in hlo["int_table"]
    assert " dot(" not in hlo["gather"] and " reduce(" in hlo["gather"]


OPINFO_PROGRAM = """
import json, sys
import torch
sys.path.insert(0, {here!r})
import opinfo_check
{dense_cpu}results = {{}}
for name, op in opinfo_check.entries({entries!r}):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        r = opinfo_check.check(name, op, dtype, device)
        results[f"{{name}}:{{dtype}}"] = [r.status, r.reason]
print(json.dumps(results))
"""

OPINFO_ENTRIES = ["index_select", "gather", "take", "take_along_dim", "__getitem__",
                  "nn.functional.embedding"]


def opinfo(factor: int) -> dict:
    code = OPINFO_PROGRAM.format(here=str(Path(__file__).parent), entries=OPINFO_ENTRIES,
                                 dense_cpu=DENSE_CPU.format(factor=factor))
    return json.loads(run_python(code).strip().splitlines()[-1])


def test_opinfo_samples_agree_with_eager_with_every_table_dense():
    """The OpInfo samples of every gathering entry, forward and backward: the same outcome
    with every table dense as with none (a factor above any sample's table)."""
    dense, sparse = opinfo(10**6), opinfo(0)
    assert dense == sparse
    assert not [k for k, (status, _) in dense.items() if status == "failing"], dense
