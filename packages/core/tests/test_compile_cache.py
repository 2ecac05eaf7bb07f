"""The persistent compilation cache: a second process compiles nothing, and a damaged
entry or an unwritable folder costs a warning and a recompilation, never the run."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable

import forked_python
import pytest
from conftest import run_python

from torch_xla.pjrt import cache

TRAIN = """
import json, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import torch_xla.runtime as xr

xr.initialize_cache(sys.argv[1] if len(sys.argv) > 1 else {path!r})
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

device = xm.xla_device()
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.Flatten(), nn.Linear(4 * 8 * 8, 10)).to(device)
optimizer = torch.optim.Adam(model.parameters())
x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
losses = []
for _ in range(3):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x.to(device)), y.to(device))
    loss.backward()
    optimizer.step()
    xm.mark_step()
    losses.append(loss.item())
compiles = met.metric_data("CompileTime")
print(json.dumps({{
    "graphs": met.counter_value("UncachedCompile"),
    "disk_hits": met.counter_value("PersistentCacheHit") or 0,
    "disk_misses": met.counter_value("PersistentCacheMiss") or 0,
    "compiles": compiles[0] if compiles else 0,
    "losses": losses,
}}))
"""


def train(path) -> dict:
    result = run_python(TRAIN.format(path=str(path)), {"PJRT_DEVICE": "CPU"}, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_second_process_loads_every_graph_from_the_cache(tmp_path):
    first = train(tmp_path / "cache")
    assert first["graphs"] >= 1 and first["compiles"] == first["graphs"]
    assert first["disk_hits"] == 0 and first["disk_misses"] == first["graphs"]
    second = train(tmp_path / "cache")
    assert second["compiles"] == 0  # nothing compiled...
    assert second["disk_hits"] == first["graphs"]  # ...every graph came from disk
    assert second["disk_misses"] == 0
    assert second["losses"] == first["losses"]  # and computes the same


def test_corrupt_entries_are_recompiled_with_a_warning(tmp_path):
    first = train(tmp_path / "cache")
    entries = list((tmp_path / "cache").iterdir())
    for entry in entries:
        entry.write_bytes(b"\0garbage")
    result = run_python(TRAIN.format(path=str(tmp_path / "cache")), {"PJRT_DEVICE": "CPU"},
                        timeout=300)
    assert result.returncode == 0, result.stderr
    again = json.loads(result.stdout.strip().splitlines()[-1])
    assert again["compiles"] == first["graphs"] and again["losses"] == first["losses"]
    assert again["disk_misses"] == first["graphs"] and again["disk_hits"] == 0
    # one warning per entry, saying why
    assert result.stderr.count("ignoring unreadable compilation cache entry") == len(entries)
    assert result.stderr.count("shorter than the 44-byte header") == len(entries)


# --- damaged entries: verified before XLA sees a byte ----------------------

# Compiles a tiny graph by key for each line read from stdin, so that the test can damage
# the entry between runs; one process serves every region, and a crash ends it for all.
COMPILE_ON_REQUEST = """
import json, sys, warnings
import numpy as np
import torch_xla.runtime as xr
import torch_xla.debug.metrics as met
from torch_xla.pjrt import client

xr.initialize_cache(sys.argv[1])
runtime = client()
x = runtime.to_device(np.arange(6.0).reshape(2, 3))
GRAPHS = {"graph": lambda a: (a * 2).sum(), "other": lambda a: (a * 3).sum()}

def totals():
    compiles = met.metric_data("CompileTime")
    return met.counter_value("PersistentCacheHit") or 0, compiles[0] if compiles else 0

for line in sys.stdin:
    key = line.strip()
    hits, compiles = totals()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = float(runtime.compile(key, GRAPHS[key], x)(x))
    now_hits, now_compiles = totals()
    print(json.dumps({"value": value, "hit": now_hits - hits, "compiled": now_compiles - compiles,
                      "warnings": [str(w.message) for w in caught]}), flush=True)
