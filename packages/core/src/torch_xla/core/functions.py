"""Differentiable collectives (`torch_xla.core.functions`, PyTorch/XLA's `xf`), and
`SyncBatchNorm`, built on them.

`all_reduce` and `all_gather` are `xm.all_reduce` / `xm.all_gather` with a
backward pass, as PyTorch/XLA defines it: the backward of a reduction is local
(each replica differentiates its own output, scaled), and the backward of a
gather keeps this replica's slice of the incoming gradient.
"""

from __future__ import annotations

import torch

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _sum_grad(grad, inp, out):
    return grad


def _mul_grad(grad, inp, out):
    # d(prod)/d(x_i) = prod / x_i, taken as 0 where x_i is 0.
    return grad * torch.where(inp != 0, out / inp, torch.zeros_like(inp))


def _extremum_grad(grad, inp, out):
    return torch.where(inp == out, grad, torch.zeros_like(grad))


# The reductions with a gradient; `and`/`or` have none.
_REDUCE_GRADS = {
    xm.REDUCE_SUM: _sum_grad,
    xm.REDUCE_MUL: _mul_grad,
    xm.REDUCE_MIN: _extremum_grad,
    xm.REDUCE_MAX: _extremum_grad,
}


def _own_part(t: torch.Tensor, dim: int, ordinal: int, size: int) -> torch.Tensor:
    """`t.narrow(dim, ordinal * size, size)`, with the offset as data: every process
    then records the same graph, which a step with collectives needs."""
    index = torch.arange(ordinal * size, (ordinal + 1) * size).to(t.device)
    return torch.index_select(t, dim, index)


class AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, reduce_type, scale, groups):
        ctx.reduce_type, ctx.scale = reduce_type, scale
        output = xm.all_reduce(reduce_type, input, scale=scale, groups=groups)
        ctx.save_for_backward(input, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, output = ctx.saved_tensors
        grad_fn = _REDUCE_GRADS.get(ctx.reduce_type)
        if grad_fn is None:
            raise RuntimeError(
                f"all_reduce('{ctx.reduce_type}') has no gradient; differentiate through "
                f"one of {sorted(_REDUCE_GRADS)}, or call xm.all_reduce under torch.no_grad()."
            )
        grad = grad_output * ctx.scale if ctx.scale != 1.0 else grad_output
        return grad_fn(grad, input, output), None, None, None


def all_reduce(
    reduce_type: str,
    value: torch.Tensor,
    scale: float = 1.0,
    groups: list[list[int]] | None = None,
) -> torch.Tensor:
    """`xm.all_reduce(reduce_type, value, scale, groups)` that autograd can go through.

    `reduce_type` is one of `xm.REDUCE_SUM`, `REDUCE_MUL`, `REDUCE_AND`,
    `REDUCE_OR`, `REDUCE_MIN`, `REDUCE_MAX`; only sum, mul, min and max have a
    backward pass.
    """
    return AllReduce.apply(value, reduce_type, scale, groups)


class AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, dim):
        ctx.dim = dim
        ctx.ordinal = xr.global_ordinal()
        ctx.world_size = xr.world_size()
        return xm.all_gather(input, dim=dim)

    @staticmethod
    def backward(ctx, grad_output):
        size = grad_output.size(ctx.dim) // ctx.world_size
        return _own_part(grad_output, ctx.dim, ctx.ordinal, size), None


