"""Linear-algebra lowerings against eager, on every OpInfo sample (the shapes include
wide, tall and empty matrices, batches and partial reflector lists)."""

import pytest
import torch

from .harness import check_op
from .sweep import find

aten = torch.ops.aten


def _samples(name):
    return list(find(name).sample_inputs("cpu", torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64])
def test_ormqr_every_sample(dtype):
    for s in _samples("ormqr"):
        args = [a.to(dtype) for a in (s.input, *s.args)]
        check_op(aten.ormqr.default, tuple(args), s.kwargs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_householder_product_every_sample(dtype):
    for s in _samples("linalg.householder_product"):
        args = tuple(a.to(dtype) for a in (s.input, *s.args))
        check_op(aten.linalg_householder_product.default, args)
        check_op(aten.orgqr.default, args)



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matrix_exp_every_degree(dtype):
    """One matrix per 1-norm bucket of torch's algorithm (degrees 1 to 18 and scaling)."""
    torch.manual_seed(0)
    base = torch.randn(4, 4, dtype=dtype)
    base = base / base.abs().sum(-2).max()
    for norm in (0.0, 1e-9, 1e-5, 1e-2, 0.3, 1.0, 2.5, 9.0, 40.0):
        check_op(aten.linalg_matrix_exp.default, (base * norm,))
    check_op(aten.linalg_matrix_exp.default, (torch.stack([base * 0.01, base * 30]),))


@pytest.mark.parametrize("op", [aten._linalg_det.default, aten._linalg_slogdet.default])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_det_returns_the_lu_factors_eager_returns(op, dtype):
    """The backward solves with these factors (of A^T for real A), so they must be torch's,
    not only the determinant."""
    import jax.numpy as jnp
    import numpy as np

    from torch_xla import lowering

    torch.manual_seed(0)
    a = torch.randn(3, 4, 4, dtype=dtype)
    expected = op(a)
    got = lowering.lookup(op).fn(jnp.asarray(a.numpy()))
    for e, g in zip(expected[-2:], got[-2:], strict=True):
        torch.testing.assert_close(torch.from_numpy(np.asarray(g)), e, rtol=1e-5, atol=1e-5)
