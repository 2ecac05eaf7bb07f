"""Resampling lowerings: upsample backward and the separable (bicubic, anti-aliased)
resamplers with their backward ops."""

import pytest
import torch

from .harness import check_op

aten = torch.ops.aten


def test_upsample_backward():
    grad = torch.randn(1, 2, 8, 6)
    check_op(aten.upsample_nearest2d_backward.default, (grad, [8, 6], [1, 2, 4, 3], 2.0, 2.0))
    check_op(aten.upsample_bilinear2d_backward.default,
             (grad, [8, 6], [1, 2, 4, 3], False, None, None))
    check_op(aten.upsample_bilinear2d_backward.default,
             (grad, [8, 6], [1, 2, 4, 3], True, None, None))


RESAMPLERS = [aten.upsample_bicubic2d, aten._upsample_bilinear2d_aa, aten._upsample_bicubic2d_aa]
RESAMPLE_CASES = [  # (input H, W), output (H, W), align_corners, scales
    ((5, 7), [9, 4], False, (None, None)), ((5, 7), [9, 4], True, (None, None)),
    ((6, 6), [2, 3], False, (None, None)), ((6, 6), [1, 13], True, (None, None)),
    ((4, 5), [10, 7], False, (2.5, 1.5)), ((9, 8), [3, 3], False, (0.4, 0.35)),
]


@pytest.mark.parametrize("packet", RESAMPLERS, ids=lambda p: p._qualified_op_name)
@pytest.mark.parametrize("case", RESAMPLE_CASES, ids=range(len(RESAMPLE_CASES)))
def test_separable_resampling_and_backward(packet, case):
    (h, w), size, align_corners, scales = case
    torch.manual_seed(0)
    x = torch.randn(2, 3, h, w)
    check_op(packet.default, (x, size, align_corners, *scales))
    check_op(getattr(aten, packet._qualified_op_name.split("::")[1] + "_backward").default,
             (torch.randn(2, 3, *size), size, [2, 3, h, w], align_corners, *scales))
    if scales[0] is None:
        check_op(packet.vec, (x, size, align_corners, None))
    else:
        check_op(packet.vec, (x, None, align_corners, list(scales)))