"""


class Compiler:
    """The COMPILE_ON_REQUEST process; `run(key)` is one compile-or-load and its outcome."""

    def __init__(self, folder, log) -> None:
        self.log = log
        with open(log, "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-c", COMPILE_ON_REQUEST, str(folder)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={**os.environ, "PJRT_DEVICE": "CPU"},
            )
        self.watchdog = threading.Timer(240, self.process.kill)
        self.watchdog.start()

    def run(self, key: str, region: str = "") -> dict:
        self.process.stdin.write(key + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:  # a crash (SIGSEGV, SIGILL...) or the watchdog
            code = self.process.wait()
            raise AssertionError(f"the process died (exit {code}) loading the entry damaged at "
                                 f"{region!r}:\n{self.log.read_text()[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        self.watchdog.cancel()
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0, self.log.read_text()[-3000:]


def flip(offset) -> Callable[[bytes, bytes], bytes]:
    """Invert one byte; a negative offset counts from the end, a callable gets the entry."""

    def damage(entry: bytes, other: bytes) -> bytes:
        at = offset(entry) if callable(offset) else offset % len(entry)
        return entry[:at] + bytes([entry[at] ^ 0xFF]) + entry[at + 1:]

    return damage


def key_end(entry: bytes) -> int:
    return cache.HEADER.size + cache.HEADER.unpack_from(entry)[2]


# (region, damage(entry, entry of another key), what the warning says); the layout is
# magic (8) | checksum (32) | key length (4) | key | payload.
DAMAGE = [
    ("magic", flip(0), "not a torch_xla cache entry"),
    ("magic version byte", flip(7), "not a torch_xla cache entry"),
    ("checksum, first byte", flip(8), "checksum mismatch"),
    ("checksum, last byte", flip(39), "checksum mismatch"),
    ("key length", flip(40), "checksum mismatch"),
    ("key, first byte", flip(cache.HEADER.size), "checksum mismatch"),
    ("key, last byte", flip(lambda e: key_end(e) - 1), "checksum mismatch"),
    ("payload, first byte", flip(key_end), "checksum mismatch"),
    ("payload, middle", flip(lambda e: (key_end(e) + len(e)) // 2), "checksum mismatch"),
    ("payload, last byte", flip(-1), "checksum mismatch"),
    ("truncated in the header", lambda e, o: e[:20], "truncated"),
    ("truncated in the key", lambda e, o: e[:key_end(e) - 3], "checksum mismatch"),
    ("truncated by half", lambda e, o: e[:len(e) // 2], "checksum mismatch"),
    ("truncated by one byte", lambda e, o: e[:-1], "checksum mismatch"),
    ("empty file", lambda e, o: b"", "truncated"),
    ("one appended byte", lambda e, o: e + b"\0", "checksum mismatch"),
    ("a second entry appended", lambda e, o: e + e, "checksum mismatch"),
    ("the entry of another graph", lambda e, o: o, "its key differs"),
    ("the old format (a bare pickle)", lambda e, o: pickle.dumps((e, None, None)),
     "not a torch_xla cache entry"),
]


def test_every_damaged_region_of_an_entry_is_one_warning_and_a_rewrite(tmp_path):
    folder = tmp_path / "cache"
    compiler = Compiler(folder, tmp_path / "stderr.log")
    try:
        fresh = compiler.run("graph")
        assert (fresh["hit"], fresh["compiled"], fresh["warnings"]) == (0, 1, [])
        (entry_path,) = folder.iterdir()
        compiler.run("other")  # a valid entry of another graph, computing another value
        other = next(p for p in folder.iterdir() if p != entry_path).read_bytes()
        good = entry_path.read_bytes()
        assert compiler.run("graph") == {**fresh, "hit": 1, "compiled": 0}
        for region, damage, reason in DAMAGE:
            entry_path.write_bytes(damage(good, other))
            damaged = compiler.run("graph", region)
            assert damaged["value"] == fresh["value"], region
            assert (damaged["hit"], damaged["compiled"]) == (0, 1), region  # recompiled
            assert len(damaged["warnings"]) == 1, (region, damaged["warnings"])
            (warning,) = damaged["warnings"]
            assert "ignoring unreadable compilation cache entry" in warning, region
            assert str(entry_path) in warning and reason in warning, (region, warning)
            rewritten = compiler.run("graph", region)  # the rewritten entry is whole again
            assert rewritten == {**fresh, "hit": 1, "compiled": 0}, region
    finally:
        compiler.close()
    assert len([p for p in folder.iterdir() if p.suffix == ".xla"]) == 2
    assert [p.name for p in folder.iterdir() if p.suffix != ".xla"] == []  # no temporary file


@pytest.mark.parametrize(("damage", "reason"), [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_decode_refuses_every_damaged_region(damage, reason):
    payload = bytes(range(256))
    entry = cache.encode("key", payload)
    assert cache.decode(entry, "key") == payload
    with pytest.raises(cache.BadEntry, match=reason):
        cache.decode(damage(entry, cache.encode("another key", payload)), "key")


# --- a folder that cannot be written: one warning, then the run goes on -------

UNWRITABLE = """
import json, resource, shutil, sys, warnings
import numpy as np
import torch_xla.runtime as xr
import torch_xla.debug.metrics as met
from torch_xla.pjrt import client

