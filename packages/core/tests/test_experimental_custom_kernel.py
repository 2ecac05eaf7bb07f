"""`torch_xla.experimental.custom_kernel`: `repeat_with_fixed_output_size` (reference:
`torch.repeat_interleave` on the CPU, cut or padded with the last value) and
`flash_attention` (reference: `F.scaled_dot_product_attention` on the CPU with the same
masks written as an additive mask)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import run_spmd

import torch_xla
import torch_xla.debug.metrics as met
from torch_xla.experimental.custom_kernel import (
    DEFAULT_MASK_VALUE,
    flash_attention,
    repeat_with_fixed_output_size,
)


def reference(values, repeats, total):
    base = torch.repeat_interleave(values, repeats)[:total]
    return torch.cat([base, values[-1:].expand(total - base.shape[0])])


@pytest.mark.parametrize("repeats,total", [
    ([0, 1, 2, 0, 4, 0, 6, 7, 8, 9], 20),      # truncated
    ([0, 5, 2, 0, 4, 9, 6, 7, 8, 0], 100),     # padded with the last value
    ([3, 6, 2, 14, 27, 47, 8, 28, 0, 1], 135),
    ([0] * 10, 4),                              # no repeats at all
    ([1] * 10, 0),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_matches_repeat_interleave_on_the_device(repeats, total, dtype):
    values = (torch.randn(10) * 10).to(dtype)
    repeats = torch.tensor(repeats)
    device = torch_xla.device()
    met.clear_all()
    out = repeat_with_fixed_output_size(values.to(device), repeats.to(device), total)
    torch_xla.sync()
    assert not [n for n in met.counter_names() if n.startswith("aten::")]  # no CPU fallback
    assert out.shape == (total,) and out.dtype == dtype
    assert torch.equal(out.cpu(), reference(values, repeats, total))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="takes 1-d input and repeats"):
        repeat_with_fixed_output_size(torch.ones(2, 2), torch.ones(2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="one repeat count per element"):
        repeat_with_fixed_output_size(torch.ones(3), torch.ones(2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="at least one element"):
        repeat_with_fixed_output_size(torch.ones(0), torch.ones(0, dtype=torch.long), 3)


# --- flash_attention -----------------------------------------------------------------------

B, H, L, S, D = 2, 3, 5, 7, 4
Q_SEGMENTS = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 1]])
KV_SEGMENTS = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [0, 1, 0, 0, 0, 1, 1]])  # every row sees a key


def attention_inputs(dtype=torch.float32):
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator).to(dtype)
            for shape in ((B, H, L, D), (B, H, S, D), (B, H, S, D), (B, H, L, S))]


def sdpa_reference(q, k, v, ab=None, causal=False, segments=False, sm_scale=1.0):
    """PyTorch/XLA's flash attention written as PyTorch's own attention on the CPU."""
    keep = torch.ones(L, S, dtype=torch.bool)
    if segments:
        keep = Q_SEGMENTS[:, None, :, None] == KV_SEGMENTS[:, None, None, :]
    if causal:
        keep = keep & (torch.arange(S)[None, :] <= torch.arange(L)[:, None])
    mask = torch.where(keep, 0.0, float("-inf"))
    if ab is not None:
        mask = mask + ab * sm_scale
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sm_scale)


@pytest.mark.parametrize("causal, segments, bias, sm_scale", [
    (False, False, False, 1.0),
    (True, False, False, 0.5),
    (False, True, True, 1.0),
    (True, True, True, 0.25),
])
def test_flash_attention_matches_attention_on_the_cpu(causal, segments, bias, sm_scale):
    q, k, v, ab = [t.requires_grad_() for t in attention_inputs()]
    want = sdpa_reference(q, k, v, ab if bias else None, causal, segments, sm_scale)
    device = torch_xla.device()
    xq, xk, xv, xab = [t.detach().to(device).requires_grad_() for t in (q, k, v, ab)]
    ids = dict(q_segment_ids=Q_SEGMENTS.to(device),
               kv_segment_ids=KV_SEGMENTS.to(device)) if segments else {}
    got = flash_attention(xq, xk, xv, causal, sm_scale=sm_scale, ab=xab if bias else None,
                          **ids)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    want.backward(grad)
    got.backward(grad.to(device))
    for name, cpu, xla in zip("qkv", (q, k, v), (xq, xk, xv), strict=True):
        torch.testing.assert_close(xla.grad.cpu(), cpu.grad, rtol=1e-4, atol=1e-5, msg=name)
    if bias:
        torch.testing.assert_close(xab.grad.cpu(), ab.grad, rtol=1e-4, atol=1e-5)


def test_flash_attention_keeps_the_dtype_and_averages_fully_masked_rows():
    q, k, v, _ = attention_inputs(torch.bfloat16)
    device = torch_xla.device()
    got = flash_attention(q.to(device), k.to(device), v.to(device), causal=True,
                          q_segment_ids=torch.ones(B, L, dtype=torch.int32).to(device),
                          kv_segment_ids=torch.zeros(B, S, dtype=torch.int32).to(device))
    assert got.dtype == torch.bfloat16
    # Every key is masked: the logits all become DEFAULT_MASK_VALUE, so each row is v's mean.
    want = v.float().mean(dim=2, keepdim=True).expand(B, H, L, D).to(torch.bfloat16)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=1e-2)
    assert DEFAULT_MASK_VALUE == -0.7 * torch.finfo(torch.float32).max


def test_the_xla_flash_attention_op_runs_on_every_device_and_compiles_whole():
    q, k, v, _ = attention_inputs()
    want = sdpa_reference(q, k, v, causal=True)
    torch.testing.assert_close(torch.ops.xla.flash_attention(q, k, v, True), want,
                               rtol=1e-5, atol=1e-5)  # the CPU: the same math
    device = torch_xla.device()
    compiled = torch.compile(lambda a, b, c: torch.ops.xla.flash_attention(a, b, c, True),
                             backend="openxla", fullgraph=True)
    got = compiled(q.to(device), k.to(device), v.to(device))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args, kwargs, message", [
    (((B, H, L, D), (B, H, S, D), (B, H, S, D + 1)), {}, "must have one shape"),
    (((B, H, L), (B, H, S, D), (B, H, S, D)), {}, "batch, heads, seq_len"),
    (((B, H, L, D), (B, H, S, D), (B, H, S, D)), {"q_segment_ids": (B, L)}, "or neither"),
    (((B, H, L, D), (B, H, S, D), (B, H, S, D)),
     {"q_segment_ids": (B, S), "kv_segment_ids": (B, S)}, "batch, q_seq_len"),
    (((B, H, L, D), (B, H, S, D), (B, H, S, D)), {"ab": (B, H, L, L)}, "ab has shape"),
])
def test_flash_attention_says_which_shape_is_wrong(args, kwargs, message):
    device = torch_xla.device()
    tensors = [torch.zeros(shape, device=device) for shape in args]
    kwargs = {name: torch.zeros(shape, device=device) for name, shape in kwargs.items()}
    with pytest.raises(ValueError, match=message):
        flash_attention(*tensors, **kwargs)


def test_flash_attention_with_a_partition_spec_is_sharded_and_equal():
    """SPMD over 4 devices: batch on "data", heads on "model"; the output keeps that layout."""
    q, k, v, ab = attention_inputs()
    want = sdpa_reference(q, k, v, ab, causal=True, segments=True, sm_scale=0.5)
    out = run_spmd(f"""
        import json
        import numpy as np
        import torch, torch_xla
        import torch_xla.runtime as xr
        import torch_xla.distributed.spmd as xs
        from torch_xla.experimental.custom_kernel import flash_attention
        xr.use_spmd()
        mesh = xs.Mesh(np.arange(4), (2, 2, 1, 1), ("data", "model", "seq", "dim"))
        g = torch.Generator().manual_seed(0)
        q, k, v, ab = [torch.randn(s, generator=g).to("xla")
                       for s in ({(B, H, L, D)}, {(B, H, S, D)}, {(B, H, S, D)}, {(B, H, L, S)})]
        ids = torch.tensor({Q_SEGMENTS.tolist()}).to("xla")
        kv_ids = torch.tensor({KV_SEGMENTS.tolist()}).to("xla")
        out = flash_attention(q, k, v, True, ids, kv_ids, 0.5, ab=ab,
                              partition_spec=("data", "model", None, None), mesh=mesh)
        spec = torch_xla._XLAC._get_xla_sharding_spec(out)

        # Inside scan_layers (traced on fake tensors): the same values.
        from torch_xla.experimental.scan_layers import scan_layers
        class Layer(torch.nn.Module):
            def __init__(self, scale):
                super().__init__()
                self.scale = torch.nn.Parameter(torch.tensor(scale))
            def forward(self, x):
                return flash_attention(x * self.scale, x, x, causal=True,
                                       partition_spec=("data", "model", None, None), mesh=mesh)
        layers = torch.nn.ModuleList([Layer(1.5), Layer(0.5)]).to("xla")
        looped = layers[1](layers[0](q))
        scanned = scan_layers(layers, q)
        print(json.dumps([out.cpu().tolist(), spec, looped.cpu().tolist(),
                          scanned.cpu().tolist()]))
        """)
    values, spec, looped, scanned = json.loads(out.strip().splitlines()[-1])
    torch.testing.assert_close(torch.tensor(values), want, rtol=1e-5, atol=1e-5)
    assert spec.startswith("{devices=[2,2,1,1]")
    torch.testing.assert_close(torch.tensor(scanned), torch.tensor(looped), rtol=1e-5,
                               atol=1e-5)
