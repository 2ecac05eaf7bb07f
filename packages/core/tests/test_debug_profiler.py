"""`torch_xla.debug.profiler` (xp): the events a trace records, the files it writes, the
server and its client, and one trace per process under xmp.spawn.

Traces are read back with the XSpace reader jaxlib ships (`jax.profiler.ProfileData`),
so the tests look at events (name, thread, time, arguments), not at bytes.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import run_python
from jax.profiler import ProfileData

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
from torch_xla.pjrt.client import TRACE_COMPILE, TRACE_EXECUTE, TRACE_TRANSFER_TO_DEVICE

RUNTIME_EVENTS = (TRACE_TRANSFER_TO_DEVICE, TRACE_COMPILE, TRACE_EXECUTE)


def events(path: Path) -> list[dict]:
    """Every event of the trace file: name, plane, line, start/end (ns) and arguments."""
    found = []
    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for e in line.events:
                start = e.start_ns
                found.append(dict(name=e.name, plane=plane.name, line=line.name, start=start,
                                  end=start + e.duration_ns, stats=dict(e.stats)))
    return found


def named(found: list[dict], name: str) -> list[dict]:
    return [e for e in found if e["name"] == name]


def trace_files(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("plugins/profile/*/*.xplane.pb"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# --- a trace taken in the program -------------------------------------------------------


def train(model: torch.nn.Module, steps: int, traced: bool) -> list[float]:
    """SGD on a fixed batch; with `traced`, each step is a StepTrace and the forward a Trace."""
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 32).reshape(8, 4).to(device)
    y = torch.arange(8.0).reshape(8, 1).to(device)
    losses = []
    for i in range(steps):
        step = xp.StepTrace("train_step", step_num=i) if traced else contextlib.nullcontext()
        with step:
            optimizer.zero_grad()
            with xp.Trace("my_forward") if traced else contextlib.nullcontext():
                loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
    return losses


def test_trace_records_scopes_steps_and_runtime_events(tmp_path):
    torch.manual_seed(0)
    eager = torch.nn.Linear(4, 1)
    model = copy.deepcopy(eager).to(torch_xla.device())
    xp.start_trace(tmp_path)
    losses = train(model, steps=3, traced=True)
    xp.stop_trace()

    # Profiling changes nothing computed: the same steps in eager on the CPU.
    assert losses == pytest.approx(train(eager, steps=3, traced=False), rel=1e-5)
    (path,) = trace_files(tmp_path)
    assert path.name == f"{socket.gethostname()}.xplane.pb"
    found = events(path)
    steps = named(found, "train_step")
    assert sorted(e["stats"]["step_num"] for e in steps) == [0, 1, 2]
    assert all(e["stats"]["_r"] == 1 for e in steps)  # marked as steps for the step view
    forwards = named(found, "my_forward")
    assert len(forwards) == 3
    for forward, step in zip(sorted(forwards, key=lambda e: e["start"]),
                             sorted(steps, key=lambda e: e["start"]), strict=True):
        assert step["start"] <= forward["start"] <= forward["end"] <= step["end"]
    for name in RUNTIME_EVENTS:
        assert named(found, name), f"no {name} event in the trace"


def test_step_trace_syncs_on_exit_inside_its_event(tmp_path):
    device = torch_xla.device()
    a = torch.ones(3, device=device)
    torch_xla.sync()
    before = (met.metric_data("ExecuteTime") or (0,))[0]
    xp.start_trace(tmp_path)
    with xp.StepTrace("step_with_pending_work", step_num=7):
        b = a * 3 + 1
    executed = (met.metric_data("ExecuteTime") or (0,))[0] - before
    xp.stop_trace()
    assert executed == 1  # the pending graph ran when the step ended
    assert xp.get_tracer_marked_step()
    assert torch.equal(b.cpu(), torch.full((3,), 4.0))
    found = events(trace_files(tmp_path)[0])
    (step,) = named(found, "step_with_pending_work")
    executes = [e for e in named(found, TRACE_EXECUTE) if e["line"] == step["line"]]
    assert any(step["start"] <= e["start"] <= e["end"] <= step["end"] for e in executes)


def test_marking_a_step_inside_a_scope_raises_with_the_scope_label():
    """As PyTorch/XLA: a step marked inside an open scope is an error naming the
    innermost scope `name.N`; reset_scope=False allows it; StepTrace marks its step after
    closing its scope; the scope stack is empty again after the error."""
    x = torch.ones(2, device=torch_xla.device())
    with xp.Trace("outer_scope"):
        with xp.Trace("inner_scope"):
            y = x + 1
            with pytest.raises(RuntimeError, match=r"Expecting scope to be empty but it is "
                                                   r"inner_scope\.\d+"):
                xm.mark_step()
            with pytest.raises(RuntimeError, match=r"but it is inner_scope\.\d+"):
                torch_xla.sync()
        with pytest.raises(RuntimeError, match=r"but it is outer_scope\.\d+"):
            torch_xla._XLAC._xla_step_marker()
        torch_xla.sync(reset_scope=False)  # PyTorch/XLA's way to allow it
    assert y.cpu().tolist() == [2.0, 2.0]

    @xp.trace_me("decorated_step")
    def step():
        xm.mark_step()

    with pytest.raises(RuntimeError, match=r"but it is decorated_step\.\d+"):
        step()
    with xp.StepTrace("a_step"):
        z = x * 3
    assert z.cpu().tolist() == [3.0, 3.0]
    xm.mark_step()  # no scope left open by any of the above


def test_trace_me_names_every_call(tmp_path):
    @xp.trace_me("decorated_call")
    def double(t: torch.Tensor) -> torch.Tensor:
        return t * 2

    xp.start_trace(tmp_path)
    outs = [double(torch.tensor([float(i)])) for i in range(2)]
    xp.stop_trace()
    assert [o.item() for o in outs] == [0.0, 2.0]
    assert double.__name__ == "double"
    assert len(named(events(trace_files(tmp_path)[0]), "decorated_call")) == 2


def test_trace_keeps_its_name_and_arguments(tmp_path):
    xp.start_trace(tmp_path)
    with xp.Trace("with_args", batch=4) as scope:
        assert scope.name == "with_args"
    xp.stop_trace()
    (event,) = named(events(trace_files(tmp_path)[0]), "with_args")
    assert event["stats"]["batch"] == 4


def test_perfetto_trace_holds_the_scopes(tmp_path):
    xp.start_trace(tmp_path, create_perfetto_trace=True)
    with xp.Trace("for_perfetto"):
        y = torch.ones(4, device="xla") * 2
    torch_xla.sync()
    xp.stop_trace()
    assert y.cpu().tolist() == [2.0] * 4
    (path,) = tmp_path.glob("plugins/profile/*/*.perfetto_trace.json.gz")
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    assert "metadata" not in trace
    assert any(e.get("name") == "for_perfetto" for e in trace["traceEvents"])


def test_trace_names_the_device_instructions_of_its_ops(tmp_path):
    # Ops recorded inside `Trace`s carry the scopes in their HLO metadata, so the device's
    # part of a trace (its HLO, in the xplane file) names them too; ops outside do not.
    device = torch_xla.device()
    a = torch.linspace(-1, 1, 7 * 5, device=device).reshape(7, 5)
    with xp.Trace("outer_block"):
        with xp.Trace("inner_block"):
            b = (a @ a.T).relu()
    c = b + 1
    torch_xla.sync()
    xp.start_trace(tmp_path)
    with xp.Trace("outer_block"):
        with xp.Trace("inner_block"):
            b = (a @ a.T).relu()
    c = b + 1
    torch_xla.sync(wait=True)
    xp.stop_trace()
    expected = (a.cpu() @ a.cpu().T).relu() + 1
    assert torch.allclose(c.cpu(), expected)
    data = trace_files(tmp_path)[0].read_bytes()
    assert b"outer_block/inner_block/aten__mm" in data
    assert b"outer_block/inner_block/aten__relu" in data
    assert b"inner_block/aten__add" not in data  # recorded outside the scopes


def test_trace_scopes_name_a_pure_function_and_recompile_nothing(tmp_path):
    from torch_xla.experimental.assume_pure import assume_pure

    @assume_pure
    def product(x, y):
        with xp.Trace("pure_scope"):
            return torch.matmul(x, y)

    device = torch_xla.device()
    a = torch.linspace(0, 1, 6 * 6, device=device).reshape(6, 6)
    torch_xla.sync()
    first = product(a, a)
    torch_xla.sync()
    compiles = met.metric_data("CompileTime")[0]
    xp.start_trace(tmp_path)
    out = product(a, a)  # replayed: the scope was recorded with the function
    torch_xla.sync(wait=True)
    xp.stop_trace()
    assert torch.equal(out.cpu(), first.cpu())
    assert torch.allclose(out.cpu(), a.cpu() @ a.cpu())
    assert met.metric_data("CompileTime")[0] == compiles
    assert b"pure_scope/aten__mm" in trace_files(tmp_path)[0].read_bytes()
    # A scope is a name, not part of the program: the same ops under another scope (or
    # none) reuse the compiled program.
    with xp.Trace("another_scope"):
        again = torch.matmul(a, a)
    torch_xla.sync()
    plain = torch.matmul(a, a)
    torch_xla.sync()
    assert met.metric_data("CompileTime")[0] == compiles + 1
    assert torch.equal(again.cpu(), plain.cpu())


def test_trace_scopes_belong_to_their_thread():
    from torch_xla.lazy import functional

    device = torch_xla.device()
    a = torch.ones(3, device=device)
    opened, recorded = threading.Event(), threading.Event()

    def hold_a_scope():
        with xp.Trace("other_thread"):
            opened.set()
            recorded.wait(60)

    thread = threading.Thread(target=hold_a_scope)
    thread.start()
    opened.wait(60)
    b = a * 2  # recorded while another thread has a scope open
    recorded.set()
    thread.join()
    with xp.Trace("this_thread"):
        c = b + 1
    assert functional.unwrap(b)._node.scope is None
    assert functional.unwrap(c)._node.scope == "this_thread/"
    assert torch.equal(c.cpu(), torch.full((3,), 3.0))


def test_one_trace_at_a_time(tmp_path):
    xp.start_trace(tmp_path)
    try:
        with pytest.raises(RuntimeError, match="Only one profile may be run at a time."):
            xp.start_trace(tmp_path / "other")
    finally:
        xp.stop_trace()
    with pytest.raises(RuntimeError, match="No profile started"):
        xp.stop_trace()


# --- the server and its client ----------------------------------------------------------


def test_server_port_is_checked():
    with pytest.raises(RuntimeError, match="port 0 is invalid"):
        xp.start_server(0, only_on_master=False)
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port}.*choose a free port"):
            xp.start_server(port, only_on_master=False)


def test_trace_rejects_a_malformed_address(tmp_path):
    with pytest.raises(ValueError, match="host:port"):
        xp.trace("localhost", str(tmp_path))


def test_trace_reports_a_server_that_never_answers(tmp_path):
    with pytest.raises(RuntimeError, match=r"No trace was collected .*UNAVAILABLE"):
        xp.trace(f"localhost:{free_port()}", str(tmp_path), duration_ms=100,
                 timeout_s=0, interval_s=0)


SERVED = """
    import sys, time
    from pathlib import Path
    import torch, torch_xla
    import torch_xla.debug.profiler as xp
    server = xp.start_server({port})
    x = torch.ones(4, device=torch_xla.device())
    stop = Path({stop!r})
    for step in range(6000):
        if stop.exists():
            break
        with xp.StepTrace("served_step", step_num=step):
            with xp.Trace("served_scope"):
                x = x * 1.0001
        if step == 0:
            print("ready", flush=True)  # compiled: every later step runs at once
        time.sleep(0.01)
    del server
