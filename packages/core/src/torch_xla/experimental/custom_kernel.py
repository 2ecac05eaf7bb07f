"""PyTorch/XLA's `torch_xla.experimental.custom_kernel`: its kernels' device-independent
parts.

PyTorch/XLA's module holds Pallas kernels for TPUs (flash and paged attention, grouped
matmul), compiled by JAX's Pallas into Mosaic custom calls for one chip family. This
project's kernels are whatever the device's plugin lowers XLA ops to, so the module
gives what a program calls, computed by XLA ops that every device compiles:

- `flash_attention(q, k, v, causal, q_segment_ids, kv_segment_ids, sm_scale, *, ab,
  partition_spec, mesh)`, and `torch.ops.xla.flash_attention(q, k, v, casual)`: the
  attention PyTorch/XLA's kernel computes (the same masks, bias, scale and mask value),
  as one fused XLA computation in the step's graph (XLA fuses the softmax; it does not
  tile over the sequence as the Pallas kernel does, so memory grows with
  q_seq_len * kv_seq_len). Autograd goes through it; with `partition_spec` in SPMD mode
  its inputs and output are laid out that way and XLA's partitioner splits the work.
- `repeat_with_fixed_output_size`, a `repeat_interleave` whose output size is fixed
  when the program is built (XLA needs static shapes: `torch.repeat_interleave` with a
  tensor of repeats has a data-dependent size, which would need the repeats' values on
  the host).
"""

from __future__ import annotations

from typing import Any

import torch

import torch_xla.distributed.spmd as xs
from torch_xla.core.xla_model import XLA_LIB


def repeat_with_fixed_output_size(input: torch.Tensor, repeats: torch.Tensor,
                                  total_repeat_length: int) -> torch.Tensor:
    """`torch.repeat_interleave(input, repeats)` cut or padded to `total_repeat_length`
    elements: longer repeats are truncated, and missing elements repeat `input`'s last
    value. `input` and `repeats` are 1-d tensors of equal length; everything stays on
    the device (no value is read on the host)."""
    if input.dim() != 1 or repeats.dim() != 1:
        raise ValueError(f"repeat_with_fixed_output_size takes 1-d input and repeats, got "
                         f"shapes {tuple(input.shape)} and {tuple(repeats.shape)}")
    if input.shape[0] != repeats.shape[0]:
        raise ValueError(f"input has {input.shape[0]} elements but repeats has "
                         f"{repeats.shape[0]}; give one repeat count per element")
    if input.shape[0] == 0:
        raise ValueError("repeat_with_fixed_output_size needs at least one element: the "
                         "output is padded with the input's last value")
    if total_repeat_length < 0:
        raise ValueError(f"total_repeat_length must be >= 0, got {total_repeat_length}")
    # Output position j holds the element whose run of repeats covers j: the number of
    # runs ending at or before j (the cumulative sums are where runs end); positions past
    # the last run take the last element.
    ends = torch.cumsum(repeats, dim=0)
    positions = torch.arange(total_repeat_length, device=input.device, dtype=ends.dtype)
    index = torch.searchsorted(ends, positions, right=True).clamp(max=input.shape[0] - 1)
    return input[index]


# What masked logits become, PyTorch/XLA's (and its Pallas kernel's) value: finite, so that a
# row with every position masked averages `v` instead of giving NaN.
DEFAULT_MASK_VALUE = -0.7 * float(torch.finfo(torch.float32).max)


