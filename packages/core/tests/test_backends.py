"""`torch_xla.backends`: the matmul precision setting."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

import torch_xla
import torch_xla.backends as backends


@pytest.fixture(autouse=True)
def restore_jax_precision():
    torch_xla.device()  # torch_xla configures JAX's CPU platform before anything traces
    saved = jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_default_matmul_precision", saved)


def test_default_until_set():
    jax.config.update("jax_default_matmul_precision", None)
    assert backends.get_mat_mul_precision() == "default"


@pytest.mark.parametrize("precision", ["default", "high", "highest"])
def test_set_then_get(precision, caplog):
    backends.set_mat_mul_precision(precision)
    assert backends.get_mat_mul_precision() == precision
    assert "not recommended" in caplog.text


def test_invalid_precision_names_the_choices():
    with pytest.raises(ValueError, match="'medium'. Must be one of default, high, highest"):
        backends.set_mat_mul_precision("medium")


@pytest.mark.parametrize(
    "jax_name, ours", [("bfloat16", "default"), ("tensorfloat32", "high"), ("float32", "highest")]
)
def test_jax_names_read_as_ours(jax_name, ours):
    jax.config.update("jax_default_matmul_precision", jax_name)
    assert backends.get_mat_mul_precision() == ours


@pytest.mark.parametrize("precision", ["high", "highest"])
def test_the_setting_reaches_traced_dots(precision):
    backends.set_mat_mul_precision(precision)
    hlo = jax.jit(jnp.matmul).lower(jnp.ones((2, 2)), jnp.ones((2, 2))).as_text(dialect="hlo")
    assert f"operand_precision={{{precision},{precision}}}" in hlo


def test_highest_float32_matmul_matches_eager():
    backends.set_mat_mul_precision("highest")
    torch.manual_seed(0)
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    device = torch_xla.device()
    z = a.to(device) @ b.to(device)
    assert "operand_precision={highest,highest}" in torch_xla._XLAC._get_xla_tensors_hlo([z])
    torch.testing.assert_close(z.cpu(), a @ b, rtol=1e-6, atol=1e-5)
