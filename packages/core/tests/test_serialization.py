"""xm.save and torch_xla.utils.serialization: CPU copies, atomic writes, streamed tensors."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap

import forked_python
import pytest
import torch

import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser


@pytest.fixture
def device():
    return xm.xla_device()


def state(device) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to(device)
    return {"model": model.state_dict(), "step": 7, "names": ["a", "b"]}


def assert_same_on_cpu(loaded, original) -> None:
    assert loaded["step"] == 7 and loaded["names"] == ["a", "b"]
    for key, tensor in original["model"].items():
        assert loaded["model"][key].device.type == "cpu"
        torch.testing.assert_close(loaded["model"][key], tensor.cpu(), rtol=0, atol=0)


def test_xm_save_writes_cpu_tensors_loadable_anywhere(tmp_path, device):
    data = state(device)
    path = tmp_path / "ckpt.pt"
    xm.save(data, str(path))
    assert_same_on_cpu(torch.load(path, weights_only=False), data)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left


def test_xm_save_to_a_file_object(tmp_path, device):
    data = state(device)
    with open(tmp_path / "ckpt.pt", "wb") as f:
        xm.save(data, f)
    assert_same_on_cpu(torch.load(tmp_path / "ckpt.pt", weights_only=False), data)


def test_serialization_round_trip_and_replacement(tmp_path, device):
    data = state(device)
    path = str(tmp_path / "ckpt")
    xser.save(data, path)
    xser.save(data, path)  # the second save replaces the first, leaving one tensor folder
    assert_same_on_cpu(xser.load(path), data)
    folders = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(folders) == 1 and len(list(folders[0].iterdir())) == len(data["model"])


def test_serialization_load_refuses_a_plain_torch_file(tmp_path):
    torch.save({"x": torch.ones(1)}, tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="not written by torch_xla.utils.serialization.save"):
        xser.load(str(tmp_path / "plain.pt"))


# Pauses inside its `pause_at`-th torch.save, the file half written, until a line comes on
# stdin: the test kills it there, or saves to the same path meanwhile and then lets it go.
PAUSING_WRITER = """
import sys, torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

pause_at, calls, original = int(sys.argv[2]), 0, torch.save
def pausing_save(obj, f, *args, **kwargs):
    global calls
    original(obj, f, *args, **kwargs)
    calls += 1
    if calls == pause_at:
        f.flush()
        print("writing", flush=True)
        sys.stdin.readline()
