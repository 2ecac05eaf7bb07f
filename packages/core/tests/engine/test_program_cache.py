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