def all_gather(value: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """`xm.all_gather(value, dim)` that autograd can go through."""
    return AllGather.apply(value, dim)


def distributed_mm(w: torch.Tensor, x: torch.Tensor, split: int = 1) -> torch.Tensor:
    """`w @ x` where each replica holds the `Ko` columns of `w` of its ordinal.

    `w` is `N x Ko` (this replica's shard), `x` is `(Ko * world) x M`; the result
    is this replica's `N x M` share. `split` cuts `M` into that many pieces, so
    the all-gather of `x` fits in device memory.
    """
    ordinal, world = xr.global_ordinal(), xr.world_size()
    shard = w.size(1)
    if x.size(0) // world != shard:
        raise ValueError(
            f"distributed_mm: x has {x.size(0)} rows, which is not {world} replicas x "
            f"{shard} (the columns of w's shard)."
        )
    if x.size(1) % split:
        raise ValueError(f"distributed_mm: split={split} does not divide x's {x.size(1)} columns")
    results = []
    for xs in torch.split(x, x.size(1) // split, dim=1):
        gathered = all_gather(xs, dim=1)  # (Ko * world) x (m * world)
        mine = _own_part(gathered, 0, ordinal, shard)
        reduced = all_reduce(xm.REDUCE_SUM, w @ mine)  # N x (m * world)
        results.append(_own_part(reduced, 1, ordinal, xs.size(1)))
    return torch.cat(results, dim=1) if len(results) > 1 else results[0]


class AllReduceSumLayer(torch.autograd.Function):
    """`xm.all_reduce(REDUCE_SUM, x)` whose backward is the all-reduce sum of the gradient:
    each replica's loss depends on every replica's `x` through the sum."""

    @staticmethod
    def forward(ctx, x):
        return xm.all_reduce(xm.REDUCE_SUM, x)

    @staticmethod
    def backward(ctx, grad_output):
        return xm.all_reduce(xm.REDUCE_SUM, grad_output)


class SyncBatchNorm(torch.nn.Module):
    """Batch normalization whose statistics cover the whole global batch: the mean and
    the mean square of each channel are all-reduced over the replicas (every replica
    must hold the same number of samples), so each normalizes with the statistics of
    all of them, and the gradients flow back across replicas.

    Input `[N, C, ...]` (2 to 5 dimensions) with `C == num_features`. In training the
    running statistics are updated as `torch.nn.BatchNorm` does (the running variance
    is unbiased over the global batch; PyTorch/XLA's keeps the biased one); in `eval()`
    they normalize. Parameters and buffers are named as in PyTorch/XLA's
    (`weight`, `bias`, `running_mean`, `running_var`)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.weight = torch.nn.Parameter(torch.ones(num_features))
        self.bias = torch.nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        if not 2 <= batch.dim() <= 5 or batch.shape[1] != self.num_features:
            raise ValueError(
                f"SyncBatchNorm({self.num_features}): expected an input of 2 to 5 dimensions "
                f"with {self.num_features} channels in dimension 1, got shape "
                f"{list(batch.shape)}."
            )
        channels = [1, -1] + [1] * (batch.dim() - 2)  # a per-channel vector, broadcast
        if self.training:
            dims = [0, *range(2, batch.dim())]
            world = xr.world_size()
            local = torch.stack([batch.mean(dims), (batch * batch).mean(dims)])
            mean, square_mean = AllReduceSumLayer.apply(local) / world  # one collective
            var = square_mean - mean * mean
            count = batch.numel() // batch.shape[1] * world
            with torch.no_grad():
                self.running_mean.mul_(1 - self.momentum).add_(mean, alpha=self.momentum)
                unbiased = var * (count / max(count - 1, 1))
                self.running_var.mul_(1 - self.momentum).add_(unbiased, alpha=self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        scale = torch.rsqrt(var + self.eps) * self.weight
        return (batch - mean.view(channels)) * scale.view(channels) + self.bias.view(channels)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


def nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    score_threshold: torch.Tensor | float,
    iou_threshold: torch.Tensor | float,
    output_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-maximum suppression with a static output size (no data-dependent shapes).

    Boxes (`[N, 4]`, corners `(y0, x0, y1, x1)` in either order) are visited by
    decreasing score; a box is kept unless a kept box overlaps it with an IoU
    above `iou_threshold`, until `output_size` boxes are kept. Kept boxes whose
    score is not above `score_threshold` are then dropped.

    Returns `(indices, num_valid)`: `output_size` int32 indices into `boxes`, the
    first `num_valid` of them the kept boxes by decreasing score (the rest are
    padding), and `num_valid` as an int32 scalar.
    """
    n = boxes.size(0)
    if boxes.dim() != 2 or boxes.size(1) != 4 or scores.shape != (n,):
        raise ValueError(
            f"nms: boxes must be [N, 4] and scores [N], got {list(boxes.shape)} and "
            f"{list(scores.shape)}"
        )
    if not 0 <= output_size <= n:
        raise ValueError(f"nms: output_size={output_size} must be in [0, {n}] (the box count)")
    order = torch.argsort(scores, descending=True, stable=True)
    sorted_scores = scores[order]
    overlaps = _iou(boxes[order]) > torch.as_tensor(iou_threshold, device=boxes.device)
    kept, visited = _greedy_suppress(overlaps, output_size)
    position = torch.arange(n, device=boxes.device)
    kept = kept & (position < visited)
    kept = kept & (sorted_scores > torch.as_tensor(score_threshold, device=boxes.device))
    floor = torch.full_like(sorted_scores, torch.finfo(sorted_scores.dtype).min)
    _, best = torch.topk(torch.where(kept, sorted_scores, floor), output_size)
    num_valid = torch.clamp(kept.sum(), max=output_size).to(torch.int32)
    return order[best].to(torch.int32), num_valid


def _iou(boxes: torch.Tensor) -> torch.Tensor:
    """`[N, N]` intersection over union of `(y0, x0, y1, x1)` boxes."""
    y0, x0, y1, x1 = boxes.unbind(1)
    top, bottom = torch.minimum(y0, y1), torch.maximum(y0, y1)
    left, right = torch.minimum(x0, x1), torch.maximum(x0, x1)
    area = (bottom - top) * (right - left)
    height = torch.minimum(bottom[:, None], bottom) - torch.maximum(top[:, None], top)
    width = torch.minimum(right[:, None], right) - torch.maximum(left[:, None], left)
    intersection = height.clamp(min=0) * width.clamp(min=0)
    return intersection / (area[:, None] + area - intersection)


def _greedy_suppress(overlaps: torch.Tensor, output_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Visit boxes in order until `output_size` are kept; each kept box suppresses the
    later ones it overlaps. Returns (not suppressed, number of boxes visited)."""
    n = overlaps.size(0)
    device = overlaps.device
    kept = torch.ones(n, dtype=torch.bool, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    visited = torch.zeros((), dtype=torch.int64, device=device)
    not_self = ~torch.eye(n, dtype=torch.bool, device=device)
    for row in range(n):
        running = count < output_size
        active = kept[row] & running
        count = count + active.to(torch.int64)
        visited = visited + running.to(torch.int64)
        kept = kept & ~(active & overlaps[row] & not_self[row])
    return kept, visited