torch.save = pausing_save
data = {{"w": torch.full((1000,), 2.0, device=xm.xla_device())}}
{call}
print("done", flush=True)
"""


def start_writer(call: str, path: str, pause_at: int = 1) -> subprocess.Popen:
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PAUSING_WRITER.format(call=call)), path,
         str(pause_at)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert writer.stdout.readline().strip() == "writing"
    return writer


XM_SAVE, XSER_SAVE = "xm.save(data, sys.argv[1])", "xser.save(data, sys.argv[1])"


def savers(call: str):
    if call == XM_SAVE:
        return xm.save, lambda path: torch.load(path, weights_only=False)
    return xser.save, xser.load


# (call, which torch.save it is killed in, what the kill leaves behind)
KILL_POINTS = [
    (XM_SAVE, 1, "the temporary checkpoint file"),
    (XSER_SAVE, 1, "a tensor folder, its first tensor file half written"),
    (XSER_SAVE, 2, "a complete tensor folder and the temporary structure file"),
]


@pytest.mark.parametrize(("call", "pause_at", "left"), KILL_POINTS,
                         ids=[f"{c.split('.')[0]}-{left}" for c, _, left in KILL_POINTS])
def test_a_killed_save_leaves_the_previous_checkpoint_and_no_orphan(tmp_path, device, call,
                                                                   pause_at, left):
    path = str(tmp_path / "ckpt")
    save, load = savers(call)
    save({"w": torch.ones(1000, device=device)}, path)
    before = set(os.listdir(tmp_path))
    writer = start_writer(call, path, pause_at)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=30)
    assert set(os.listdir(tmp_path)) > before, f"expected {left} to be left behind"
    torch.testing.assert_close(load(path)["w"], torch.ones(1000), rtol=0, atol=0)  # still whole
    save({"w": torch.zeros(3, device=device)}, path)  # the next save works, and cleans up
    torch.testing.assert_close(load(path)["w"], torch.zeros(3), rtol=0, atol=0)
    names = sorted(os.listdir(tmp_path))
    assert names[0] == "ckpt" and len(names) == (1 if call == XM_SAVE else 2), names
    assert all(name.startswith("ckpt.tensors-") for name in names[1:]), names


def test_a_save_keeps_the_temporary_file_of_a_live_writer(tmp_path, device):
    path = str(tmp_path / "ckpt")
    writer = start_writer(XM_SAVE, path)
    (temporary,) = os.listdir(tmp_path)
    xm.save({"w": torch.ones(3, device=device)}, path)  # removes abandoned temporaries only
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt", temporary])
    writer.stdin.write("\n")
    writer.stdin.flush()
    assert writer.stdout.readline().strip() == "done" and writer.wait(timeout=120) == 0
    assert os.listdir(tmp_path) == ["ckpt"]  # the writer finished, and its save won
    torch.testing.assert_close(torch.load(path)["w"], torch.full((1000,), 2.0))


def test_only_abandoned_temporary_files_of_the_same_target_are_removed(tmp_path, device):
    abandoned = tmp_path / ".ckpt.0123456789abcdef.tmp"  # our pattern, no writer holds it
    kept = [".other.0123456789abcdef.tmp", ".ckpt.0123456789abcdef.tmp.bak",
            ".ckpt.not-ours.tmp", "ckpt.0123456789abcdef.tmp", ".ckpt.0123456789ABCDEF.tmp"]
    for name in [abandoned.name, *kept]:
        (tmp_path / name).write_bytes(b"partial")
    xm.save({"w": torch.ones(3, device=device)}, str(tmp_path / "ckpt"))
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt", *kept])


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
@pytest.mark.parametrize("save", [xm.save, xser.save], ids=["xm", "xser"])
def test_a_new_checkpoint_gets_the_permissions_torch_save_gives(tmp_path, device, save, umask):
    previous = os.umask(umask)
    try:
        torch.save({"w": torch.ones(3)}, tmp_path / "reference.pt")
        save({"w": torch.ones(3, device=device)}, str(tmp_path / "ckpt"))
    finally:
        os.umask(previous)
    expected = mode(tmp_path / "reference.pt")
    assert expected == 0o666 & ~umask
    written = [tmp_path / "ckpt", *tmp_path.glob("ckpt.tensors-*/*")]
    assert {str(p): mode(p) for p in written} == {str(p): expected for p in written}


@pytest.mark.parametrize("save", [xm.save, xser.save], ids=["xm", "xser"])
def test_a_replaced_checkpoint_keeps_its_mode_as_with_torch_save(tmp_path, device, save):
    for name in ("reference.pt", "ckpt"):
        torch.save({"w": torch.zeros(3)}, tmp_path / name)
        os.chmod(tmp_path / name, 0o640)
    torch.save({"w": torch.ones(3)}, tmp_path / "reference.pt")
    save({"w": torch.ones(3, device=device)}, str(tmp_path / "ckpt"))
    assert mode(tmp_path / "ckpt") == mode(tmp_path / "reference.pt") == 0o640


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --- errors name the path the user gave ---------------------------------------

@pytest.mark.parametrize("save", [xm.save, xser.save], ids=["xm", "xser"])
def test_saving_into_a_missing_folder_names_the_path(tmp_path, device, save):
    path = str(tmp_path / "missing" / "ckpt")
    with pytest.raises(FileNotFoundError) as raised:
        save({"w": torch.ones(3, device=device)}, path)
    assert raised.value.filename == path
    assert str(raised.value) == (
        f"[Errno 2] No such file or directory (the folder {str(tmp_path / 'missing')!r} does "
        f"not exist; create it first): {path!r}"
    )
    assert ".tmp" not in str(raised.value) and ".tensors-" not in str(raised.value)
    assert os.listdir(tmp_path) == []


# Files may not grow past 4 KiB in this process: a big checkpoint fails mid-write (EFBIG),
# as on a full disk, after the small one before it was written whole.
FILLING_WRITER = """
import resource, sys, torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

