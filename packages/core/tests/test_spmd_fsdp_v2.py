"""FSDPv2 (`torch_xla.experimental.spmd_fully_sharded_data_parallel`): partition specs,
auto-wrapping and argument errors in process; training over 4 CPU devices in SPMD mode
checked against the same model trained by eager PyTorch on the CPU."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch
from conftest import run_python

import torch_xla.distributed.spmd as xs
from torch_xla.distributed.fsdp.wrap import (
    lambda_auto_wrap_policy,
    recursive_wrap,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel as FSDPv2,
)
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    _prepare_spmd_partition_spec,
)

TOLERANCE = 1e-5  # f32 on both sides; a sharded matmul only reorders the sums


@pytest.mark.parametrize("shape, kwargs, spec", [
    ((64, 128), {}, ("fsdp", None)),
    ((64, 128), {"shard_maximal": True}, (None, "fsdp")),
    ((8, 8), {"shard_maximal": True}, ("fsdp", None)),  # the first of equal dims
    ((16, 4), {"extra_data_axis": "data"}, (("data", "fsdp"), None)),
    ((), {}, []),  # a scalar stays replicated
])
def test_prepare_spmd_partition_spec(shape, kwargs, spec):
    assert _prepare_spmd_partition_spec(torch.empty(shape), **kwargs) == spec


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.inner(x))


class Tagged(torch.nn.Linear):
    _wrap_overrides = {"tag": "override"}


class Wrapper(torch.nn.Module):
    """Records what it wrapped and the wrapper arguments it got."""

    def __init__(self, module: torch.nn.Module, **kwargs: str) -> None:
        super().__init__()
        self.wrapped, self.kwargs = module, kwargs


def test_recursive_wrap_follows_the_policy():
    model = torch.nn.Sequential(Block(), torch.nn.Linear(4, 2), Block())
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    wrapped, count = recursive_wrap(model, policy, Wrapper, ignored_modules=[],
                                    ignored_params=[], only_wrap_children=True, tag="x")
    assert wrapped is model
    assert [type(m).__name__ for m in model] == ["Wrapper", "Linear", "Wrapper"]
    assert model[0].kwargs == {"tag": "x"} and isinstance(model[0].wrapped, Block)
    assert count == 2 * sum(p.numel() for p in Block().parameters())


def test_wrap_overrides_and_size_policy():
    model = torch.nn.Sequential(Tagged(4, 4), torch.nn.Linear(2, 2))
    recursive_wrap(model, functools.partial(lambda_auto_wrap_policy,
                                            lambda_fn=lambda m: isinstance(m, torch.nn.Linear)),
                   Wrapper, ignored_modules=[], ignored_params=[], only_wrap_children=True,
                   tag="x")
    assert model[0].kwargs == {"tag": "override"} and model[1].kwargs == {"tag": "x"}
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=10)
    assert policy(module=torch.nn.Linear(4, 4), recurse=False, unwrapped_params=20)
    assert not policy(module=torch.nn.Linear(2, 2), recurse=False, unwrapped_params=6)
    assert not policy(module=torch.nn.ModuleList(), recurse=False, unwrapped_params=20)


@pytest.fixture
def no_global_mesh():
    saved = xs.get_global_mesh()
    xs.set_global_mesh(None)
    yield
    xs.set_global_mesh(saved)


@pytest.mark.parametrize("mesh_axes, kwargs, message", [
    (None, {}, "No mesh is provided and no global mesh is set"),
    (("data", "model"), {}, "The mesh must have an axis named 'fsdp'"),
    (("data", "fsdp"), {"extra_data_axis": "ddp"}, "The provided ddp axis is not in the mesh"),
])
def test_mesh_errors(no_global_mesh, mesh_axes, kwargs, message):
    mesh = None if mesh_axes is None else xs.Mesh(np.arange(4), (2, 2), mesh_axes)
    with pytest.raises(ValueError, match=message):
        FSDPv2(torch.nn.Linear(2, 2), mesh=mesh, **kwargs)


def test_modules_without_forward_and_double_wrapping_are_refused():
    mesh = xs.Mesh(np.arange(4), (4,), ("fsdp",))
    with pytest.raises(RuntimeError, match="must define a `forward` method"):
        FSDPv2(torch.nn.ModuleList([torch.nn.Linear(2, 2)]), mesh=mesh)
    fake = FSDPv2.__new__(FSDPv2)  # an already wrapped module, without touching devices
    with pytest.raises(RuntimeError, match="already wrapped with FSDP"):
        FSDPv2(fake, mesh=mesh)


TRAIN = """
import json
import numpy as np
import torch
import torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel as FSDPv2)

xr.use_spmd()


class Tiny(torch.nn.Module):  # transformer-ish: projection, norm, projection
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.relu(self.norm(self.up(x))))


