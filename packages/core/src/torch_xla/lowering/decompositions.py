"""The torch._decomp decompositions the engine applies to ops with no native lowering.

Source order: PyTorch's Core ATen decompositions (`core_aten_decompositions()`, the set
torch.export uses), then any other entry of `torch._decomp.decomposition_table` for ops
that still have neither, then our own (`OWN`, for ops torch has no decomposition and no
meta kernel for: the engine needs a meta kernel to record a lowering), and our corrections
of torch's (`_corrected_decompositions.CORRECTED`, where torch's decomposition disagrees
with its own CPU kernel).
Ops we lower natively are left out, so a native lowering always wins over a
decomposition.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch._ops import OpOverload

from torch_xla._corrected_decompositions import CORRECTED
from torch_xla.lowering.registry import lookup

# Decompositions we never apply, with the reason.
EXCLUDED: dict[str, str] = {
    # Data-dependent output shapes: these need the CPU fallback, not a rewrite.
    "aten.nonzero.default": "data-dependent output shape",
    "aten.masked_select.default": "data-dependent output shape",
    # torch's decomposition calls .item() / Python control flow on values.
    "aten._local_scalar_dense.default": "is the host read itself",
}


aten = torch.ops.aten
OWN: dict[OpOverload, Callable] = {}


def _own(op: OpOverload) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        if op in OWN:
            raise ValueError(f"{op} already has our decomposition {OWN[op].__qualname__}")
        OWN[op] = fn
        return fn

    return decorate


@functools.cache
def _torch_table() -> dict[OpOverload, Callable]:
    import torch._decomp as decomp

    table = dict(decomp.core_aten_decompositions())
    for op, fn in decomp.decomposition_table.items():
        if isinstance(op, OpOverload):
            table.setdefault(op, fn)
    clashes = [str(op) for op in OWN if op in table]
    if clashes:
        raise ValueError(f"torch now decomposes {clashes}: remove ours from OWN")
    gone = [str(op) for op in CORRECTED if op not in table]
    if gone:
        raise ValueError(f"torch no longer decomposes {gone}: move ours from CORRECTED to OWN")
    table.update(OWN)
    table.update({op: fn for op, (fn, _) in CORRECTED.items()})
    return {op: fn for op, fn in table.items() if str(op) not in EXCLUDED}


def decompositions() -> dict[OpOverload, Callable]:
    """{overload: decomposition} for every overload without a native lowering.

    Computed from the current lowering table on each call, so a lowering registered later
    takes precedence; the torch side is built once.
    """
    return {op: fn for op, fn in _torch_table().items() if lookup(op) is None}


def decomposition_for(op: OpOverload) -> Callable | None:
    """The decomposition the engine should apply to `op`, or None."""
    if lookup(op) is not None:
        return None
    return _torch_table().get(op)


# --- our decompositions ----------------------------------------------------------------


# Comparisons answered with a Python bool: reduced on the device, one host read of the
# answer, as PyTorch/XLA computes them.


@_own(aten.equal.default)
def equal(a, b):
    """`torch.equal`: same sizes and every element equal."""
    if a.shape != b.shape:
        return False
    return bool((a == b).all().item())


@_own(aten.allclose.default)
def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """`torch.isclose(a, b, ...).all()`; written without `isclose`, whose kernel updates in
    place.
    Closeness as `isclose`: equal, or a finite difference within atol + |rtol * b| (bools
    compared in the default float type), NaNs equal with `equal_nan`."""
    torch._check(a.dtype == b.dtype, lambda: f"{a.dtype} did not match {b.dtype}")
    close = a == b
    if equal_nan and (a.is_floating_point() or a.is_complex()):
        close = close | (a.isnan() & b.isnan())
    if rtol != 0 or atol != 0:
        if a.dtype == torch.bool:
            a, b = a.to(torch.get_default_dtype()), b.to(torch.get_default_dtype())
        actual = (a - b).abs()
        close = close | (actual.isfinite() & (actual <= atol + (rtol * b).abs()))
    return bool(close.all().item())


def _loss_grad_scale(grad: torch.Tensor, reduction: int, n: int) -> torch.Tensor:
    """d(reduced loss)/d(per-sample loss), as an (n, 1) column (reduction 0/1/2 = none,
    mean, sum)."""
    if reduction == 0:
        return grad.reshape(n, 1)
    return (grad / n if reduction == 1 else grad).reshape(1, 1).expand(n, 1)


@_own(aten.multi_margin_loss_backward.default)
def multi_margin_loss_backward(grad, x, target, p, margin, weight=None, reduction=1):
    """Each active hinge z_j = margin - x[y] + x[j] > 0 (j != y) adds dz_j^p / C to x[j] and
    takes it from x[y]; the weight of class y scales the sample's terms."""
    classes = x.shape[-1] if x.dim() else 1
    rows, labels = x.reshape(-1, classes), target.reshape(-1, 1)
    is_label = torch.arange(classes, device=x.device) == labels
    z = margin - rows.gather(1, labels) + rows
    slope = (z > 0).to(x.dtype) * (1 if p == 1 else 2 * z)
    slope = slope.masked_fill(is_label, 0)
    if weight is not None:
        slope = slope * weight[labels.reshape(-1)].reshape(-1, 1)
    slope = slope * _loss_grad_scale(grad, reduction, rows.shape[0]) / classes
    return (slope - is_label * slope.sum(1, keepdim=True)).reshape(x.shape)


