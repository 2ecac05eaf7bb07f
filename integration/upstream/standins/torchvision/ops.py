"""`torchvision.ops.nms` and `remove_small_boxes`, written for the upstream runs.

`nms` is the operator `torchvision::nms` with a CPU kernel only, as torchvision
registers it: on an XLA tensor the engine finds no lowering and runs it on the CPU,
counting `torchvision::nms` among the fallback ops (PyTorch/XLA's own tests check
that). `remove_small_boxes` is plain torch ops, as in torchvision.
"""

from __future__ import annotations

import torch

_library = torch.library.Library("torchvision", "DEF")
_library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


def _nms_cpu(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Indices of the boxes kept, by decreasing score: a box is dropped when its IoU with a
    box already kept is above `iou_threshold`. Boxes are (x1, y1, x2, y2)."""
    if dets.dim() != 2 or dets.size(1) != 4:
        raise RuntimeError(f"nms: boxes must have shape [N, 4], got {tuple(dets.shape)}")
    if scores.shape != dets.shape[:1]:
        raise RuntimeError(f"nms: scores must have shape [{dets.size(0)}], got "
                           f"{tuple(scores.shape)}")
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = torch.sort(scores, descending=True, stable=True).indices
    suppressed = torch.zeros(dets.size(0), dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        width = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        height = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = width * height
        suppressed |= inter / (areas[i] + areas - inter) > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


_library.impl("nms", _nms_cpu, "CPU")


def nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Non-maximum suppression: the indices of the boxes kept, by decreasing score."""
    return torch.ops.torchvision.nms(boxes, scores, iou_threshold)


def remove_small_boxes(boxes: torch.Tensor, min_size: float) -> torch.Tensor:
    """Indices of the boxes (x1, y1, x2, y2) whose width and height are both >= min_size."""
    widths, heights = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    keep = (widths >= min_size) & (heights >= min_size)
    return torch.where(keep)[0]
