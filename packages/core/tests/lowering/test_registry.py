"""The lowering table: registration, duplicates, lookups, where rules were defined."""

import importlib
import sys
import textwrap

import pytest
import torch

import torch_xla.lowering as lowering
from torch_xla.lowering import registry

aten = torch.ops.aten


@pytest.fixture
def scratch():
    """Overloads registered during a test are removed afterwards (the real ones restored)."""
    saved = dict(registry._TABLE)
    yield
    registry._TABLE.clear()
    registry._TABLE.update(saved)


def test_lookup_returns_lowering_with_source():
    entry = lowering.lookup(aten.add.Tensor)
    assert isinstance(entry, lowering.Lowering)
    assert aten.add.Tensor in entry.overloads
    assert entry.source.endswith(".py:" + entry.source.rsplit(":", 1)[1])
    assert "elementwise.py" in entry.source


def test_lookup_unknown_is_none():
    assert lowering.lookup(aten.nonzero.default) is None


def test_duplicate_registration_raises_with_both_sources(scratch):
    with pytest.raises(lowering.DuplicateLoweringError) as err:

        @lowering.register(aten.add.Tensor)
        def another_add(a, b, alpha=1):
            return a + b

    message = str(err.value)
    assert "aten.add.Tensor" in message and "elementwise.py" in message
    assert "test_registry.py" in message and "override=True" in message
    assert lowering.lookup(aten.add.Tensor).name == "add"


def test_override_replaces(scratch):
    @lowering.register(aten.add.Tensor, override=True)
    def my_add(a, b, alpha=1):
        return a

    assert lowering.lookup(aten.add.Tensor).fn is my_add


def test_packet_expands_to_functional_overloads(scratch):
    registry.unregister(registry.expand(aten.logical_xor))

    @lowering.register(aten.logical_xor)
    def xor(a, b):
        return a ^ b

    overloads = lowering.lookup(aten.logical_xor.default).overloads
    assert aten.logical_xor.default in overloads
    assert all("out" not in o._overloadname for o in overloads)


def test_none_entries_are_skipped_and_flags_kept(scratch):
    @lowering.register(None, aten.rand.default, needs_rng=True, override=True)
    def my_rand(size, *, rng, **kwargs):
        return None

    entry = lowering.lookup(aten.rand.default)
    assert entry.needs_rng and entry.overloads == (aten.rand.default,)


def test_register_rejects_non_ops():
    with pytest.raises(TypeError, match="OpOverload"):
        lowering.register("aten::add")(lambda a, b: a)


def test_register_needs_an_overload():
    with pytest.raises(ValueError, match="names no overload"):
        lowering.register(None)(lambda a: a)


HALF_IMPORTABLE = """
    import torch
    from torch_xla.lowering import register

    @register(torch.ops.aten.nonzero.default)
    def nonzero(x):
        return x

    torch.ops.aten.an_op_this_torch_lacks  # raises AttributeError, as on an older torch
"""


def test_a_failed_import_leaves_no_rule_and_fails_again_with_its_own_error(
    scratch, tmp_path, monkeypatch
):
    (tmp_path / "half_importable.py").write_text(textwrap.dedent(HALF_IMPORTABLE))
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delitem(sys.modules, "half_importable", raising=False)  # gone afterwards
    for attempt in range(2):
        with pytest.raises(AttributeError, match="an_op_this_torch_lacks"):
            importlib.import_module("half_importable")
        assert lowering.lookup(aten.nonzero.default) is None, attempt
        assert not [e for _, e in lowering.registered() if "half_importable" in e.source]

    fixed = HALF_IMPORTABLE.replace("torch.ops.aten.an_op_this_torch_lacks", "")
    (tmp_path / "half_importable.py").write_text(textwrap.dedent(fixed))
    module = importlib.import_module("half_importable")
    assert lowering.lookup(aten.nonzero.default).fn is module.nonzero


def test_random_ops_declare_rng():
    for op in (aten.bernoulli.p, aten.native_dropout.default, aten.rand.default,
               aten.randn.default, aten.randint.low, aten.uniform.default,
               aten.normal_functional.default, aten.randperm.default,
               aten.exponential.default, aten.multinomial.default):
        assert lowering.lookup(op).needs_rng, op
    assert not lowering.lookup(aten.add.Tensor).needs_rng


def test_importing_has_no_jax_config_side_effect():
    import subprocess
    import sys

    code = ("import jax, torch_xla.lowering; "
            "print(jax.config.jax_enable_x64)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"JAX_PLATFORMS": "cpu", "PATH": ""}, timeout=120)
    assert out.stdout.strip().endswith("False"), out.stderr[-2000:]
