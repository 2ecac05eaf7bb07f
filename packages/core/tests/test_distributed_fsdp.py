"""FSDP v1 (`torch_xla.distributed.fsdp.XlaFullyShardedDataParallel`).

Reference: the same model trained eagerly on the CPU in one process on whole batches
(`torch_xla.testing.fsdp.expected`); under FSDP each of 2 real processes trains on its
half of every batch, and the shard checkpoints they write, consolidated, must equal the
eager state dict.
"""

from __future__ import annotations

import math
import pickle
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import run_python
from torch import nn

import torch_xla
from torch_xla.distributed.fsdp import (
    XlaFullyShardedDataParallel as FSDP,
)
from torch_xla.distributed.fsdp import (
    checkpoint_module,
    consolidate_sharded_model_checkpoints,
    consolidate_sharded_state_dicts,
)
from torch_xla.testing import fsdp

WORLD = 2
# float32 on both sides; the replicas sum halves of the batch in another order.
TOLERANCE = dict(rtol=1e-5, atol=1e-5)
ROOT_UNITS = 1  # the embedding (tied to the head): the root's only parameter
BLOCK_UNITS = 6  # per block: norm, up, down (weight and bias each)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fsdp")
    out = folder / "results.pkl"
    result = run_python(
        f"""
        import pickle
        import torch_xla.distributed.xla_multiprocessing as xmp
        from torch_xla.testing import fsdp
        results = xmp.spawn(fsdp.worker, args=({str(folder)!r},))
        with open({str(out)!r}, "wb") as f:
            pickle.dump(results, f)
        """,
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": str(WORLD)}, timeout=400,
    )
    assert out.exists(), result.stderr[-3000:]
    return folder, pickle.loads(out.read_bytes())


def _expected(name: str) -> dict:
    config = fsdp.CONFIGS[name]
    return fsdp.expected(max_norm=config.get("max_norm"), accumulate=config.get("accumulate",
                                                                                False))


@pytest.mark.parametrize("name", list(fsdp.CONFIGS))
def test_fsdp_over_two_processes_trains_as_one_process_on_the_whole_batch(trained, name):
    folder, results = trained
    want = _expected(name)
    full, path = consolidate_sharded_model_checkpoints(str(folder / name), "_rank-*-of-*.pth",
                                                       save_model=False)
    assert path is None
    # The consolidated checkpoint has the original module's names, the tied head too.
    assert sorted(full) == sorted(want["state"])
    for key, value in want["state"].items():
        torch.testing.assert_close(full[key], value, **TOLERANCE, msg=key)
    assert full["head.weight"] is full["embed.weight"]
    losses = [(a + b) / 2 for a, b in zip(results[0][name]["losses"],
                                          results[1][name]["losses"], strict=True)]
    torch.testing.assert_close(losses, want["losses"], **TOLERANCE)
    for rank in range(WORLD):
        torch.testing.assert_close(results[rank][name]["norms"], want["norms"], **TOLERANCE)
        # Between steps the module's attributes hold no gathered values.
        assert results[rank][name]["between_steps"] == "meta"


@pytest.mark.parametrize("name", list(fsdp.CONFIGS))
def test_each_process_holds_only_its_shard(trained, name):
    _, results = trained
    model = fsdp.make_model()
    sizes = [p.numel() for p in model.parameters()]  # the embedding (tied) counted once
    shards = results[0][name]["shards"]
    assert results[1][name]["shards"] == shards
    if fsdp.CONFIGS[name].get("shard_param_on_dim_0"):
        want = [(math.ceil(p.shape[0] / WORLD), *p.shape[1:]) for p in model.parameters()]
        assert sorted(shards.values()) == sorted(want)
    elif fsdp.CONFIGS[name].get("flatten_parameters"):
        # one flat parameter per FSDP instance, padded to a multiple of 2 x 128
        blocks = sum(sizes[1:]) // 2
        want = [(math.ceil(n / 256) * 128,) for n in (sizes[0], blocks, blocks)]
        assert sorted(shards.values()) == sorted(want)
    else:
        assert sorted(shards.values()) == sorted((math.ceil(n / 256) * 128,) for n in sizes)


