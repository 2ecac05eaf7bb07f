"""`torch_xla.lazy.analysis`: PyTorch/XLA's PT_XLA_DEBUG_LEVEL output, cause by cause.

The texts are PyTorch/XLA's (`debug_util.cpp`, `metrics_analysis.cc`), which its own test
(`test/debug_tool/test_pt_xla_debug.py`, through `extract_debug_helper.py`) parses: a
cause on the line after "Compilation Cause"/"Execution Cause", the graph's hash, inputs and
outputs after "Graph Info", the sizes after "Post Compilation Analysis". Each test uses
shapes of its own, so that its graphs compile in it (the program cache is per process).
"""

from __future__ import annotations

import re
import sys

import pytest
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
import torch_xla.distributed.parallel_loader as pl
from torch_xla.lazy import analysis
from torch_xla.utils.utils import SampleGenerator

USER_STEP = "user mark_step"
VALUE_READ = "most likely user code trying to access tensor value before mark_step"


@pytest.fixture
def debug(monkeypatch, tmp_path):
    """Turn the tool on at a level (into a file, read back by `debug.read()`); every
    variable is back as it was after the test."""
    path = tmp_path / "debug.txt"

    class Debug:
        @staticmethod
        def level(level: int, **env: str) -> None:
            for name in ("PT_XLA_DEBUG", "PT_XLA_DEBUG_MAX_FRAME", "PJRT_LOCAL_PROCESS_RANK"):
                monkeypatch.delenv(name, raising=False)
            monkeypatch.setenv("PT_XLA_DEBUG_LEVEL", str(level))
            monkeypatch.setenv("PT_XLA_DEBUG_FILE", str(path))
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            analysis.configure()

        @staticmethod
        def read() -> str:
            return path.read_text() if path.exists() else ""

    xm.mark_step()  # nothing of an earlier test pending
    yield Debug
    monkeypatch.undo()
    analysis.configure()


@pytest.fixture
def metrics():
    """No metrics of earlier tests (the analysis at each step reads them)."""
    met.clear_all()
    yield
    met.clear_all()


def blocks(text: str, prefix: str) -> list[dict]:
    """Each analysis block of `prefix` ("Compilation", "Execution"): cause, hash, inputs,
    outputs and frames."""
    found = []
    for block in re.findall(rf"^{prefix} Analysis: =+\n(.*?)^{prefix} Analysis: =+\n", text,
                            re.DOTALL | re.MULTILINE):
        lines = [line.split("Analysis: ", 1)[1] for line in block.splitlines()]
        frames_at = lines.index("Python Frame Triggered Execution: ")
        found.append({
            "title": lines[0],
            "cause": lines[1].strip(),
            "hash": lines[3].split("Graph Hash: ")[1],
            "inputs": int(lines[4].split("Number of Graph Inputs: ")[1]),
            "outputs": int(lines[5].split("Number of Graph Outputs: ")[1]),
            "frames": [line.strip() for line in lines[frames_at + 1:] if not line.startswith("-")],
        })
    return found


def causes(text: str, prefix: str) -> list[str]:
    return [b["cause"] for b in blocks(text, prefix)]


# --- the level ------------------------------------------------------------------------


@pytest.mark.parametrize("env, level", [
    ({}, 0),
    ({"PT_XLA_DEBUG": "1"}, 100),
    ({"PT_XLA_DEBUG": "0"}, 0),
    ({"PT_XLA_DEBUG_LEVEL": "1"}, 1),
    ({"PT_XLA_DEBUG": "1", "PT_XLA_DEBUG_LEVEL": "2"}, 2),
    ({"PT_XLA_DEBUG": "1", "PT_XLA_DEBUG_LEVEL": "0"}, 0),
])
def test_the_level_is_pytorch_xlas(env, level):
    assert analysis.debug_level(env) == level


def test_a_level_that_is_not_a_number_is_an_error_naming_it():
    with pytest.raises(ValueError, match="PT_XLA_DEBUG_LEVEL='two'"):
        analysis.debug_level({"PT_XLA_DEBUG_LEVEL": "two"})


def test_off_writes_nothing(debug, device):
    debug.level(0)
    t = torch.randn(2, 11, device=device)  # noqa: F841 (pending until the step)
    xm.mark_step()
    assert debug.read() == ""


# --- compilations and executions --------------------------------------------------------