@_own(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(grad, x, target, reduction, is_target):
    """Each listed target t and non-target j with 1 - (x[t] - x[j]) > 0 adds 1/C to x[j] and
    takes it from x[t]; the target list ends at the first -1."""
    classes = x.shape[-1] if x.dim() else 1
    rows, labels = x.reshape(-1, classes), target.reshape(-1, classes)
    listed = (labels != -1).to(torch.int64).cumprod(1).bool()
    safe = labels.masked_fill(~listed, 0)
    others = ~is_target.reshape(-1, classes).bool()
    z = 1 - (rows.gather(1, safe).unsqueeze(2) - rows.unsqueeze(1))
    active = (z > 0) & listed.unsqueeze(2) & others.unsqueeze(1)
    scale = _loss_grad_scale(grad, reduction, rows.shape[0]) / classes
    active = active.to(x.dtype) * scale.unsqueeze(2)
    to_others = active.sum(1)
    from_targets = torch.zeros_like(rows).scatter_add(1, safe, active.sum(2))
    return (to_others - from_targets).reshape(x.shape)


def _linear_edges(low: torch.Tensor, high: torch.Tensor, bins: int) -> torch.Tensor:
    """torch's linspace(low, high, bins + 1): the first half counts up from low, the rest
    down from high; an empty range widens to +-0.5 (numpy's rule)."""
    empty = low == high
    low, high = torch.where(empty, low - 0.5, low), torch.where(empty, high + 0.5, high)
    step = (high - low) / bins
    i = torch.arange(bins + 1, device=low.device).to(low.dtype)
    return torch.where(i < (bins + 1) // 2, low + i * step, high - (bins - i) * step)


def _outer_edges(points: torch.Tensor, bins, range_) -> list[torch.Tensor]:
    """Per dimension, the bin edges from `range_` or from the points' min and max."""
    edges = []
    for d, count in enumerate(bins):
        if range_ is not None:
            low = torch.tensor(range_[2 * d], dtype=points.dtype, device=points.device)
            high = torch.tensor(range_[2 * d + 1], dtype=points.dtype, device=points.device)
        elif points.shape[0] == 0:
            low = high = torch.zeros((), dtype=points.dtype, device=points.device)
        else:
            low, high = torch.aminmax(points[:, d])
        edges.append(_linear_edges(low, high, count))
    return edges


def _histogramdd(points: torch.Tensor, edges, weight, density) -> torch.Tensor:
    """torch's CPU histogram: a point counts when every coordinate lies within its edges
    (NaN never does), in the bin upper_bound(edges, x) - 1, the last bin closed."""
    counts = [e.shape[0] - 1 for e in edges]
    flat = torch.zeros((), dtype=torch.int64, device=points.device)
    keep = torch.ones(points.shape[0], dtype=torch.bool, device=points.device)
    for d, e in enumerate(edges):
        x = points[:, d].contiguous()
        pos = torch.searchsorted(e, x, right=True) - 1
        pos = torch.where(pos == counts[d], pos - 1, pos).clamp(0, max(counts[d] - 1, 0))
        keep = keep & (x >= e[0]) & (x <= e[-1])
        flat = flat * counts[d] + pos
    ones = torch.ones(points.shape[0], dtype=points.dtype, device=points.device)
    values = torch.where(keep, ones if weight is None else weight.reshape(-1), 0)
    total = int(torch.Size(counts).numel())
    hist = torch.zeros(total, dtype=points.dtype, device=points.device)
    hist = hist.index_add(0, torch.where(keep, flat, 0).reshape(-1), values).reshape(counts)
    if density:
        hist = hist / hist.sum()
        for d, e in enumerate(edges):
            shape = [1] * len(edges)
            shape[d] = counts[d]
            hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return hist


@_own(aten.histogram.bin_ct)
def histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    points = x.reshape(-1, 1)
    edges = _outer_edges(points, [bins], range)
    return _histogramdd(points, edges, weight, density), edges[0]


@_own(aten.histogram.bins_tensor)
def histogram_bins_tensor(x, bins, *, weight=None, density=False):
    return _histogramdd(x.reshape(-1, 1), [bins], weight, density), bins.clone()


@_own(aten._histogramdd_bin_edges.default)
def histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):  # noqa: A002
    return _outer_edges(x.reshape(-1, x.shape[-1]), bins, range)


@_own(aten._histogramdd_from_bin_cts.default)
def histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):  # noqa: A002
    points = x.reshape(-1, x.shape[-1])
    return _histogramdd(points, _outer_edges(points, bins, range), weight, density)