save = xm.save if sys.argv[2] == "xm" else xser.save
save({"w": torch.ones(3, device=xm.xla_device())}, sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
big = {"tensor": {"w": torch.ones(100_000, device=xm.xla_device())},
       "structure": {"w": torch.ones(3, device=xm.xla_device()), "notes": "x" * 100_000}}
try:
    save(big[sys.argv[3]], sys.argv[1])
except OSError as error:
    print(type(error).__name__, error.filename, "|", error)
"""


@pytest.mark.parametrize(("which", "big"), [("xm", "tensor"), ("xser", "tensor"),
                                            ("xser", "structure")])
def test_a_write_that_fails_midway_names_the_path_and_leaves_the_old_file(tmp_path, which, big):
    path = str(tmp_path / "ckpt")
    result = forked_python.run(["-c", FILLING_WRITER, path, which, big], timeout=120)
    assert result.returncode == 0, result.stderr
    reported = result.stdout.strip()
    assert reported == f"OSError {path} | [Errno 27] File too large: {path!r}"
    loaded = torch.load(path) if which == "xm" else xser.load(path)
    torch.testing.assert_close(loaded["w"], torch.ones(3))
    assert len(os.listdir(tmp_path)) == (1 if which == "xm" else 2)  # nothing else left


def test_loading_a_missing_checkpoint_names_the_path(tmp_path):
    path = str(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError) as raised:
        xser.load(path)
    assert raised.value.filename == path


def test_loading_a_damaged_checkpoint_names_the_path(tmp_path):
    path = tmp_path / "ckpt"
    path.write_bytes(b"\x80\x04 not a checkpoint")
    with pytest.raises(RuntimeError, match=f"Cannot load checkpoint {str(path)!r}: it is damaged"):
        xser.load(str(path))


def test_a_damaged_or_missing_tensor_file_names_the_checkpoint(tmp_path, device):
    path = str(tmp_path / "ckpt")
    xser.save({"w": torch.ones(3, device=device)}, path)
    (tensor_file,) = tmp_path.glob("ckpt.tensors-*/tensor_0.pt")
    tensor_file.write_bytes(tensor_file.read_bytes()[:40])
    with pytest.raises(RuntimeError, match=f"Cannot load checkpoint {path!r}: it is damaged "
                                           f"\\(its tensor file {str(tensor_file)!r}\\)"):
        xser.load(path)
    tensor_file.unlink()
    with pytest.raises(FileNotFoundError, match=f"Checkpoint {path!r} is incomplete"):
        xser.load(path)


def test_serialization_computes_pending_tensors_in_one_graph(tmp_path, device):
    import torch_xla.debug.metrics as met

    x = torch.arange(6.0, device=device)
    xm.mark_step()
    data = {"a": x * 2, "b": [x + 1, x.sum()], "c": torch.nn.Parameter(x - 3)}
    met.clear_all()
    xser.save(data, str(tmp_path / "ckpt"))
    graphs = (met.counter_value("UncachedCompile") or 0) + (met.counter_value("CachedCompile") or 0)
    assert graphs == 1
    loaded = xser.load(str(tmp_path / "ckpt"))
    torch.testing.assert_close(loaded["b"][1], torch.tensor(15.0))
    torch.testing.assert_close(loaded["c"], torch.arange(6.0) - 3)


PEAK_DURING_SAVE = """
import ctypes, gc, sys, torch
import torch_xla.core.xla_model as xm
import torch_xla.utils.serialization as xser

def rss(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024

device = xm.xla_device()
state = {}
for i in range(6):  # six 16 MB tensors
    state[f"w{i}"] = torch.full((4 * 2**20,), float(i)).to(device)
xm.mark_step()
xm.wait_device_ops()
gc.collect()
ctypes.CDLL("libc.so.6").malloc_trim(0)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # restart the high-water mark from here
before = rss("VmRSS")
(xser.save if sys.argv[2] == "xser" else xm.save)(state, sys.argv[1])
print(rss("VmHWM") - before)
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux >= 4.0")
def test_serialization_holds_one_tensor_on_the_host_at_a_time(tmp_path):
    """The save's own peak of resident memory: about one tensor (16 MB), not the model (96 MB)."""

    # Every allocation of 1 MB or more gets its own mapping, returned on free: glibc would
    # otherwise serve some from its heap, whose layout can leave a freed copy unreusable.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}

    def peak(method: str) -> float:
        out = subprocess.run(
            [sys.executable, "-c", PEAK_DURING_SAVE, str(tmp_path / method), method],
            capture_output=True, text=True, check=True, timeout=240, env=env,
        ).stdout
        return float(out.strip().splitlines()[-1])

    assert peak("xser") < 16 * 1.5
    assert peak("xm") > 96 * 0.9  # xm.save holds every CPU copy at once


def test_a_save_to_a_pipe_writes_through_it_and_leaves_it_a_pipe(tmp_path, device):
    """`xm.save(state, os.devnull)` (or a FIFO) writes in place: a rename would replace the
    device with a regular file (as root, even /dev/null, which broke every later read of
    it on this machine)."""
    import io
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    xm.save({"w": torch.arange(4.0).to(device)}, str(fifo))
    reader.join(60)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not reader.is_alive()
    assert torch.equal(torch.load(io.BytesIO(received[0]))["w"], torch.arange(4.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary left
    xm.save({"w": torch.ones(2).to(device)}, os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