def test_a_user_mark_step_compiles_and_runs_one_graph(debug, device):
    debug.level(2)
    t = torch.randn(2, 12, device=device)  # noqa: F841 (pending until the step)
    xm.mark_step()
    text = debug.read()
    (compiled,) = blocks(text, "Compilation")
    (executed,) = blocks(text, "Execution")
    assert compiled["title"] == "Compilation Cause" and executed["title"] == "Execution Cause"
    assert compiled["cause"] == executed["cause"] == USER_STEP
    assert compiled["hash"] == executed["hash"] and re.fullmatch("[0-9a-f]{32}", compiled["hash"])
    assert (executed["inputs"], executed["outputs"]) == (1, 1)  # the RNG seed; the tensor
    # the first frame is the step's, then this test
    first = compiled["frames"][0]
    assert first.startswith("mark_step (") and "xla_model.py" in first
    assert compiled["frames"][1].startswith("test_a_user_mark_step_compiles_and_runs_one_graph (")
    # compilation, then its sizes, then execution
    assert text.index("Compilation Cause") < text.index("Post Compilation Analysis") \
        < text.index("Execution Cause")


def test_post_compilation_analysis_gives_the_sizes_in_gigabytes(debug, device):
    debug.level(1)
    t = torch.ones(256, 1024, device=device) * 2  # 1 MiB out
    xm.mark_step()
    text = debug.read()
    sizes = dict(re.findall(r"Post Compilation Analysis: ([A-Za-z ]+ size): (.*)\n", text))
    assert list(sizes) == ["Graph input size", "Graph output size", "Aliased Input size",
                           "Intermediate tensor size", "Compiled program size"]
    assert all(v.endswith(" GB") for v in sizes.values()), sizes
    assert float(sizes["Graph output size"].split()[0]) == pytest.approx(2**20 / 2**30, abs=1e-6)
    assert re.search(r"\nComputation hash: [0-9a-f]{32}\n", text)
    del t


def test_level_1_explains_compilations_only(debug, device):
    debug.level(1)
    t = torch.randn(2, 13, device=device)  # noqa: F841 (pending until the step)
    xm.mark_step()
    text = debug.read()
    assert causes(text, "Compilation") == [USER_STEP]
    assert "Execution Analysis" not in text
    assert "Post Compilation Analysis" in text


def test_a_cached_graph_is_only_executed(debug, device):
    def step():
        t = torch.full((3, 14), 2.0, device=device).sum()  # noqa: F841
        xm.mark_step()

    step()
    debug.level(2)
    step()
    text = debug.read()
    assert causes(text, "Compilation") == []
    assert causes(text, "Execution") == [USER_STEP]


def test_torch_xla_sync_is_a_user_mark_step(debug, device):
    debug.level(2)
    t = torch.randn(2, 15, device=device)  # noqa: F841 (pending until the step)
    torch_xla.sync()
    assert causes(debug.read(), "Execution") == [USER_STEP]


def test_a_step_trace_steps_when_its_region_ends(debug, device):
    debug.level(2)
    with xp.StepTrace("train_analysis"):
        t = torch.randn(3, 16, device=device)  # noqa: F841 (pending until the step)
    text = debug.read()
    cause = "mark_step when exiting a profiler StepTrace region"
    assert causes(text, "Compilation") == causes(text, "Execution") == [cause]


def test_the_parallel_loader_steps_at_each_batch_end_and_compiles_once(debug, device):
    debug.level(2)
    batches = SampleGenerator(data=(torch.zeros(4, 17), torch.zeros(4)), sample_count=3)
    for data, _ in pl.MpDeviceLoader(batches, device):
        dummy = data + 100  # noqa: F841
    text = debug.read()
    cause = "mark_step in parallel loader at step end"
    assert causes(text, "Compilation") == [cause]
    assert causes(text, "Execution") == [cause] * 3
    infos = blocks(text, "Compilation") + blocks(text, "Execution")
    assert {(b["hash"], b["inputs"], b["outputs"]) for b in infos} == \
        {(infos[0]["hash"], 2, 1)}  # data and 100 in, the sum out


@pytest.mark.parametrize("read, columns", [(print, 18), (torch.Tensor.item, 27),
                                           (torch.Tensor.cpu, 28)], ids=["print", "item", "cpu"])
def test_reading_a_pending_value_is_the_users_code(debug, device, read, columns, capsys):
    debug.level(2)
    t = torch.randn(5, columns, device=device)
    read(t.sum() if read is torch.Tensor.item else t)
    text = debug.read()
    assert causes(text, "Compilation") == causes(text, "Execution") == [VALUE_READ]


def test_torch_xla_compile_steps_before_and_after_the_function(debug, device):
    x = torch.randn(2, 19, device=device)
    debug.level(2)

    @torch_xla.compile
    def double(t):
        return t * 2

    double(x)
    assert causes(debug.read(), "Execution") == [
        "torch_xla.compile clear the pending graph prior calling the target function",
        "torch_xla.compile"]
    del x