"""


def test_trace_captures_from_a_server_in_another_process(tmp_path):
    port, stop = free_port(), tmp_path / "stop"
    program = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SERVED.format(port=port, stop=str(stop)))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PJRT_DEVICE": "CPU"},
    )
    try:
        assert program.stdout.readline().strip() == "ready", program.stderr.read()[-3000:]
        started = time.monotonic()
        xp.trace(f"localhost:{port}", str(tmp_path / "logs"), duration_ms=2000)
        assert time.monotonic() - started >= 2.0  # it blocks for the whole trace
        detached = xp.trace_detached(f"localhost:{port}", str(tmp_path / "more"), duration_ms=500)
        assert detached.is_alive()  # the same, in a thread
        detached.join(timeout=120)
    finally:
        stop.touch()
        program.wait(timeout=120)
    assert program.returncode == 0, program.stderr.read()[-3000:]
    (path,) = trace_files(tmp_path / "logs")
    assert path.name == f"localhost_{port}.xplane.pb"  # the server names it after the address
    found = events(path)
    assert named(found, "served_scope") and named(found, "served_step")
    assert named(found, TRACE_EXECUTE)
    assert len(trace_files(tmp_path / "more")) == 1


# --- several processes, and the cost of importing ---------------------------------------

SPAWNED = """
    import sys
    import torch, torch_xla
    import torch_xla.debug.profiler as xp
    import torch_xla.distributed.xla_multiprocessing as xmp

    def worker(index):
        xp.start_trace(sys.argv[1])
        x = torch.ones(4, device=torch_xla.device())
        with xp.StepTrace("spawned_step", step_num=0):
            with xp.Trace(f"scope_of_process_{index}"):
                x = x + index
        xp.stop_trace()

    if __name__ == "__main__":
        xmp.spawn(worker)
