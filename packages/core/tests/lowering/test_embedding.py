"""Embedding lowerings: the dense backward and embedding_bag, whose bookkeeping outputs
follow the meta kernel."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from torch_xla import lowering

from .harness import check_op

aten = torch.ops.aten


def test_embedding_dense_backward():
    torch.manual_seed(0)
    indices = torch.tensor([[0, 2, 2], [5, 0, 1]])
    grad = torch.randn(2, 3, 4)
    for padding_idx, scale in [(-1, False), (2, False), (-1, True)]:
        check_op(aten.embedding_dense_backward.default, (grad, indices, 6, padding_idx, scale))


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
    weight = torch.randn(10, 3)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4])
    offsets = torch.tensor([0, 4, 4, 7])  # the third bag is empty
    psw = torch.randn(9) if weighted else None
    args = (weight, indices, offsets, by_freq, mode, False, psw, last, padding_idx)
    expected = aten._embedding_bag.default(*args)
    on_meta = aten._embedding_bag.default(*[a.to("meta") if isinstance(a, torch.Tensor)
                                            else a for a in args])
    ours = lowering.lookup(aten._embedding_bag.default).fn(*[
        jnp.asarray(a.numpy()) if isinstance(a, torch.Tensor) else a for a in args])
    torch.testing.assert_close(torch.from_numpy(np.asarray(ours[0])), expected[0])
    assert [tuple(o.shape) for o in ours] == [tuple(m.shape) for m in on_meta]
    grad = torch.randn(*expected[0].shape)
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


@pytest.mark.parametrize("mode,weighted,padding_idx", [
    (0, False, -1), (1, False, -1), (0, True, -1), (1, False, 4), (0, True, 2),
])
def test_embedding_bag_sparse_backward_is_the_dense_gradient(mode, weighted, padding_idx):
    """XLA tensors are dense: `sparse=True` gives the dense gradient (as PyTorch/XLA
    does), equal to the CPU's sparse gradient made dense; before, the lowering raised.
    Tolerance: float32 defaults (rtol 1.3e-6, atol 1e-5)."""
    torch.manual_seed(0)
    weight = torch.randn(10, 3, requires_grad=True)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 4])
    offsets = torch.tensor([0, 4, 4, 7])
    psw = torch.randn(9) if weighted else None
    grad = torch.randn(4, 3)
    out = torch.nn.functional.embedding_bag(
        indices, weight, offsets, mode=["sum", "mean"][mode], sparse=True,
        per_sample_weights=psw, padding_idx=None if padding_idx < 0 else padding_idx)
    out.backward(grad)
    assert weight.grad.layout == torch.sparse_coo

    def jax(t):
        return None if t is None else jnp.asarray(t.detach().numpy())

    ours = lowering.lookup(aten._embedding_bag.default).fn(
        jax(weight), jax(indices), jax(offsets), False, mode, True, jax(psw), False,
        padding_idx)
    got = lowering.lookup(aten._embedding_bag_backward.default).fn(
        jax(grad), jax(indices), jax(offsets), *ours[1:], 10, False, mode, True, jax(psw),
        padding_idx)
    torch.testing.assert_close(torch.from_numpy(np.asarray(got)), weight.grad.to_dense())