def test_resharding_gathers_the_blocks_parameters_again_for_backward(trained):
    _, results = trained
    counts = {name: results[0][name]["all_gathers"] for name in fsdp.CONFIGS}
    units = ROOT_UNITS + 2 * BLOCK_UNITS
    # Kept from forward to backward: each unit is gathered once per step.
    assert counts["nested_no_reshard"] == units
    assert counts["per_parameter"] == units  # the root keeps its gathers
    # Resharded: the parameters backward reads (each block's norm, up and down weights;
    # biases are not read) are gathered again; a checkpointed block's recomputation reads
    # all but the last bias.
    assert counts["nested"] == units + 2 * 3
    assert counts["nested_dim0"] == units + 2 * 3
    assert counts["nested_checkpointed"] == units + 2 * 5
    assert counts["nested_flat"] == 1 + 2 * 2  # one flat parameter per instance
    # One reduce-scatter per unit and step, also with a no_sync micro-step before it.
    for name in fsdp.CONFIGS:
        want = 3 if fsdp.CONFIGS[name].get("flatten_parameters") else units
        assert results[0][name]["reduce_scatters"] == want, name


def test_xm_optimizer_step_on_shards_is_refused(trained):
    _, results = trained
    for rank in range(WORLD):
        assert "call optimizer.step() instead" in results[rank]["optimizer_step"]


def test_grad_scaler_skips_on_every_rank_when_one_ranks_shard_overflows(trained):
    _, results = trained
    # Without agreement rank 1 (finite gradients) stepped and kept its scale while rank 0
    # skipped and halved it: the replicas would drift apart.
    for rank in range(WORLD):
        assert results[rank]["grad_scaler"] == {"scale": 2.0**15, "stepped": False}


# --- one process ----------------------------------------------------------------------


