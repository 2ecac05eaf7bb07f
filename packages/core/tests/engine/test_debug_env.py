"""XLA_SAVE_TENSORS_FILE / _FMT, XLA_METRICS_FILE and XLA_SYNC_WAIT, in fresh processes."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
import textwrap

import pytest
from conftest import run_python

STEP = """
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
torch.manual_seed(0)
w = torch.randn(3, 3, device=device, requires_grad=True)
for _ in range(2):
    x = torch.randn(2, 3, device=device)
    loss = (x @ w).relu().sum()  # the user's line
    loss.backward()
    xm.mark_step()
print(round(w.grad.sum().item(), 4))
"""


def run_step(tmp_path, fmt: str | None = None, **env: str):
    path = tmp_path / "graphs.txt"
    env = {"PJRT_DEVICE": "CPU", "XLA_SAVE_TENSORS_FILE": str(path), **env}
    if fmt is not None:
        env["XLA_SAVE_TENSORS_FMT"] = fmt
    script = tmp_path / "step.py"  # a file, so frames show the user's source lines
    script.write_text(textwrap.dedent(STEP))
    result = run_python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')",
                        env)
    assert result.returncode == 0, result.stderr
    assert not path.exists()  # PyTorch/XLA's name: the path, then the device's ordinal
    return (tmp_path / "graphs.txt.0").read_text(), result


def test_text_dump_appends_every_synced_graph(tmp_path):
    text, _ = run_step(tmp_path)
    assert text.count("## BEGIN_GRAPH") == 3  # each step, then the .item() read, appended
    # one printer with torch_xla._XLAC._get_xla_tensors_text: PyTorch/XLA's layout
    assert "aten::mm(%" in text and "aten::threshold_backward(" in text
    assert ", ROOT=0" in text and "= f32[2,3]{1,0} " in text
    assert "location=" not in text and "TensorsGraphInfo" not in text


def test_ir_debug_adds_python_frames_and_node_lines(tmp_path):
    text, _ = run_step(tmp_path, XLA_IR_DEBUG="1")
    assert "TensorsGraphInfo:" in text and "step.py:12 (<module>)" in text
    assert "loss = (x @ w).relu().sum()  # the user's line" in text


def render(graph: str, fmt: str) -> bytes:
    """Lay out and draw `graph` with graphviz-pure, the `dot` of the core's [test] extra."""
    here = sysconfig.get_path("scripts")  # beside this Python: no system graphviz needed
    dot = shutil.which("graphviz-pure", path=here) or shutil.which("graphviz-pure")
    assert dot is not None, "graphviz-pure is missing: pip install -e 'packages/core[test]'"
    return subprocess.run([dot, f"-T{fmt}"], input=graph.encode(), capture_output=True,
                          check=True, timeout=60).stdout


def test_dot_dump_renders_with_graphviz(tmp_path):
    text, _ = run_step(tmp_path, "dot", XLA_IR_DEBUG="1")
    graph = text.split("## BEGIN_GRAPH\n")[1].split("## END_GRAPH")[0]
    assert graph.startswith("digraph G {") and "->" in graph
    svg = render(graph, "svg").decode()
    assert svg.count('class="node"') == graph.count(" [label=")  # every node drawn
    assert svg.count('class="edge"') == graph.count(" -> ")  # and every edge
    assert ">aten::mm</text>" in svg and ">f32[2,3]</text>" in svg
    assert "step.py:10 (loss = (x @ w).relu().sum()" in svg  # the user line of the matmul
    assert render(graph, "png").startswith(b"\x89PNG\r\n\x1a\n")


def test_hlo_dump_is_what_xla_compiled(tmp_path):
    text, _ = run_step(tmp_path, "hlo")
    assert text.count("HloModule") == 3
    assert "dot(" in text or "dot." in text  # the matmul


def test_hlo_debug_names_each_instruction_after_its_aten_op(tmp_path):
    """XLA_HLO_DEBUG=1: each HLO instruction's metadata names the ATen op it lowers, as
    PyTorch/XLA's `op_type` does (profilers group device ops by it)."""
    plain, _ = run_step(tmp_path, "hlo")
    named, _ = run_step(tmp_path, "hlo", XLA_HLO_DEBUG="1")
    assert "aten__mm" not in plain
    for op in ("aten__mm/", "aten__relu/", "aten__threshold_backward/"):
        assert op in named, op


