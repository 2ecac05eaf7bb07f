"""Resampling lowerings: upsample backward and the separable (bicubic, anti-aliased)
resamplers with their backward ops."""

import numpy as np
import pytest
import torch

from .harness import check_op, run_lowering

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


LINEAR = [(aten.upsample_linear1d, (13,)), (aten.upsample_bilinear2d, (13, 7)),
          (aten.upsample_trilinear3d, (5, 6, 7))]
FACTORS = [0.37, 0.5, 0.77, 1.7, 2.0, 2.3, 3.9]  # downsampling and upsampling


@pytest.mark.parametrize("packet,spatial", LINEAR, ids=[p.__name__ for p, _ in LINEAR])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("by", ["size", "scale"])
def test_linear_upsampling_rounds_as_torch_does(packet, spatial, align_corners, by):
    """The weights come from source coordinates computed in float32, as torch computes
    them; computed in float64 they differed from torch by up to 5.5e-5 (upstream's
    interpolate test allows 1e-5). Tolerance: atol 1e-6 on standard normal inputs, the
    sums of two products per dim rounded in another order (measured: 4.8e-7)."""
    x = torch.randn(2, 3, *spatial, generator=torch.Generator().manual_seed(0))
    for factor in FACTORS:
        if by == "size":
            args = (x, [int(s * factor) for s in spatial], align_corners, None)
        else:
            args = (x, None, align_corners, [factor] * len(spatial))
        ours = torch.from_numpy(np.asarray(run_lowering(packet.vec, args, {})).copy())
        torch.testing.assert_close(ours, packet.vec(*args), rtol=0, atol=1e-6,
                                   msg=lambda m, f=factor: f"factor {f}: {m}")


KEPT_SIZE = [
    (aten.upsample_nearest2d.vec, ()), (aten.upsample_bilinear2d.vec, (False,)),
    (aten.upsample_bilinear2d.vec, (True,)), (aten._upsample_bilinear2d_aa.vec, (False,)),
    (aten._upsample_bicubic2d_aa.vec, (False,)),
]


@pytest.mark.parametrize("op,extra", KEPT_SIZE, ids=[f"{op}{list(e)}" for op, e in KEPT_SIZE])
def test_a_dim_whose_size_is_kept_is_copied_whatever_the_scale(op, extra):
    """7 * 1.1 rounds down to 7: torch copies that dim (the others resample); before, the
    lowerings resampled it by 1 / 1.1, wrong by up to 5."""
    x = torch.randn(2, 3, 13, 7, generator=torch.Generator().manual_seed(0))
    check_op(op, (x, None, *extra, [1.1, 1.1]))