folder, how = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")  # a warning per compile would show as several
    xr.initialize_cache(folder)
    runtime = client()
    x = runtime.to_device(np.arange(6.0).reshape(2, 3))
    if how == "vanished":
        shutil.rmtree(folder)
    if how == "full":  # files may not grow past 1 KiB: every write fails (EFBIG), as when full
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    values = [float(runtime.compile(f"graph-{k}", lambda a, k=k: (a * k).sum(), x)(x))
              for k in (1, 2, 3)]
print(json.dumps({"values": values, "warnings": [str(w.message) for w in caught],
                  "compiles": met.metric_data("CompileTime")[0]}))
"""


def compile_three_graphs(folder, how: str = "") -> dict:
    result = forked_python.run(["-c", UNWRITABLE, str(folder), how],
                               env={**os.environ, "PJRT_DEVICE": "CPU"}, timeout=120)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["values"] == [15.0, 30.0, 45.0] and outcome["compiles"] == 3
    return outcome


def test_a_folder_under_a_regular_file_is_one_warning(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    outcome = compile_three_graphs(tmp_path / "file" / "cache")
    (warning,) = outcome["warnings"]
    assert "cannot create the compilation cache folder" in warning
    assert str(tmp_path / "file" / "cache") in warning and "running without" in warning


@pytest.mark.parametrize("how", ["vanished", "full"])
def test_a_folder_that_vanishes_or_fills_up_is_one_warning(tmp_path, how):
    folder = tmp_path / "cache"
    outcome = compile_three_graphs(folder, how)
    (warning,) = outcome["warnings"]
    assert f"cannot write the compilation cache {folder}" in warning, warning
    assert ("FileNotFoundError" if how == "vanished" else "File too large") in warning
    if how == "full":
        assert list(folder.iterdir()) == []  # the partial temporary file was removed


# sysfs refuses to create files even for root, whom a chmod'ed folder would not stop.
@pytest.mark.skipif(not os.path.isdir("/sys/kernel"), reason="needs Linux's sysfs at /sys")
def test_a_folder_that_refuses_writes_even_to_root_is_one_warning():
    (warning,) = compile_three_graphs("/sys/kernel")["warnings"]
    assert "cannot write the compilation cache /sys/kernel (PermissionError" in warning


CLEAR = """
import json, os, sys
import torch, torch_xla
import torch_xla.runtime as xr
import torch_xla.debug.metrics as met

folder, readonly = sys.argv[1], sys.argv[2] == "readonly"
if readonly:  # filled by an earlier writable run
    xr.initialize_cache(folder, readonly=True)
else:
    xr.initialize_cache(folder)
x = torch.arange(6.0).to("xla")
values = [(x * 2).sum().item(), (x + 1).sum().item()]
before = xr.get_num_cached_compilation_graph()
xr.clear_computation_cache()
after = xr.get_num_cached_compilation_graph()
files = sorted(os.listdir(folder))
compiles = met.counter_value("UncachedCompile")
values.append((x * 2).sum().item())  # compiled again
print(json.dumps({"before": before, "after": after, "files": files, "values": values,
                  "recompiled": met.counter_value("UncachedCompile") - compiles}))
"""


def clear_in_process(folder, mode: str = "") -> dict:
    result = forked_python.run(["-c", CLEAR, str(folder), mode],
                               env={**os.environ, "PJRT_DEVICE": "CPU"}, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_clear_computation_cache_drops_programs_in_memory_and_on_disk(tmp_path):
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "notes.txt").write_text("not an entry")  # not the cache's: kept
    outcome = clear_in_process(folder)
    assert outcome["before"] >= 2 and outcome["after"] == 0
    assert outcome["files"] == ["notes.txt"]
    assert outcome["values"] == [30.0, 21.0, 30.0] and outcome["recompiled"] == 1


def test_clear_computation_cache_leaves_a_read_only_cache_on_disk(tmp_path):
    folder = tmp_path / "cache"
    train(folder)  # a writable run fills it
    entries = sorted(os.listdir(folder))
    assert entries
    outcome = clear_in_process(folder, "readonly")
    assert outcome["after"] == 0 and outcome["files"] == entries