def _train(model: nn.Module, steps: int = 2, lr: float = 0.1) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    device = torch_xla.device() if isinstance(model, FSDP) else torch.device("cpu")
    losses = []
    for tokens, labels in fsdp.batches(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(tokens.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        torch_xla.sync()
        losses.append(loss.item())
    return losses


def test_compute_dtype_gathers_and_computes_in_it_and_keeps_float32_shards():
    seen = []
    model = FSDP(fsdp.make_model(), compute_dtype=torch.bfloat16)
    model.module.blocks[0].up.register_forward_hook(
        lambda m, inputs, output: seen.append((m.weight.dtype, output.dtype)))
    losses = _train(model)
    want = _train(fsdp.make_model())
    assert seen == [(torch.bfloat16, torch.bfloat16)] * 2
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.module.scale.dtype == torch.bfloat16
    assert model.get_shard_metadata()["buffer_info"] == {
        "_fsdp_wrapped_module.scale": {"_orig_dtype": torch.float32}}
    torch.testing.assert_close(losses, want, rtol=2e-2, atol=2e-2)  # bfloat16 compute
    full = consolidate_sharded_state_dicts([model.state_dict()], model.get_shard_metadata())
    assert full["scale"].dtype == torch.float32


def test_a_module_built_on_the_meta_device_is_initialized_on_the_xla_device():
    with torch.device("meta"):
        model = fsdp.Model()
    wrapped = FSDP(model)
    assert all(p.device.type == "xla" for p in wrapped.parameters())
    # the head is still tied to the embedding: one unit holds both
    assert wrapped.get_shard_metadata()["alias_info"] == {
        "_fsdp_wrapped_module.head.weight": "_fsdp_wrapped_module.embed.weight"}
    assert wrapped.module.scale.device.type == "xla"
    losses = _train(wrapped)
    assert all(math.isfinite(x) for x in losses)
    sizes = sorted(math.ceil(p.numel() / 128) * 128 for p in fsdp.make_model().parameters())
    assert sorted(p.numel() for p in wrapped.parameters()) == sizes


def test_shards_are_listed_under_the_original_names():
    from functools import partial

    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={fsdp.Block})
    model = FSDP(fsdp.make_model(), auto_wrap_policy=policy)
    names = [name for name, _ in model.get_original_names_and_sharded_parameters()]
    assert sorted(names) == sorted(n for n, _ in fsdp.make_model().named_parameters())
    assert [p for _, p in model.get_original_names_and_sharded_parameters()] == \
        list(model.parameters())
    assert model.params_with_grad == []
    _train(model, steps=1)
    assert model.params_with_grad == list(model.parameters())


def test_gradients_of_several_backwards_accumulate_in_the_shards():
    model, reference = FSDP(fsdp.make_model(), flatten_parameters=True), fsdp.make_model()
    device = torch_xla.device()
    for tokens, labels in fsdp.batches(2):
        F.cross_entropy(model(tokens.to(device)), labels.to(device)).backward()
        F.cross_entropy(reference(tokens), labels).backward()
    grads = {name: p.grad.cpu() for name, p in model.named_parameters()}  # shard names
    full = consolidate_sharded_state_dicts([grads], model.get_shard_metadata())
    for name, p in reference.named_parameters():
        torch.testing.assert_close(full[name], p.grad, **TOLERANCE, msg=name)


def test_a_sharded_state_dict_loads_into_a_new_instance():
    trained = FSDP(fsdp.make_model())
    _train(trained)
    torch.manual_seed(5)
    fresh = FSDP(fsdp.Model())
    fresh.load_state_dict(trained.state_dict())
    tokens, _ = fsdp.batches(1)[0]
    with torch.no_grad():
        want = trained(tokens.to(torch_xla.device())).cpu()
        torch.testing.assert_close(fresh(tokens.to(torch_xla.device())).cpu(), want)


def test_inference_without_grad_leaves_no_gathered_values():
    model = FSDP(fsdp.make_model())
    tokens, _ = fsdp.batches(1)[0]
    with torch.no_grad():
        out = model(tokens.to(torch_xla.device()))
    torch.testing.assert_close(out.cpu(), fsdp.make_model()(tokens).detach(), **TOLERANCE)
    assert model.module.embed.weight.device.type == "meta"
    assert model.module.embed.weight.shape == (11, 6)


def test_checkpoint_module_recomputes_with_the_original_forward():
    layer = nn.Linear(3, 2)
    original = layer.forward
    assert checkpoint_module(layer) is layer
    assert layer._xla_checkpointed_forward_original == original
    x = torch.randn(4, 3, requires_grad=True)
    layer(x).sum().backward()
    grad = x.grad.clone()
    x.grad = None
    original(x).sum().backward()
    torch.testing.assert_close(grad, x.grad)


def test_linear_layers_patched_to_einsums_train_as_on_the_cpu():
    """`apply_xla_patch_to_nn_linear` patches every `nn.Linear` of a module, the module
    itself and a checkpointed one included; reference: the unpatched model on the CPU."""
    from torch_xla.distributed.fsdp.utils import apply_xla_patch_to_nn_linear
    from torch_xla.distributed.spmd import xla_patched_nn_linear_forward

    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), checkpoint_module(nn.Linear(4, 2, bias=False)))
    x = torch.randn(5, 2, 3)
    cpu(x.requires_grad_()).sum().backward()
    device = torch_xla.device()
    calls = []

    def counted(layer, input):
        calls.append(layer)
        return xla_patched_nn_linear_forward(layer, input)

    xla = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), checkpoint_module(nn.Linear(4, 2, bias=False)))
    xla.load_state_dict(cpu.state_dict())
    xla.to(device)
    assert apply_xla_patch_to_nn_linear(xla, counted) is xla
    xx = x.detach().to(device).requires_grad_()
    xla(xx).sum().backward()
    assert [id(m) for m in calls] == [id(xla[0]), id(xla[2]), id(xla[2])]  # + recompute
    torch.testing.assert_close(xx.grad.cpu(), x.grad, rtol=1e-5, atol=1e-6)
    for p_cpu, p_xla in zip(cpu.parameters(), xla.parameters(), strict=True):
        torch.testing.assert_close(p_xla.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-6)
    alone = nn.Linear(3, 4).to(device)
    apply_xla_patch_to_nn_linear(alone)  # the module itself is patched too
    assert alone._nn_linear_forward_original.__func__ is nn.Linear.forward
    torch.testing.assert_close(alone(xx).cpu(), alone._nn_linear_forward_original(xx).cpu(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: FSDP(FSDP(nn.Linear(2, 2))), RuntimeError, "already wrapped with FSDP"),
    (lambda: FSDP(nn.ModuleList([nn.Linear(2, 2)])), RuntimeError, "must define a `forward`"),
    (lambda: FSDP(nn.Linear(2, 2), compute_dtype=torch.int32), ValueError,
     "compute_dtype must be one of"),
    (lambda: FSDP(nn.Linear(2, 2), sharding_groups=[[0]]), ValueError,
     "sharding_rank and sharding_world_size must be provided"),
    (lambda: FSDP(nn.Linear(2, 2), reshard=True), TypeError, "unexpected arguments"),
    (lambda: FSDP(_int_parameter()), TypeError, "floating-point parameters"),
])
def test_bad_arguments_raise_clear_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def _int_parameter() -> nn.Module:
    module = nn.Module()
    module.count = nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)
    return module


