"""The decomposition table and how much of Core ATen is lowered natively."""

import pytest
import torch
import torch._decomp
from opinfo_expectations import NOT_LOWERED

import torch_xla.lowering as lowering

aten = torch.ops.aten

# Core ATen ops without a native lowering, and why.
CORE_NOT_LOWERED = {
    "aten.nonzero.default": NOT_LOWERED["aten.nonzero.default"],
    "aten.resize_.default": NOT_LOWERED["aten.resize_.default"],
}


def test_core_aten_coverage():
    core = lowering.core_aten_ops()
    missing = sorted(str(op) for op in core if lowering.lookup(op) is None)
    assert len(core) > 150
    unexpected = [op for op in missing if op not in CORE_NOT_LOWERED]
    assert not unexpected, f"Core ATen ops without lowering: {unexpected}"


def test_decompositions_exclude_lowered_ops():
    table = lowering.decompositions()
    assert table, "torch._decomp gave no decompositions"
    assert not [op for op in table if lowering.lookup(op) is not None]
    # Ops we do not lower but torch can decompose into lowered ones.
    for op in (aten.pixel_shuffle.default, aten.isin.Tensor_Tensor):
        assert op in table, op


def test_decompositions_never_cover_data_dependent_ops():
    table = lowering.decompositions()
    assert aten.nonzero.default not in table
    assert aten._local_scalar_dense.default not in table


def test_registering_a_lowering_removes_its_decomposition():
    from torch_xla.lowering import registry

    op = aten.pixel_shuffle.default
    assert op in lowering.decompositions()
    lowering.register(op)(lambda x, upscale_factor: x)
    try:
        assert op not in lowering.decompositions()
    finally:
        registry.unregister([op])


def _own_matches_eager(op, args):
    expected = op(*args)
    got = lowering.decompositions()[op](*args)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("p,margin,weighted", [(1, 1.0, False), (2, 0.5, True), (1, 2.0, True)])
def test_multi_margin_loss_backward(reduction, p, margin, weighted):
    torch.manual_seed(0)
    x, target = torch.randn(6, 5), torch.tensor([0, 4, 2, 2, 1, 3])
    weight = torch.rand(5) if weighted else None
    grad = torch.randn(6) if reduction == 0 else torch.tensor(1.7)
    op = aten.multi_margin_loss_backward.default
    _own_matches_eager(op, (grad, x, target, p, margin, weight, reduction))
    grad = torch.tensor(0.3)  # one sample: 1-D input, 0-d target
    _own_matches_eager(op, (grad, x[0], target[0], p, margin, weight, reduction))


# Targets with labels after a row's first -1 (they do not count), repeats, and a row that
# lists every class.
MULTILABEL_TARGETS = torch.tensor([[3, 0, -1, 1, 1], [1, 2, 3, 4, 0], [-1, 2, 2, 0, 0],
                                   [4, 4, -1, 0, 0]])


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_multilabel_margin_loss_backward(reduction):
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    target = MULTILABEL_TARGETS
    _, is_target = aten.multilabel_margin_loss_forward.default(x, target, reduction)
    grad = torch.randn(4) if reduction == 0 else torch.tensor(0.6)
    op = aten.multilabel_margin_loss_backward.default
    _own_matches_eager(op, (grad, x, target, reduction, is_target))
    _, is_target = aten.multilabel_margin_loss_forward.default(x[0], target[0], reduction)
    grad = torch.tensor(0.6)
    _own_matches_eager(op, (grad, x[0], target[0], reduction, is_target))


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_multilabel_margin_loss_forward_corrects_torchs(reduction):
    """torch's decomposition counts labels after the first -1 and shapes a 1-D input's
    unreduced loss (1,); ours replaces it and matches the CPU kernel."""
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    op = aten.multilabel_margin_loss_forward.default
    assert lowering.decompositions()[op] is not torch._decomp.decomposition_table[op]
    _own_matches_eager(op, (x, MULTILABEL_TARGETS, reduction))
    for row in range(4):
        _own_matches_eager(op, (x[row], MULTILABEL_TARGETS[row], reduction))
    _own_matches_eager(op, (x[0, 0], MULTILABEL_TARGETS[0, 1], reduction))


def _histogram_inputs():
    torch.manual_seed(0)
    x = torch.randn(40) * 3
    x[3], x[7] = float("nan"), x[5]  # NaN never counts; a tie
    return x, torch.rand(40)


@pytest.mark.parametrize("bins", [1, 5, 17])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("range_", [None, (-2.0, 4.0)])
def test_histogram_bin_count(bins, weighted, density, range_):
    x, w = _histogram_inputs()
    x = x.nan_to_num(0.5) if range_ is None else x  # torch takes min/max of the values
    kwargs = {"range": range_, "weight": w if weighted else None, "density": density}
    _own_kwargs_match(aten.histogram.bin_ct, (x, bins), kwargs)
    _own_kwargs_match(aten.histogram.bin_ct, (torch.full((4,), 2.5), bins), {})  # empty range


def test_histogram_bin_edges_given():
    x, w = _histogram_inputs()
    edges = torch.tensor([-4.0, -1.0, 0.0, 0.5, 3.0])
    for kwargs in ({}, {"weight": w}, {"density": True}):
        _own_kwargs_match(aten.histogram.bins_tensor, (x, edges), kwargs)


@pytest.mark.parametrize("density", [False, True])
def test_histogramdd(density):
    torch.manual_seed(0)
    x, w = torch.randn(30, 3), torch.rand(30)
    bins = [2, 3, 4]
    _own_kwargs_match(aten._histogramdd_bin_edges.default, (x, bins), {})
    for kwargs in ({"density": density}, {"weight": w, "range": [-1.0, 1, -2, 2, 0, 1]}):
        _own_kwargs_match(aten._histogramdd_from_bin_cts.default, (x, bins), kwargs)
    edges = [torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([-3.0, 3.0]),
             torch.tensor([1.0, -1.0])]  # decreasing edges count nothing
    _own_kwargs_match(aten._histogramdd_from_bin_tensors.default, (x, edges),
                      {"weight": w, "density": density})


def _own_kwargs_match(op, args, kwargs):
    expected = op(*args, **kwargs)
    got = lowering.decompositions()[op](*args, **kwargs)
    torch.testing.assert_close(got, expected, equal_nan=True)
