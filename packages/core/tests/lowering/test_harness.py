"""The oracle itself: a wrong lowering, a float64 detour and a missing op are all caught."""

import jax.numpy as jnp
import pytest
import torch

from torch_xla.lowering import registry

from .harness import LoweringChecker, Mismatch, check_op, functional_twin

aten = torch.ops.aten


@pytest.fixture
def swap_lowering():
    saved = dict(registry._TABLE)

    def swap(op, fn):
        registry.register(op, override=True)(fn)

    yield swap
    registry._TABLE.clear()
    registry._TABLE.update(saved)


def test_wrong_values_are_reported(swap_lowering):
    swap_lowering(aten.sin.default, lambda x: jnp.cos(x))
    with pytest.raises(Mismatch, match=r"aten.sin.default\(Tensor\(4,\):float32\).*not close"):
        check_op(aten.sin.default, (torch.rand(4),))


def test_float64_detour_is_reported(swap_lowering):
    swap_lowering(aten.sin.default, lambda x: jnp.sin(x.astype(jnp.float64)).astype(x.dtype))
    with pytest.raises(Mismatch, match="computes in float64"):
        check_op(aten.sin.default, (torch.rand(4),))


def test_wrong_shape_is_reported(swap_lowering):
    swap_lowering(aten.sum.dim_IntList, lambda x, dim, keepdim=False, dtype=None: x)
    with pytest.raises(Mismatch, match="shape"):
        check_op(aten.sum.dim_IntList, (torch.rand(2, 3), [1]))


def test_checker_records_missing_and_inplace_twins():
    checker = LoweringChecker()
    x = torch.tensor([1.0, 0.0, 2.0])
    with checker:
        x.add_(1)
        torch.nonzero(x)
    statuses = {o.op: o.status for o in checker.outcomes}
    assert statuses["aten.add.Tensor"] == "native"
    assert statuses["aten.nonzero.default"] == "missing"


def test_functional_twins():
    assert functional_twin(aten.add_.Tensor) is aten.add.Tensor
    assert functional_twin(aten.bernoulli_.float) is aten.bernoulli.p
    assert functional_twin(aten._foreach_add_.List) is aten._foreach_add.List
    assert functional_twin(aten.add.Tensor) is None


def test_boolean_mask_index_raises_data_dependent_error():
    import torch_xla.lowering as lowering

    from .harness import prepare

    x, mask = torch.rand(4), torch.tensor([True, False, True, True])
    with pytest.raises(lowering.DataDependentShapeError, match="CPU"):
        prepare(aten.index.Tensor, (x, [mask]), {})
    # Outside jit (concrete values) the mask works, for a CPU-side evaluation.
    entry = lowering.lookup(aten.index.Tensor)
    assert entry.fn(jnp.asarray(x.numpy()), [jnp.asarray(mask.numpy())]).shape == (3,)