def test_a_weight_tied_across_units_is_refused():
    from functools import partial

    from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy
    model = fsdp.make_model()
    model.blocks[0].up.weight = nn.Parameter(torch.zeros(12, 6))
    model.extra = nn.Linear(6, 12)
    model.extra.weight = model.blocks[0].up.weight
    policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={fsdp.Block})
    with pytest.raises(ValueError, match="tied weights across FSDP units"):
        FSDP(model, auto_wrap_policy=policy)


def test_consolidation_names_missing_or_unexpected_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="Cannot find any files matching"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "none"), "_rank-*.pth")
    model = FSDP(nn.Linear(3, 2))
    metadata = {**model.get_shard_metadata(), "world_size": 2}
    torch.save({"model": model.state_dict(), "shard_metadata": metadata},
               tmp_path / "ck_rank-0.pth")
    with pytest.raises(ValueError, match="Expecting 2 files"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "ck"), "_rank-*.pth")
    with pytest.raises(ValueError, match="2 ranks but 1 state dicts"):
        consolidate_sharded_state_dicts([model.state_dict()], metadata)
    torch.save({"weights": {}}, tmp_path / "bad_rank-0.pth")
    with pytest.raises(ValueError, match="not an FSDP shard checkpoint"):
        consolidate_sharded_model_checkpoints(str(tmp_path / "bad"), "_rank-*.pth")


def test_the_consolidation_command_writes_the_whole_state_dict(tmp_path):
    model = FSDP(fsdp.make_model(), flatten_parameters=True)
    torch.save({"model": model.state_dict(), "shard_metadata": model.get_shard_metadata()},
               tmp_path / "ck_rank-00000000-of-00000001.pth")
    done = subprocess.run(
        [sys.executable, "-m", "torch_xla.distributed.fsdp.consolidate_sharded_ckpts",
         "--ckpt_prefix", str(tmp_path / "ck"), "--ckpt_suffix", "_rank-*-of-*.pth"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    saved = torch.load(tmp_path / "ck_consolidated.pth")["model"]
    want = fsdp.make_model().state_dict()
    assert sorted(saved) == sorted(want)
    for key, value in want.items():
        torch.testing.assert_close(saved[key], value, msg=key)
