"""`torch_xla.backends`: the matmul precision setting reaches the lowered graphs."""

from __future__ import annotations

import pytest
import torch

import torch_xla
import torch_xla.backends as backends
import torch_xla.debug.metrics as met


@pytest.fixture(autouse=True)
def restore_precision():
    saved = backends.get_mat_mul_precision()
    yield
    backends.set_mat_mul_precision(saved)


def test_highest_by_default_so_results_match_eager():
    assert backends.get_mat_mul_precision() == "highest"


@pytest.mark.parametrize("precision", ["default", "high", "highest"])
def test_set_then_get(precision, caplog):
    backends.set_mat_mul_precision(precision)
    assert backends.get_mat_mul_precision() == precision
    assert "not recommended" in caplog.text


def test_invalid_precision_names_the_choices():
    with pytest.raises(ValueError, match="'medium'. Must be one of default, high, highest"):
        backends.set_mat_mul_precision("medium")


def _hlo(fn, *shapes):
    device = torch_xla.device()
    torch.manual_seed(0)
    args = [torch.randn(*s).to(device) for s in shapes]
    return torch_xla._XLAC._get_xla_tensors_hlo([fn(*args)])


OPS = {
    "mm": (lambda a, b: a @ b, (4, 8), (8, 3)),
    "linear": (torch.nn.functional.linear, (4, 8), (3, 8)),
    "conv2d": (torch.nn.functional.conv2d, (1, 2, 5, 5), (3, 2, 3, 3)),
    "sdpa": (torch.nn.functional.scaled_dot_product_attention, (1, 4, 8), (1, 4, 8), (1, 4, 8)),
}


@pytest.mark.parametrize("precision", ["default", "high", "highest"])
@pytest.mark.parametrize("op", OPS)
def test_the_setting_reaches_the_ops_dots_and_convolutions(precision, op):
    backends.set_mat_mul_precision(precision)
    fn, *shapes = OPS[op]
    hlo = _hlo(fn, *shapes)
    expected = f"operand_precision={{{precision},{precision}}}"
    if precision == "default":  # XLA prints no attribute for the default precision
        assert "operand_precision=" not in hlo
    else:
        assert expected in hlo


def test_a_change_recompiles_the_same_graph_with_the_new_precision():
    device = torch_xla.device()
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    xa, xb = a.to(device), b.to(device)
    backends.set_mat_mul_precision("highest")
    (xa @ xb).cpu()
    met.clear_counters()
    (xa @ xb).cpu()
    assert met.counter_value("UncachedCompile") is None  # cached at one precision
    backends.set_mat_mul_precision("high")
    z = xa @ xb
    assert "operand_precision={high,high}" in torch_xla._XLAC._get_xla_tensors_hlo([z])
    z.cpu()
    assert met.counter_value("UncachedCompile") == 1


def test_highest_float32_matmul_matches_eager():
    backends.set_mat_mul_precision("highest")
    torch.manual_seed(0)
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    device = torch_xla.device()
    z = a.to(device) @ b.to(device)
    torch.testing.assert_close(z.cpu(), a @ b, rtol=1e-6, atol=1e-5)
