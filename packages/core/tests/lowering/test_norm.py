"""Normalisation lowerings: batch norm (training, inference, functional variants), layer
and group norm, with their backward ops."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from torch_xla import lowering

from .harness import check_op

aten = torch.ops.aten


@pytest.mark.parametrize("training", [True, False])
def test_native_batch_norm_and_backward(training):
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    check_op(aten.native_batch_norm.default, (x, w, b, mean, var, training, 0.1, 1e-5))
    out, save_mean, save_invstd = aten.native_batch_norm.default(
        x, w, b, mean.clone(), var.clone(), training, 0.1, 1e-5)
    grad = torch.randn(*out.shape)
    check_op(aten.native_batch_norm_backward.default,
             (grad, x, w, mean, var, save_mean, save_invstd, training, 1e-5,
              [True, True, True]))


def test_batch_norm_functional_variants_update_running_stats():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 3, 2, 2), torch.randn(3), torch.randn(3)
    check_op(aten._native_batch_norm_legit_functional.default,
             (x, w, b, torch.zeros(3), torch.ones(3), True, 0.1, 1e-5))
    # Inference mode: torch's CPU kernel returns empty save_mean/save_invstd, its meta
    # kernel (C,) ones; the lowering follows the meta kernel, which the engine trusts.
    stats = (x, w, b, torch.randn(3), torch.rand(3) + 1, 0.1, 1e-5)
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
    x, w, b = torch.randn(2, 5, 6), torch.randn(6), torch.randn(6)
    out, mean, rstd = aten.native_layer_norm.default(x, [6], w, b, 1e-5)
    check_op(aten.native_layer_norm.default, (x, [6], w, b, 1e-5))
    check_op(aten.native_layer_norm_backward.default,
             (torch.randn(*out.shape), x, [6], mean, rstd, w, b, [True, True, True]))
    x = torch.randn(2, 6, 4, 4)
    w, b = torch.randn(6), torch.randn(6)
    out, mean, rstd = aten.native_group_norm.default(x, w, b, 2, 6, 16, 3, 1e-5)
    check_op(aten.native_group_norm.default, (x, w, b, 2, 6, 16, 3, 1e-5))
    check_op(aten.native_group_norm_backward.default,
             (torch.randn(*out.shape), x, mean, rstd, w, 2, 6, 16, 3, [True, True, True]))