def train(model, device, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        torch.manual_seed(100 + step)
        x, target = torch.randn(8, 16), torch.randn(8, 16)
        x, target = x.to(device), target.to(device)
        if device != "cpu":
            xs.mark_sharding(x, mesh, ("fsdp", None))
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if device != "cpu":
            torch_xla.sync()
        losses.append(loss.item())
    return losses


def shards(t):
    return [s.data.numel() for s in xs.XLAShardedTensor(t).local_shards]


torch.manual_seed(0)
eager = Tiny()
sharded = Tiny()
sharded.load_state_dict(eager.state_dict())
mesh = xs.Mesh(np.arange(4), (4, 1), ("fsdp", "tensor"))
model = FSDPv2(sharded, mesh=mesh)
out = {"specs": {n: torch_xla._XLAC._get_xla_sharding_spec(p)
                 for n, p in model.module.named_parameters()},
       # a view of the parameter reads the sharded storage, not a replicated copy
       "view_shards": {n: shards(p.unsqueeze(0)) for n, p in model.module.named_parameters()},
       "numel": {n: p.numel() for n, p in eager.named_parameters()}}
out["losses"] = [train(eager, "cpu"), train(model, torch_xla.device())]
got = dict(model.module.named_parameters())
out["max_diff"] = {n: (got[n].cpu() - p.detach()).abs().max().item()
                   for n, p in eager.named_parameters()}
out["trained_shards"] = {n: shards(p) for n, p in got.items()}
print(json.dumps(out))
"""


def _expected_spec(shape: list[int]) -> str:
    tiles = [1] * len(shape)
    tiles[shape.index(max(shape))] = 4
    return f"{{devices=[{','.join(map(str, tiles))}]0,1,2,3}}"


def test_training_matches_eager_and_parameters_stay_sharded():
    done = run_python(TRAIN, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    shapes = {n: list(p.shape) for n, p in [
        ("up.weight", torch.empty(32, 16)), ("up.bias", torch.empty(32)),
        ("norm.weight", torch.empty(32)), ("norm.bias", torch.empty(32)),
        ("down.weight", torch.empty(16, 32)), ("down.bias", torch.empty(16))]}
    assert out["specs"] == {n: _expected_spec(s) for n, s in shapes.items()}
    quarter = {n: [k // 4] * 4 for n, k in out["numel"].items()}
    assert out["view_shards"] == quarter
    assert out["trained_shards"] == quarter
    eager_losses, fsdp_losses = out["losses"]
    assert np.allclose(fsdp_losses, eager_losses, atol=TOLERANCE, rtol=0), out["losses"]
    worst = max(out["max_diff"].items(), key=lambda kv: kv[1])
    assert worst[1] <= TOLERANCE, f"parameter {worst[0]} differs by {worst[1]} > {TOLERANCE}"


WRAPPING = """
import functools, json, warnings
import numpy as np
import torch
import torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs
from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel as FSDPv2)

xr.use_spmd()
spec = torch_xla._XLAC._get_xla_sharding_spec
out = {}
mesh = xs.Mesh(np.arange(4), (2, 2, 1), ("data", "fsdp", "tensor"))
xs.set_global_mesh(mesh)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={torch.nn.Linear})
model = FSDPv2(model, auto_wrap_policy=policy, extra_data_axis="data")
out["children"] = [type(m).__name__ for m in model.module]
out["weight"] = spec(model[0].weight)
x = torch.randn(8, 8).to(torch_xla.device())
xs.mark_sharding(x, mesh, (("data", "fsdp"), None))
out["output"] = spec(model(x))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    odd = FSDPv2(torch.nn.Linear(4, 1), mesh=xs.Mesh(np.arange(4), (4,), ("fsdp",)))
out["odd"] = [spec(odd.weight), spec(odd.bias)]
out["warnings"] = [str(w.message) for w in caught if "FSDPv2" in str(w.message)]
print(json.dumps(out))
"""


def test_auto_wrap_extra_data_axis_and_uneven_parameters():
    done = run_python(WRAPPING, env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["children"] == ["SpmdFullyShardedDataParallel", "ReLU",
                               "SpmdFullyShardedDataParallel"]
    # (4, 8) weight: its largest dim (8) on 'fsdp' (2 devices), replicated over 'data'
    assert out["weight"] == "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
    assert out["output"] == "{devices=[4,1]0,1,2,3}"  # batch over ('data', 'fsdp')
    # a (1,) bias cannot split 4 ways: jax holds no padded tiles, so it stays replicated
    assert out["odd"] == ["{devices=[1,4]0,1,2,3}", ""]
    assert len(out["warnings"]) == 1 and "bias (1,)" in out["warnings"][0]