@_own(aten._histogramdd_from_bin_tensors.default)
def histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    return _histogramdd(x.reshape(-1, x.shape[-1]), list(bins), weight, density)


@_own(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """(grad_v, grad_g) of w = g * v / |v|, the norm taken over every dimension but `dim`
    (`nn.utils.parametrizations.weight_norm` reaches torch's fused form on our device),
    computed in float32 for half-precision weights as torch's kernels do."""
    dtype = grad_w.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    grad_w, v, g, norms = (t.to(acc) for t in (grad_w, saved_v, saved_g, saved_norms))
    other = [i for i in range(v.dim()) if i != dim % v.dim()]
    grad_g = (grad_w * v).sum(other, keepdim=True) / norms
    grad_v = g / norms * (grad_w - v * (grad_g / norms))
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype)


# --- fused RNN cells ---------------------------------------------------------------------
# torch's nn.LSTM/nn.GRU (and LSTMCell/GRUCell) compute each step with these fused cell
# ops on every PrivateUse1 device, so on ours, and they have no CPU kernel; PyTorch/XLA's
# `XLA` device takes torch's unfused path instead. Gates are ordered as torch's fused
# kernels order them, and the workspace each forward returns holds what that kernel's
# backward reads.


def _gates(input_gates, hidden_gates, input_bias, hidden_bias, chunks: int) -> tuple:
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    return input_gates.chunk(chunks, 1), hidden_gates.chunk(chunks, 1)


@_own(aten._thnn_fused_lstm_cell.default)
def thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """(hy, cy, workspace): workspace is the activated gates [i, f, g, o], [B, 4H]."""
    (ii, fi, gi, oi), (ih, fh, gh, oh) = _gates(input_gates, hidden_gates, input_bias,
                                                hidden_bias, 4)
    i, f, g, o = (ii + ih).sigmoid(), (fi + fh).sigmoid(), (gi + gh).tanh(), (oi + oh).sigmoid()
    cy = f * cx + i * g
    return o * cy.tanh(), cy, torch.cat([i, f, g, o], 1)


