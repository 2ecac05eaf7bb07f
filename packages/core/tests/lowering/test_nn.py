"""nn lowerings the OpInfo samples reach only through autograd: backward ops, pooling
indices, normalisation statistics; each compared with the eager ATen op directly."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from torch_xla import lowering

from .harness import check_op

aten = torch.ops.aten


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float32)


CONVS = [
    # (input, weight, stride, padding, dilation, transposed, output_padding, groups)
    ((2, 4, 9, 9), (6, 2, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 2),
    ((2, 3, 10, 8), (4, 3, 3, 2), [2, 1], [0, 1], [2, 1], False, [0, 0], 1),
    ((1, 4, 7), (4, 2, 3), [2], [1], [1], True, [1], 2),
    ((2, 4, 5, 5), (4, 3, 3, 3), [2, 2], [1, 0], [1, 2], True, [1, 0], 1),
    ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1),
]


@pytest.mark.parametrize("case", CONVS, ids=range(len(CONVS)))
def test_convolution_forward_and_backward(case):
    x_shape, w_shape, stride, padding, dilation, transposed, out_pad, groups = case
    torch.manual_seed(0)
    x, w = _randn(*x_shape), _randn(*w_shape)
    bias = _randn(w_shape[1] * groups if transposed else w_shape[0])
    args = (x, w, bias, stride, padding, dilation, transposed, out_pad, groups)
    check_op(aten.convolution.default, args)
    out = aten.convolution.default(*args)
    grad = _randn(*out.shape)
    check_op(aten.convolution_backward.default,
             (grad, x, w, [bias.shape[0]], stride, padding, dilation, transposed, out_pad,
              groups, [True, True, True]))
    check_op(aten.convolution_backward.default,
             (grad, x, w, None, stride, padding, dilation, transposed, out_pad, groups,
              [False, True, False]))


@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_and_backward(training):
    torch.manual_seed(0)
    x, w, b = _randn(4, 3, 5, 5), _randn(3), _randn(3)
    mean, var = _randn(3), torch.rand(3) + 0.5
    check_op(aten.native_batch_norm.default, (x, w, b, mean, var, training, 0.1, 1e-5))
    out, save_mean, save_invstd = aten.native_batch_norm.default(
        x, w, b, mean.clone(), var.clone(), training, 0.1, 1e-5)
    grad = _randn(*out.shape)
    check_op(aten.native_batch_norm_backward.default,
             (grad, x, w, mean, var, save_mean, save_invstd, training, 1e-5,
              [True, True, True]))


def test_batch_norm_functional_variants_update_running_stats():
    torch.manual_seed(0)
    x, w, b = _randn(4, 3, 2, 2), _randn(3), _randn(3)
    check_op(aten._native_batch_norm_legit_functional.default,
             (x, w, b, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5))
    # Inference mode: torch's CPU kernel returns empty save_mean/save_invstd, its meta
    # kernel (C,) ones; the lowering follows the meta kernel, which the engine trusts.
    stats = (x, w, b, _randn(3), torch.rand(3) + 1, 0.1, 1e-5)
    for op in (aten._native_batch_norm_legit_no_training.default,
               aten.native_batch_norm.default):
        args = stats if "legit" in str(op) else (*stats[:5], False, *stats[5:])
        expected = op(*args)
        on_meta = op(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
        got = lowering.lookup(op).fn(*[jnp.asarray(a.numpy()) if isinstance(a, torch.Tensor)
                                       else a for a in args])
        torch.testing.assert_close(torch.from_numpy(np.asarray(got[0])), expected[0])
        assert [tuple(g.shape) for g in got] == [tuple(m.shape) for m in on_meta]
    check_op(aten._native_batch_norm_legit.no_stats, (x, w, b, True, 0.1, 1e-5))


def test_layer_norm_and_group_norm_backward():
    torch.manual_seed(0)
    x, w, b = _randn(2, 5, 6), _randn(6), _randn(6)
    out, mean, rstd = aten.native_layer_norm.default(x, [6], w, b, 1e-5)
    check_op(aten.native_layer_norm.default, (x, [6], w, b, 1e-5))
    check_op(aten.native_layer_norm_backward.default,
             (_randn(*out.shape), x, [6], mean, rstd, w, b, [True, True, True]))
    x = _randn(2, 6, 4, 4)
    w, b = _randn(6), _randn(6)
    out, mean, rstd = aten.native_group_norm.default(x, w, b, 2, 6, 16, 3, 1e-5)
    check_op(aten.native_group_norm.default, (x, w, b, 2, 6, 16, 3, 1e-5))
    check_op(aten.native_group_norm_backward.default,
             (_randn(*out.shape), x, mean, rstd, w, 2, 6, 16, 3, [True, True, True]))


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", [
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [1, 2], [1, 0], [2, 1], False),
])
def test_max_pool2d_with_indices_and_backward(kernel, stride, padding, dilation, ceil):
    torch.manual_seed(0)
    x = _randn(2, 3, 9, 8)
    args = (x, kernel, stride, padding, dilation, ceil)
    check_op(aten.max_pool2d_with_indices.default, args)
    out, indices = aten.max_pool2d_with_indices.default(*args)
    check_op(aten.max_pool2d_with_indices_backward.default,
             (_randn(*out.shape), x, kernel, stride, padding, dilation, ceil, indices))


def test_max_pool_ties_pick_first_index():
    x = torch.zeros(1, 1, 4, 4)
    check_op(aten.max_pool2d_with_indices.default, (x, [2, 2], [2, 2]))


@pytest.mark.parametrize("ceil,count_include_pad,divisor", [
    (False, True, None), (True, True, None), (True, False, None), (False, False, 3)])
def test_avg_pool2d_and_backward(ceil, count_include_pad, divisor):
    torch.manual_seed(0)
    x = _randn(2, 3, 7, 6)
    args = (x, [3, 2], [2, 2], [1, 1], ceil, count_include_pad, divisor)
    check_op(aten.avg_pool2d.default, args)
    out = aten.avg_pool2d.default(*args)
    check_op(aten.avg_pool2d_backward.default, (_randn(*out.shape), *args))


@pytest.mark.parametrize("size", [[1, 1], [3, 2], [5, 7]])
def test_adaptive_avg_pool2d_and_backward(size):
    x = _randn(2, 3, 7, 6)
    check_op(aten._adaptive_avg_pool2d.default, (x, size))
    out = aten._adaptive_avg_pool2d.default(x, size)
    check_op(aten._adaptive_avg_pool2d_backward.default, (_randn(*out.shape), x))


def test_softmax_family_backward():
    torch.manual_seed(0)
    x = _randn(3, 7)
    for forward, backward in [(aten._softmax.default, aten._softmax_backward_data.default),
                              (aten._log_softmax.default,
                               aten._log_softmax_backward_data.default)]:
        out = forward(x, 1, False)
        check_op(forward, (x, 1, False))
        check_op(backward, (_randn(3, 7), out, 1, torch.float32))


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_forward_backward(reduction, weighted):
    torch.manual_seed(0)
    x = torch.log_softmax(_randn(5, 4), 1)
    target = torch.tensor([0, 3, -100, 2, 1])
    weight = torch.rand(4) if weighted else None
    args = (x, target, weight, reduction, -100)
    check_op(aten.nll_loss_forward.default, args)
    out, total = aten.nll_loss_forward.default(*args)
    check_op(aten.nll_loss_backward.default, (torch.ones_like(out), *args, total))
    x2 = _randn(2, 4, 3, 3)
    t2 = torch.randint(0, 4, (2, 3, 3))
    check_op(aten.nll_loss2d_forward.default, (x2, t2, weight, reduction, -100))
    out2, total2 = aten.nll_loss2d_forward.default(x2, t2, weight, reduction, -100)
    check_op(aten.nll_loss2d_backward.default,
             (torch.ones_like(out2), x2, t2, weight, reduction, -100, total2))


def test_embedding_dense_backward():
    torch.manual_seed(0)
    indices = torch.tensor([[0, 2, 2], [5, 0, 1]])
    grad = _randn(2, 3, 4)
    for padding_idx, scale in [(-1, False), (2, False), (-1, True)]:
        check_op(aten.embedding_dense_backward.default, (grad, indices, 6, padding_idx, scale))


@pytest.mark.parametrize("op,args", [
    (aten.threshold_backward.default, (_randn(4, 5), _randn(4, 5), 0.0)),
    (aten.gelu_backward.default, (_randn(4, 5), _randn(4, 5))),
    (aten.silu_backward.default, (_randn(4, 5), _randn(4, 5))),
    (aten.sigmoid_backward.default, (_randn(4, 5), torch.rand(4, 5))),
    (aten.tanh_backward.default, (_randn(4, 5), torch.rand(4, 5))),
    (aten.hardtanh_backward.default, (_randn(4, 5), _randn(4, 5), -0.5, 0.5)),
    (aten.leaky_relu_backward.default, (_randn(4, 5), _randn(4, 5), 0.2, False)),
    (aten.elu_backward.default, (_randn(4, 5), 1.0, 1.0, 1.0, False, _randn(4, 5))),
    (aten.softplus_backward.default, (_randn(4, 5), _randn(4, 5), 1.0, 20.0)),
    (aten.mse_loss_backward.default, (torch.tensor(1.5), _randn(4, 5), _randn(4, 5), 1)),
    (aten.hardswish_backward.default, (_randn(4, 5), _randn(4, 5) * 4)),
    (aten.hardsigmoid_backward.default, (_randn(4, 5), _randn(4, 5) * 4)),
], ids=lambda v: str(v) if not isinstance(v, tuple) else "")
def test_pointwise_backward(op, args):
    check_op(op, args)


def test_gelu_tanh_backward():
    check_op(aten.gelu_backward.default, (_randn(4, 5), _randn(4, 5)), {"approximate": "tanh"})


def test_upsample_backward():
    grad = _randn(1, 2, 8, 6)
    check_op(aten.upsample_nearest2d_backward.default, (grad, [8, 6], [1, 2, 4, 3], 2.0, 2.0))
    check_op(aten.upsample_bilinear2d_backward.default,
             (grad, [8, 6], [1, 2, 4, 3], False, None, None))
    check_op(aten.upsample_bilinear2d_backward.default,
             (grad, [8, 6], [1, 2, 4, 3], True, None, None))


def test_reflection_replication_pad_backward():
    x = _randn(2, 3, 5, 6)
    check_op(aten.reflection_pad2d_backward.default, (_randn(2, 3, 8, 9), x, [1, 2, 2, 1]))
    check_op(aten.replication_pad2d_backward.default, (_randn(2, 3, 8, 9), x, [1, 2, 2, 1]))


def test_sdpa_cpu_kernels():
    q, k, v = _randn(2, 2, 5, 8), _randn(2, 2, 5, 8), _randn(2, 2, 5, 8)
    for causal in (False, True):
        check_op(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, k, v, 0.0, causal))
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, 0.0, causal)
        check_op(aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                 (_randn(*out.shape), q, k, v, out, lse, 0.0, causal))


EMBEDDING_BAGS = [
    # (mode, per_sample_weights, include_last_offset, padding_idx, scale_grad_by_freq)
    (0, False, False, -1, False), (0, True, False, -1, False), (0, False, True, 2, False),
    (1, False, False, -1, False), (1, False, True, 2, True), (0, False, False, 4, True),
    (2, False, False, -1, False), (2, False, True, 2, False),
]


@pytest.mark.parametrize("case", EMBEDDING_BAGS, ids=range(len(EMBEDDING_BAGS)))
def test_embedding_bag_forward_and_backward(case):
    """The lowering's bookkeeping outputs take the meta kernel's shapes (the CPU kernel
    leaves some empty), so the output and the gradients are compared with eager's."""
    mode, weighted, last, padding_idx, by_freq = case
    torch.manual_seed(0)
    weight = _randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4])
    offsets = torch.tensor([0, 4, 4, 7])  # the third bag is empty
    psw = _randn(9) if weighted else None
    args = (weight, indices, offsets, by_freq, mode, False, psw, last, padding_idx)
    expected = aten._embedding_bag.default(*args)
    on_meta = aten._embedding_bag.default(*[a.to("meta") if isinstance(a, torch.Tensor)
                                            else a for a in args])
    ours = lowering.lookup(aten._embedding_bag.default).fn(*[
        jnp.asarray(a.numpy()) if isinstance(a, torch.Tensor) else a for a in args])
    torch.testing.assert_close(torch.from_numpy(np.asarray(ours[0])), expected[0])
    assert [tuple(o.shape) for o in ours] == [tuple(m.shape) for m in on_meta]
    grad = _randn(*expected[0].shape)
    tail = (10, by_freq, mode, False, psw, padding_idx)
    want = aten._embedding_bag_backward.default(grad, indices, offsets, *expected[1:], 10,
                                                False, *tail[2:])
    if by_freq:  # torch's CPU kernel divides by the count of another row (it indexes the
        # counts by group number); CUDA and the docs divide each row by its own count.
        want = want / torch.bincount(indices, minlength=10).clamp(min=1)[:, None]
    got = lowering.lookup(aten._embedding_bag_backward.default).fn(
        jnp.asarray(grad.numpy()), jnp.asarray(indices.numpy()), jnp.asarray(offsets.numpy()),
        *ours[1:], *tail[:4], None if psw is None else jnp.asarray(psw.numpy()), padding_idx)
    torch.testing.assert_close(torch.from_numpy(np.asarray(got)), want)
    if weighted:
        want = aten._embedding_bag_per_sample_weights_backward.default(
            grad, weight, indices, offsets, expected[1], mode, padding_idx)
        got = lowering.lookup(aten._embedding_bag_per_sample_weights_backward.default).fn(
            jnp.asarray(grad.numpy()), jnp.asarray(weight.numpy()),
            jnp.asarray(indices.numpy()), jnp.asarray(offsets.numpy()), ours[1], mode,
            padding_idx)
        torch.testing.assert_close(torch.from_numpy(np.asarray(got)), want)


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
    x = _randn(2, 3, h, w)
    check_op(packet.default, (x, size, align_corners, *scales))
    check_op(getattr(aten, packet._qualified_op_name.split("::")[1] + "_backward").default,
             (_randn(2, 3, *size), size, [2, 3, h, w], align_corners, *scales))
    if scales[0] is None:
        check_op(packet.vec, (x, size, align_corners, None))
    else:
        check_op(packet.vec, (x, None, align_corners, list(scales)))
