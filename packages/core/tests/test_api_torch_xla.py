"""The top-level `torch_xla` API: devices, sync/step/compile, seeding, launch, lazy submodules."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import run_python

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met


def counter(name: str) -> int:
    return met.counter_value(name) or 0


def test_import_keeps_jax_out_and_submodules_come_on_first_access():
    result = run_python("""
        import sys
        import torch_xla
        assert "jax" not in sys.modules, "import torch_xla imported jax"
        names = ["runtime", "core", "experimental", "debug", "distributed", "utils"]
        mods = [getattr(torch_xla, n) for n in names]
        assert [m.__name__ for m in mods] == ["torch_xla." + n for n in names]
        assert torch_xla.runtime.device_type() == "CPU"
        assert torch_xla.core.xla_model.xla_device().type == "xla"
        assert callable(torch_xla.core.functions.all_reduce)
        assert torch_xla.xm is torch_xla.core.xla_model  # PyTorch/XLA's short name
        try:
            torch_xla.no_such_thing
        except AttributeError as e:
            assert "no_such_thing" in str(e)
        else:
            raise AssertionError("no AttributeError")
        print("ok")
    """, env={"PJRT_DEVICE": "CPU"}, fresh=True)  # what an import loads: a real interpreter
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_devices_of_a_process_with_four():
    result = run_python("""
        import torch, torch_xla
        assert torch_xla.device() == torch.device("xla:0")
        assert torch_xla.device(3) == torch.device("xla:3")
        assert torch_xla.devices() == [torch.device(f"xla:{i}") for i in range(4)]
        assert torch_xla.real_devices() == [f"CPU:{i}" for i in range(4)]
        assert torch_xla.device_count() == 4
        try:
            torch_xla.device(4)
        except IndexError as e:
            assert "4" in str(e)
        else:
            raise AssertionError("no IndexError")
        print("ok")
    """, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"})
    assert result.returncode == 0, result.stderr


def test_sync_runs_pending_work_and_step_closures():
    seen = []
    t = torch.ones(3, device=torch_xla.device()) * 3
    xm.add_step_closure(lambda: seen.append("closure"))
    before = counter("MarkStep")
    torch_xla.sync(wait=True)
    assert counter("MarkStep") == before + 1
    assert seen == ["closure"]
    assert torch.equal(t.cpu(), torch.full((3,), 3.0))


def test_step_syncs_on_entry_and_exit_even_when_the_block_raises():
    before = counter("MarkStep")
    with torch_xla.step():
        torch.ones(2, device=torch_xla.device())
    assert counter("MarkStep") == before + 2
    with pytest.raises(ValueError, match="inside"), torch_xla.step():
        raise ValueError("inside")
    assert counter("MarkStep") == before + 4


def test_compile_matches_eager_and_syncs_around_each_call():
    def f(x):
        return torch.sin(x) + torch.cos(x)

    compiled = torch_xla.compile(f)
    x = torch.randn(5)
    before = counter("MarkStep")
    out = compiled(x.to(torch_xla.device()))
    assert counter("MarkStep") == before + 2
    assert out.device.type == "xla"
    torch.testing.assert_close(out.cpu(), f(x))
    with torch_xla.compile():
        y = f(x.to(torch_xla.device()))
    torch.testing.assert_close(y.cpu(), f(x))


def test_compile_full_graph_accepts_one_graph_and_rejects_a_host_read():
    x = torch.randn(4, device=torch_xla.device())

    @torch_xla.compile(full_graph=True)
    def one_graph(x):
        return (x * 2).sum()

    one_graph(x)

    def reads_host(x):
        y = x * 2
        if y.sum().item() > -1e9:  # a host read: the first half runs as its own graph
            return y + 1
        return y

    with pytest.raises(RuntimeError, match="reads_host needed 2 graphs") as raised:
        torch_xla.compile(reads_host, full_graph=True)(x)
    # PyTorch/XLA's words first: its tests match them
    assert str(raised.value).startswith(
        "Unexpected execution happens inside the compiled function, exiting")
    # without full_graph the same function is allowed
    torch.testing.assert_close(torch_xla.compile(reads_host)(x).cpu(), x.cpu() * 2 + 1)


def test_manual_seed_repeats_random_numbers():
    device = torch_xla.device()
    torch_xla.manual_seed(42)
    a = torch.rand(4, device=device).cpu()
    torch_xla.manual_seed(42)
    b = torch.rand(4, device=device).cpu()
    assert torch.equal(a, b)
    assert xm.get_rng_state() != 42  # the state moved on


def _launched(index, out_dir):
    import torch_xla.runtime as xr

    with open(f"{out_dir}/{index}", "w") as f:
        f.write(f"{xr.global_ordinal()} {xr.world_size()}")


def test_launch_calls_fn_directly_under_torchrun(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("LOCAL_RANK", "0")
    calls = []
    torch_xla.launch(lambda index, a: calls.append((index, a)), args=("x",))
    assert calls == [(0, "x")]


def test_launch_debug_single_process_runs_here(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    torch_xla.launch(_launched, args=(str(tmp_path),), debug_single_process=True)
    assert (tmp_path / "0").read_text() == "0 1"


def test_launch_spawns_one_process_per_device(tmp_path):
    result = run_python(f"""
        import torch_xla
        from test_api_torch_xla import _launched
        if __name__ == "__main__":
            torch_xla.launch(_launched, args=({str(tmp_path)!r},))
    """, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2",
              "PYTHONPATH": ":".join(sys.path)}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["0 2", "1 2"]