def flash_attention(
    q: torch.Tensor,  # [batch, heads, q_seq_len, head_dim]
    k: torch.Tensor,  # [batch, heads, kv_seq_len, head_dim]
    v: torch.Tensor,  # [batch, heads, kv_seq_len, head_dim]
    causal: bool = False,
    q_segment_ids: torch.Tensor | None = None,  # [batch, q_seq_len]
    kv_segment_ids: torch.Tensor | None = None,  # [batch, kv_seq_len]
    sm_scale: float = 1.0,
    *,
    ab: torch.Tensor | None = None,  # [batch, heads, q_seq_len, kv_seq_len]
    partition_spec: tuple | None = None,
    mesh: Any = None,
) -> torch.Tensor:
    """`softmax(((q @ k^T) + ab) * sm_scale + mask) @ v` per batch and head, as
    PyTorch/XLA's flash attention computes it: `sm_scale` defaults to 1 (not
    1/sqrt(head_dim)); `causal` masks key positions after the query's
    (`j > i`); segment ids let a query see only keys of its own segment; masked logits
    become `DEFAULT_MASK_VALUE`. Logits and softmax are computed in float32; the output
    has `q`'s dtype.

    `partition_spec` (over q, k, v, `ab` and the output: usually the batch and head
    dimensions, e.g. `("data", None, None, None)`) with `mesh` (default: the global
    mesh) lays them out in SPMD mode; segment ids take its batch and sequence axes. In a
    body traced on fake tensors (a `scan` or `scan_layers` layer) the layout is left to
    XLA's sharding propagation: the values are the same."""
    _check_attention_args(q, k, v, q_segment_ids, kv_segment_ids, ab)
    if partition_spec is not None and torch._guards.detect_fake_mode((q, k, v)) is not None:
        partition_spec = None  # traced on fake tensors (a scan's body): XLA propagates
    if partition_spec is not None:
        mesh = mesh if mesh is not None else xs.get_global_mesh()
        if mesh is None:
            raise ValueError("flash_attention(partition_spec=...) needs a mesh: pass "
                             "mesh=, or set one with xs.set_global_mesh(mesh).")
        q, k, v = (xs.mark_sharding(t, mesh, partition_spec).global_tensor for t in (q, k, v))
        if ab is not None:
            ab = xs.mark_sharding(ab, mesh, partition_spec).global_tensor
        if q_segment_ids is not None:
            ids_spec = (partition_spec[0], partition_spec[2])
            q_segment_ids = xs.mark_sharding(q_segment_ids, mesh, ids_spec).global_tensor
            kv_segment_ids = xs.mark_sharding(kv_segment_ids, mesh, ids_spec).global_tensor
    logits = torch.einsum("bhqd,bhkd->bhqk", q.float(), k.float())
    if ab is not None:
        logits = logits + ab.float()
    if sm_scale != 1.0:
        logits = logits * sm_scale
    keep = None
    if q_segment_ids is not None:
        keep = (q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :])
    if causal:
        rows = torch.arange(q.shape[2], device=q.device)[:, None]
        cols = torch.arange(k.shape[2], device=q.device)[None, :]
        keep = (cols <= rows) if keep is None else keep & (cols <= rows)
    if keep is not None:
        logits = logits.masked_fill(~keep, DEFAULT_MASK_VALUE)
    weights = torch.softmax(logits, dim=-1)
    out = torch.einsum("bhqk,bhkd->bhqd", weights, v.float()).to(q.dtype)
    if partition_spec is not None:
        out = xs.mark_sharding(out, mesh, partition_spec).global_tensor
    return out


def _check_attention_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          q_segment_ids: torch.Tensor | None,
                          kv_segment_ids: torch.Tensor | None,
                          ab: torch.Tensor | None) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("flash_attention takes q, k and v of shape [batch, heads, seq_len, "
                         f"head_dim]; got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        raise ValueError(f"flash_attention: k {tuple(k.shape)} and v {tuple(v.shape)} must "
                         f"have one shape, with q's {tuple(q.shape)} batch, heads and "
                         "head_dim")
    if (q_segment_ids is None) != (kv_segment_ids is None):
        raise ValueError("flash_attention needs both q_segment_ids and kv_segment_ids, or "
                         "neither")
    if q_segment_ids is not None and (
            tuple(q_segment_ids.shape) != (q.shape[0], q.shape[2])
            or tuple(kv_segment_ids.shape) != (k.shape[0], k.shape[2])):
        raise ValueError(f"flash_attention: segment ids of shapes {tuple(q_segment_ids.shape)}"
                         f" and {tuple(kv_segment_ids.shape)} must be [batch, q_seq_len] "
                         f"{(q.shape[0], q.shape[2])} and [batch, kv_seq_len] "
                         f"{(k.shape[0], k.shape[2])}")
    want = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if ab is not None and tuple(ab.shape) != want:
        raise ValueError(f"flash_attention: ab has shape {tuple(ab.shape)}, not [batch, heads, "
                         f"q_seq_len, kv_seq_len] {want}")


XLA_LIB.define("flash_attention(Tensor q, Tensor k, Tensor v, bool casual=False) -> Tensor")


@torch.library.impl(XLA_LIB, "flash_attention", "CompositeImplicitAutograd")
def _flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        casual: bool = False) -> torch.Tensor:
    """`torch.ops.xla.flash_attention` (PyTorch/XLA's op, its argument spelled `casual`):
    made of ATen ops, so it runs, differentiates and traces on every device."""
    return flash_attention(q, k, v, causal=casual)