def test_dynamo_syncs_its_inputs_compiles_its_graph_and_runs_it(debug, device):
    torch._dynamo.reset()
    t = torch.randn(4, 20, device=device)
    debug.level(2)
    compiled = torch.compile(lambda x: x * 100, backend="openxla")
    compiled(t)
    text = debug.read()
    assert causes(text, "Compilation") == ["mark_step when dynamo processing input graphs",
                                           "dynamo is compiling a FX graph to HLO"]
    assert causes(text, "Execution") == ["mark_step when dynamo processing input graphs",
                                         "dynamo is executing a compiled program"]
    inputs, fx = blocks(text, "Compilation")
    synced, run = blocks(text, "Execution")
    assert inputs["hash"] == synced["hash"] and (synced["inputs"], synced["outputs"]) == (1, 1)
    assert fx["hash"] == run["hash"] and (run["inputs"], run["outputs"]) == (2, 1)  # t, 100
    torch._dynamo.reset()


def test_eager_mode_is_not_analysed(debug, device, metrics):
    debug.level(2)
    torch_xla._XLAC._set_use_eager_mode(True)
    try:
        t = torch.randn(5, 21, device=device) + 1  # noqa: F841
        xm.mark_step()
    finally:
        torch_xla._XLAC._set_use_eager_mode(False)
    assert debug.read() == ""


# --- where the text goes and how much of the stack ----------------------------------------


def test_the_frames_stop_at_the_maximum_with_a_mark(debug, device):
    debug.level(2, PT_XLA_DEBUG_MAX_FRAME="2")

    def deeper(n):
        if n:
            return deeper(n - 1)
        t = torch.randn(2, 22, device=device)  # noqa: F841 (pending until the step)
        xm.mark_step()

    deeper(3)
    (compiled,) = blocks(debug.read(), "Compilation")
    assert compiled["frames"][0].startswith("mark_step (")
    assert compiled["frames"][1].startswith("deeper (")
    assert compiled["frames"][2:] == [".........."]


def test_without_a_file_the_text_goes_to_stderr(debug, device, monkeypatch, capsys):
    debug.level(2)
    monkeypatch.delenv("PT_XLA_DEBUG_FILE")
    analysis.configure()
    t = torch.randn(2, 23, device=device)  # noqa: F841 (pending until the step)
    xm.mark_step()
    err = capsys.readouterr().err
    assert causes(err, "Compilation") == causes(err, "Execution") == [USER_STEP]
    assert debug.read() == ""


def test_only_the_first_process_of_a_host_writes(debug, device):
    debug.level(2, PJRT_LOCAL_PROCESS_RANK="1")
    t = torch.randn(2, 24, device=device)  # noqa: F841 (pending until the step)
    xm.mark_step()
    assert debug.read() == ""


# --- the metrics analysis at each step ----------------------------------------------------


def test_a_graph_compiled_at_every_step_is_too_frequent(debug, device, metrics):
    debug.level(1)
    for n in range(1, 13):
        t = torch.ones(n, 25, device=device) * 3  # noqa: F841
        xm.mark_step()
    text = debug.read()
    assert "pt-xla-profiler: CompileTime too frequent: 11 counts during 11 steps\n" in text
    assert "pt-xla-profiler: CompileTime too frequent: 12 counts during 12 steps\n" in text
    assert "counts during 10 steps" not in text  # ten steps of warm-up


def test_reading_values_at_every_step_is_too_frequent(debug, device, metrics):
    debug.level(1)
    t = torch.ones(2, 26, device=device) * 4
    t.cpu()
    xm.mark_step()
    assert "pt-xla-profiler: TransferFromDeviceTime too frequent: 1 counts during 1 steps\n" \
        in debug.read()


def test_ops_run_on_the_cpu_are_listed(debug, metrics):
    debug.level(1)
    met.clear_all()
    torch_xla._metrics.counter("aten::_ctc_loss").inc()
    torch_xla._metrics.counter("aten::_local_scalar_dense").inc()  # a host read, not an op
    xm.mark_step()
    assert ("pt-xla-profiler: Op(s) not lowered: aten::_ctc_loss,  Please open a GitHub issue "
            "with the above op lowering requests.\n") in debug.read()


def test_the_analysis_module_imports_neither_jax_nor_the_engine():
    source = sys.modules[analysis.__name__].__file__
    with open(source) as f:
        imports = [line for line in f if line.startswith(("import ", "from "))]
    assert not [line for line in imports if "jax" in line or "torch_xla.lazy" in line]


@pytest.fixture
def device():
    return xm.xla_device()