"""


def test_one_trace_per_process_under_spawn(tmp_path):
    script, logs = tmp_path / "spawned.py", tmp_path / "logs"
    script.write_text(textwrap.dedent(SPAWNED))
    env = {k: v for k, v in os.environ.items() if k != "PJRT_DEVICE"}
    result = subprocess.run(
        [sys.executable, str(script), str(logs)], capture_output=True, text=True, timeout=300,
        env={**env, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    files = trace_files(logs)
    host = socket.gethostname()
    assert sorted(p.name for p in files) == [f"{host}_process{k}.xplane.pb" for k in (0, 1)]
    for path in files:
        index = int(path.name.split("_process")[1].split(".")[0])
        found = events(path)
        assert named(found, f"scope_of_process_{index}")
        assert not named(found, f"scope_of_process_{1 - index}")


def test_import_starts_no_runtime_and_torch_xla_stays_free_of_jax():
    result = run_python(
        """
        import sys
        import torch_xla
        assert "jax" not in sys.modules, "import torch_xla imported jax"
        import torch_xla.debug.profiler
        assert not torch_xla._XLAC._xla_runtime_is_initialized()
        print("ok")
        """,
        env={"PJRT_DEVICE": "CPU"},
        fresh=True,  # what an import loads: a real interpreter
    )
    assert result.stdout.strip() == "ok", result.stderr[-3000:]
