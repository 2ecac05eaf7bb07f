"""The in-memory cache of compiled graphs is bounded: least recently used out first,
XLA_COMPILATION_CACHE_SIZE sets its size (PyTorch/XLA's name and default, 2048)."""

from __future__ import annotations

import pytest

from torch_xla.lazy import compiler

from .helpers import run_python


def test_least_recently_used_program_goes_first(metrics):
    cache = compiler.ProgramCache(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert cache.get("b") is None and cache.get("a") == "A" and cache.get("c") == "C"
    assert len(cache) == 2
    assert metrics.counter_value("CompilationCacheEvictions") == 1


def test_size_from_the_environment():
    assert compiler.cache_size_from_env({}) == compiler.DEFAULT_CACHE_SIZE == 2048
    assert compiler.cache_size_from_env({"XLA_COMPILATION_CACHE_SIZE": "16"}) == 16
    for bad in ("0", "-3", "lots"):
        with pytest.raises(ValueError, match=f"XLA_COMPILATION_CACHE_SIZE='{bad}'.*at least 1"):
            compiler.cache_size_from_env({"XLA_COMPILATION_CACHE_SIZE": bad})


SHAPES = """
    import torch, torch_xla
    import torch_xla.debug.metrics as met
    from torch_xla.lazy import compiler
    d = torch_xla.device()

    def step(n):
        (torch.ones(n, device=d) * 2).sum().item()

    for n in range(1, 31):
        step(n)
    print("size", len(compiler.cache()), "evicted", met.counter_value("CompilationCacheEvictions"))
    compiled = met.counter_value("UncachedCompile")
    step(30)  # recent: still cached
    print("recent", met.counter_value("UncachedCompile") - compiled)
    step(1)  # evicted long ago: compiled again
    print("old", met.counter_value("UncachedCompile") - compiled)
"""


def test_many_input_shapes_keep_only_the_newest_programs():
    out = run_python(SHAPES, env={"XLA_COMPILATION_CACHE_SIZE": "8"})
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["size"].split()[0] == "8"
    assert int(lines["size"].split()[-1]) >= 22  # 30 graphs (or more) into 8 places
    assert lines["recent"] == "0"
    assert lines["old"] == "1"


def test_the_older_half_goes_when_the_process_runs_short_of_memory_mappings(metrics):
    """XLA:CPU maps each kept program's code in pieces; past half of Linux's cap on a
    process's mappings, every later compilation failed ("LLVM compilation error: Cannot
    allocate memory"). Every 16 programs stored, the cache looks, and drops its older half
    when the process is crowded."""
    crowded = [False]
    cache = compiler.ProgramCache(100, crowded=lambda: crowded[0])
    for i in range(32):
        cache.put(i, str(i))
    assert len(cache) == 32
    for i in range(32, 47):
        cache.put(i, str(i))
    crowded[0] = True
    cache.put(47, "47")  # the 48th program stored: a check, and the process is crowded
    assert len(cache) == 24
    assert cache.get(23) is None and cache.get(24) == "24" and cache.get(47) == "47"
    assert metrics.counter_value("CompilationCacheMappingEvictions") == 1
    assert metrics.counter_value("CompilationCacheEvictions") == 24


def test_the_mapping_count_reads_this_process():
    """On Linux the check reads the real counts; a cap no process reaches is never crowded."""
    limit = compiler._mapping_limit()
    if limit is None:
        assert not compiler.mappings_crowded(None)
        return
    assert limit > 0
    assert not compiler.mappings_crowded(10**9)
    assert compiler.mappings_crowded(1)


def test_a_graph_the_compiler_rejects_is_reported_with_its_ops(monkeypatch, device):
    """XLA:GPU refuses integer convolutions with only "UNIMPLEMENTED: " (seen on an
    H200): the error keeps its type and XLA's words, and adds the device and the graph's
    ops with their input types. The rejecting compiler is injected here; the CPU's
    compiles integer convolutions."""
    import jax
    import torch

    import torch_xla.runtime as xr
    from torch_xla.pjrt.client import Client

    def rejecting(self, *args, **kwargs):
        raise jax.errors.JaxRuntimeError("UNIMPLEMENTED: ")

    monkeypatch.setattr(Client, "_compile", rejecting)
    x = torch.ones(2, 3, 4, 4, dtype=torch.int64, device=device)
    w = torch.ones(5, 3, 3, 3, dtype=torch.int64, device=device)
    with pytest.raises(jax.errors.JaxRuntimeError) as error:
        torch.nn.functional.conv2d(x, w).cpu()
    message = str(error.value)
    assert message.startswith(f"The {xr.device_type()} compiler rejected a graph of")
    assert "UNIMPLEMENTED" in message
    assert "aten.convolution.default(int64[2, 3, 4, 4], int64[5, 3, 3, 3])" in message
    assert "cast its inputs" in message


def test_a_rejected_graph_lists_at_most_a_dozen_ops():
    class Node:
        def __init__(self, op):
            self.op, self.rule, self.inputs = op, len, []

    message = compiler.rejected_graph_message(
        "INTERNAL: no", [Node(f"aten.op{i}") for i in range(20)])
    assert "aten.op11()" in message and "aten.op12" not in message
    assert "20 distinct ops" in message and "and 8 more" in message
