"""The decomposition table and how much of Core ATen is lowered natively."""

import torch

import torch_xla.lowering as lowering

from .expectations import NOT_LOWERED

aten = torch.ops.aten

# Core ATen ops without a native lowering, and why.
CORE_NOT_LOWERED = {
    "aten.nonzero.default": NOT_LOWERED["aten.nonzero.default"],
    "aten.resize_.default": NOT_LOWERED["aten.resize_.default"],
    "aten.atan2.out": "an out= variant: functionalization never sends it",
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