@_own(aten._thnn_fused_lstm_cell_backward_impl.default)
def thnn_fused_lstm_cell_backward_impl(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad of the gates' pre-activation sum [B, 4H], grad_cx, grad_bias [4H] or None)."""
    i, f, g, o = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = torch.zeros_like(cy) if grad_hy is None else grad_hy
    grad_c = grad_hy * o * (1 - tanh_cy * tanh_cy)
    if grad_cy is not None:
        grad_c = grad_c + grad_cy
    grad_gates = torch.cat([grad_c * g * (1 - i) * i, grad_c * cx * (1 - f) * f,
                            grad_c * i * (1 - g * g), grad_hy * tanh_cy * (1 - o) * o], 1)
    return grad_gates, grad_c * f, grad_gates.sum(0) if has_bias else None


@_own(aten._thnn_fused_gru_cell.default)
def thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """(hy, workspace): workspace is [r, z, n, hx, hidden n-gate with its bias], [B, 5H]."""
    (ri, zi, ni), (rh, zh, nh) = _gates(input_gates, hidden_gates, input_bias, hidden_bias, 3)
    r, z = (ri + rh).sigmoid(), (zi + zh).sigmoid()
    n = (ni + r * nh).tanh()
    return n + z * (hx - n), torch.cat([r, z, n, hx, nh], 1)


@_own(aten._thnn_fused_gru_cell_backward.default)
def thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)."""
    r, z, n, hx, nh = workspace.chunk(5, 1)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * nh * (1 - r) * r
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_input = torch.cat([grad_r, grad_z, grad_n], 1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], 1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)



# --- the transformer fast path -----------------------------------------------------------
# In eval mode, with no gradient wanted, nn.MultiheadAttention (self-attention) and
# nn.TransformerEncoderLayer call these fused ops on every PrivateUse1 device, so on ours,
# where PyTorch/XLA's `XLA` device takes the modules' unfused path. Each is the CPU
# kernel's arithmetic written with ATen ops, so it records like the unfused path.
# Masks follow the CPU kernel: any mask is read as "True/nonzero = left out", a 2-D mask
# of a 4-D input is (L, L) for mask_type 0 and a key padding mask (B, L) for mask_type 1,
# and any other mask has the input's shape.


def _softmax_mask(x: torch.Tensor, mask: torch.Tensor, mask_type: int | None) -> torch.Tensor:
    if mask.dtype != torch.bool:
        raise RuntimeError("Mask should be a boolean tensor")
    if mask.dim() == 2 and x.dim() == 4 and mask_type == 1:
        if (x.shape[0], x.shape[2]) != tuple(mask.shape):
            raise RuntimeError("For mask_type == 1 mask shape should be (B, L)")
        return mask.view(x.shape[0], 1, 1, x.shape[2])
    if mask.dim() == 2 and x.dim() == 4 and mask_type == 0:
        if (x.shape[2], x.shape[2]) != tuple(mask.shape):
            raise RuntimeError("For mask_type == 0 mask shape should be (L, L)")
        return mask.view(1, 1, x.shape[2], x.shape[2])
    if mask.shape != x.shape:
        raise RuntimeError("Mask shape should match input shape")
    return mask


@_own(aten._masked_softmax.default)
def masked_softmax(x, mask, dim=None, mask_type=None):
    """Softmax over `dim` (the last by default) of `x` with the masked elements left out
    (a row with every element masked is NaN, as on the CPU)."""
    mask = _softmax_mask(x, mask, mask_type)
    return torch.softmax(x.masked_fill(mask, float("-inf")), x.dim() - 1 if dim is None else dim)


@_own(aten._masked_softmax_backward.default)
def masked_softmax_backward(grad, out, mask, dim=None):
    if grad.shape != mask.shape:
        raise RuntimeError("Mask shape should match grad shape")
    dim = out.dim() - 1 if dim is None else dim
    grad = grad.masked_fill(mask, 0)
    return (out * (grad - (grad * out).sum(dim, keepdim=True))).masked_fill(mask, 0)


@_own(aten._native_multi_head_attention.default)
def native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
                                proj_weight, proj_bias, mask=None, need_weights=True,
                                average_attn_weights=True, mask_type=None):
    """(output [B, T, D], attention weights: averaged over heads [B, T, S], per head
    [B, H, T, S], or None without need_weights)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 3:
            raise RuntimeError(f"expected 3-D `{name}`, got {t.dim()}-D tensor")
    if query.shape[2] != embed_dim:
        raise RuntimeError(f"passed-in embed_dim {embed_dim} didn't match last dim of query "
                           f"{query.shape[2]}")
    if not query.shape == key.shape == value.shape:
        raise RuntimeError("expected `query`/`key`/`value` shapes to match")
    if tuple(qkv_weight.shape) != (3 * embed_dim, embed_dim) or tuple(qkv_bias.shape) != (
            3 * embed_dim,):
        raise RuntimeError(f"expected `qkv_weight` of shape [{3 * embed_dim}, {embed_dim}] and "
                           f"`qkv_bias` of shape [{3 * embed_dim}]")
    if embed_dim % num_head:
        raise RuntimeError("`embed_dim` must divide evenly by `num_heads`")
    batch, length, head_dim = query.shape[0], query.shape[1], embed_dim // num_head
    weights, biases = qkv_weight.chunk(3), qkv_bias.chunk(3)

    def heads(x, i):  # [B, T, D] -> [B, H, T, D/H]
        x = torch.nn.functional.linear(x, weights[i], biases[i])
        return x.view(batch, -1, num_head, head_dim).transpose(1, 2)

    q = heads(query, 0) * (1.0 / head_dim**0.5)
    scores = q @ heads(key, 1).transpose(2, 3)
    if mask is None:
        attention = scores.softmax(-1)
    else:
        attention = masked_softmax(scores, mask.bool(), 3, mask_type)
    context = (attention @ heads(value, 2)).transpose(1, 2).reshape(batch, length, embed_dim)
    out = torch.nn.functional.linear(context, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, attention.sum(1) / num_head if average_attn_weights else attention


@_own(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                  proj_bias, use_gelu, norm_first, eps, norm_weight_1,
                                  norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                                  ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None,
                                  mask_type=None):
    """One nn.TransformerEncoderLayer: self-attention and the feed-forward block, each with
    its residual, layer norms before (norm_first) or after them."""
    if src.numel() == 0:
        return src.clone()
    f = torch.nn.functional

    def norm(x, weight, bias):
        return f.layer_norm(x, (embed_dim,), weight, bias, eps)

    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                    proj_weight, proj_bias, mask, False, True, mask_type)[0]
    x = x + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    x = f.linear(x, ffn_weight_1, ffn_bias_1)
    x = f.linear(f.gelu(x) if use_gelu else f.relu(x), ffn_weight_2, ffn_bias_2)
    x = x + residual
    return x if norm_first else norm(x, norm_weight_2, norm_bias_2)