def test_custom_op_name_prefix_names_one_op(tmp_path):
    path = tmp_path / "graphs.txt"
    result = run_python("""
        import torch, torch_xla, torch_xla._XLAC as xlac
        x = torch.randn(4, 4).to("xla")
        y = (x @ x).relu()
        print(xlac._set_xla_custom_op_name_prefix(y, "Block[0]/forward(model.py:3)/", 0),
              xlac._set_xla_custom_op_name_prefix(x, "data/", 0))
        z = y * 2
        torch_xla.sync()
    """, {"PJRT_DEVICE": "CPU", "XLA_SAVE_TENSORS_FILE": str(path),
          "XLA_SAVE_TENSORS_FMT": "hlo"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True"]  # data takes a name, as upstream's
    text = (tmp_path / "graphs.txt.0").read_text()
    assert 'op_name="jit(graph_fn)/Block[0]/forward(model.py:3)/aten__relu/' in text
    assert "aten__mul" not in text and "aten__mm" not in text  # only the named op
    assert "data/" not in text  # device data is no op: nothing is named by it


def test_a_compiled_graph_is_dumped_when_compiled_and_on_every_call(tmp_path):
    """As PyTorch/XLA's bridge does: `[dynamo]` records, the graph's IR in each."""
    path = tmp_path / "graphs.txt"
    result = run_python("""
        import torch, torch_xla
        f = torch.compile(lambda x, y: torch.cos(x) + torch.sin(y), backend="openxla")
        x, y = torch.tensor(1.0).to("xla"), torch.tensor(2.0).to("xla")
        for _ in range(3):
            f(x, y)
        torch_xla.sync()
    """, {"PJRT_DEVICE": "CPU", "XLA_SAVE_TENSORS_FILE": str(path)})
    assert result.returncode == 0, result.stderr
    records = (tmp_path / "graphs.txt.0").read_text().split("\n\n[")
    dynamo = [r for r in records if r.lstrip("[").startswith("dynamo] device xla:0, 1 output(s)")]
    assert len(dynamo) == 4, records  # compiled, then three calls
    assert all("aten::cos" in r and "aten::sin" in r and "## END_GRAPH" in r for r in dynamo)


def test_unknown_format_is_refused(tmp_path):
    result = run_python(STEP, {"PJRT_DEVICE": "CPU", "XLA_SAVE_TENSORS_FILE": str(tmp_path / "g"),
                               "XLA_SAVE_TENSORS_FMT": "pdf"})
    assert result.returncode != 0
    assert "XLA_SAVE_TENSORS_FMT='pdf' is not one of ('text', 'dot', 'hlo')" in result.stderr


@pytest.mark.parametrize("wait", ["0", "1"])
def test_metrics_file_gets_a_report_per_step_and_sync_wait_keeps_results(tmp_path, wait):
    metrics = tmp_path / "metrics.txt"
    _, result = run_step(tmp_path, XLA_METRICS_FILE=str(metrics), XLA_SYNC_WAIT=wait)
    report = metrics.read_text()
    assert report.count("[Step metrics]") == 2
    assert "Metric: CompileTime" in report and "Counter: MarkStep" in report
    plain = run_python(STEP, {"PJRT_DEVICE": "CPU"})
    assert result.stdout == plain.stdout  # debugging changes no number


OP_BY_OP = """
import torch
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = xm.xla_device()
x = torch.arange(6.0).reshape(2, 3)
y = (x.to(device) * 2 + 1).relu().sum(0)
xm.mark_step()                      # a sync of every live tensor
print("sync", met.counter_value("UncachedCompile"))
z = (y.exp() - 1).max()             # a fetch
print("value", z.item(), ((x * 2 + 1).relu().sum(0).exp() - 1).max().item())
print("get", met.counter_value("UncachedCompile"))
"""


@pytest.mark.parametrize("variable", ["SYNC_TENSORS_OPBYOP", "GET_TENSORS_OPBYOP"])
def test_op_by_op_runs_one_computation_per_op_with_the_same_values(variable):
    graph = run_python(OP_BY_OP, {"PJRT_DEVICE": "CPU"})
    op_by_op = run_python(OP_BY_OP, {"PJRT_DEVICE": "CPU", variable: "1"})
    assert graph.returncode == 0 and op_by_op.returncode == 0, op_by_op.stderr
    whole = dict(line.split(" ", 1) for line in graph.stdout.splitlines())
    split = dict(line.split(" ", 1) for line in op_by_op.stdout.splitlines())
    value, eager = split["value"].split()
    assert abs(float(value) - float(eager)) <= 1e-4 * abs(float(eager))
    assert split["value"].split()[0] == whole["value"].split()[0]
    assert (int(whole["sync"]), int(whole["get"])) == (1, 2)  # one graph per sync
    if variable == "SYNC_TENSORS_OPBYOP":  # mul, add, relu, sum: one computation each
        assert (int(split["sync"]), int(split["get"])) == (4, 5)
    else:  # exp, sub, max one by one at the fetch
        assert (int(split["sync"]), int(split["get"])) == (1, 4)
